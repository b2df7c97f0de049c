#!/usr/bin/env python3
"""A long soak through the whole graph: the bundled session looped over DDS, per-node resources.

The replay profile's nodes (fusion, dialogue, speech to the null sink, power manager) run in
their own processes under the supervisor ``omniflow run`` uses (each respawned if it dies;
respawns are reported), on ``/clock``. This process plays ``test/data/samples/session.mcap``
into them in a loop at ``--rate`` (the clock moves on across loops, the stream stamps start
again: each loop is also a stream restart for the fusion node) for ``--minutes`` of wall time.
The default rate is 1, a user at human pace. At 2 the graph must hear the microphone twice as
fast as it comes while the model and the voice still take their own time: the user then
seems to go on in every pause, most turns are cancelled before their first word, and the
recogniser, running behind, hears words in noise (a stress, not a conversation).

Every ``--sample-s`` seconds it reads, per node process, the resident set size, the threads
and the open file descriptors (``/proc``), and the nodes in the ROS graph under the soak's namespace
(a leak of DDS participants or nodes shows there; nodes of other programs in the same domain
are listed, not judged). Per loop: the answers (final response chunks) and the
latency from each final transcript to the first chunk of the answer it started (wall time of
arrival here), the final transcripts heard (and the span of the session each covers, in
seconds from its first microphone sample: ``heard_at_s``), the user's words each turn
answered (carried-over words included), and why the dialogue changed state (the
``dialogue_state`` reasons, digits left out, counted): a loop without an answer says whether
the words were not heard, the turn was cancelled (by what) or the answer never came. At the
end, each node's ``~/status`` counters; ``--logs DIR`` keeps each node's output there.

Reported: per node RSS at start, after ``--warmup`` minutes and at the end, and its slope after
the warm-up (MB/hour, least squares), the same split by what is resident (the
brk heap, other anonymous memory, DDS shared-memory segments, pages of mapped files:
``/proc/<pid>/smaps``), threads and descriptors at the same points. Shared memory is
reported with what is mapped of it (``shm_mapped_end``), its ceiling: a node's resident shared
memory grows as it first reads pages of its peers' segments, which are of fixed size (the
player's, under the large-frames profile, is 16.75 MB, and every node reads the clock and
audio it writes there), so that growth is bounded, not a leak. A sample can fall while a
decode holds its buffers (tens of MB for the fusion node's recogniser, a few for the model's
batch) or after they went back to the system, so the slope of every sample measures when the
samples fell as much as growth; the floor (the lowest RSS of each ``--floor-min`` window, at
the window's middle) is what the node keeps between those buffers, and its slope after the
warm-up is the growth figure (target <= 0.03; a leak raises the floor, a buffer in use does
not). Every node still climbs for about half an hour: warm up for 35 minutes. Answers and
median latency per loop, and the latency of the first loops after the warm-up against the last
ones (drift).
Prints JSON; ``--json PATH`` also writes it; ``--logs DIR`` also keeps every sample in
``DIR/samples.csv``.

    .venv/bin/python benchmarks/soak.py --minutes 85 --warmup 35 --sample-s 5 --logs build/soak
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import re
import signal
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import rclpy
from _common import median, ratio, slope_per_hour, smaps_fields, summary, write_result
from std_msgs.msg import String

from omniflow.bag import BagReader
from omniflow.core.timing import NS_PER_S
from omniflow.graph import RESPAWN_DELAY_S, frame_publisher_env, graph_topic_name, profile_nodes
from omniflow.launcher import Supervisor
from omniflow.msg import DialogueState, ResponseChunk, Transcript
from omniflow.resources import sample, share_dir
from omniflow.ros.bag_io import Player
from omniflow.ros.conversions import ns_from_time
from omniflow.ros.monitor import spinning
from omniflow.ros.qos import EVENTS, LATCHED, STATE_CHANGES

#: What a process's resident memory is, by mapping (``/proc/<pid>/smaps``): the brk heap,
#: other anonymous memory (malloc's other arenas, Python's object arenas, thread stacks), the
#: DDS middleware's shared-memory segments, and pages of mapped files (libraries, models).
RSS_KINDS = ("heap", "anon", "shm", "file")
#: Columns of ``samples.csv`` (``--logs``): one row per node per sample, memory in MB.
SAMPLE_COLUMNS = ("minute", "node", "rss_mb", *(f"{k}_mb" for k in RSS_KINDS), "threads", "fds")


def rss_kind(mapping: str) -> str:
    """The :data:`RSS_KINDS` entry of a mapping named as :func:`_common.smaps_fields` names it."""
    if mapping == "[heap]":
        return "heap"
    if mapping.startswith("/dev/shm/"):
        return "shm"
    return "file" if mapping.startswith("/") else "anon"


def floor(points: list[tuple[float, float]], window_min: float) -> list[tuple[float, float]]:
    """The lowest value of each ``window_min``-minute window of ``(minute, value)`` points
    (windows counted from the first point), placed at the window's middle; windows without a
    point are left out."""
    if not points or window_min <= 0:
        return list(points)
    start = points[0][0]
    lowest: dict[int, float] = {}
    for minute, value in points:
        window = int((minute - start) // window_min)
        lowest[window] = min(value, lowest.get(window, value))
    return [(start + (w + 0.5) * window_min, v) for w, v in sorted(lowest.items())]


def proc_figures(pid: int) -> dict | None:
    """RSS (MB, and by kind), threads and open descriptors of a process; None when it is
    gone."""
    try:
        kinds = dict.fromkeys(RSS_KINDS, 0.0)
        shm_mapped = 0
        for mapping, kb in smaps_fields(pid, ("Rss", "Size")).items():
            kind = rss_kind(mapping)
            kinds[kind] += kb["Rss"] / 1024
            if kind == "shm":
                shm_mapped += kb["Size"]
        threads = len(os.listdir(f"/proc/{pid}/task"))
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError):
        return None
    return {
        "rss_mb": sum(kinds.values()),
        "rss_kinds_mb": kinds,
        "shm_mapped_mb": shm_mapped / 1024,
        "threads": threads,
        "fds": fds,
    }


def graph_names(node) -> list[str]:
    """Every node the ROS graph holds, by full name."""
    return sorted(f"{ns.rstrip('/')}/{name}" for name, ns in node.get_node_names_and_namespaces())


def graph_growth(graph_nodes: list[tuple[float, list[str]]], namespace: str) -> dict | None:
    """The soak's own nodes (those in its namespace: every node its processes create is
    there) at the first and last sample, and which appeared or went in between, by name; and
    the nodes of the same domain outside it (other programs, which the soak does not judge)."""
    if not graph_nodes:
        return None
    prefix = namespace.rstrip("/") + "/"
    first = {n for n in graph_nodes[0][1] if n.startswith(prefix)}
    last = {n for n in graph_nodes[-1][1] if n.startswith(prefix)}
    return {
        "first": len(first),
        "last": len(last),
        "appeared": sorted(last - first),
        "gone": sorted(first - last),
        "outside": sorted(n for n in graph_nodes[-1][1] if not n.startswith(prefix)),
    }


@dataclass
class Outputs:
    """What the graph said, as it arrived: finals, answers and statuses."""

    loop: int = 0
    finals: dict[int, float] = field(default_factory=dict)  # utterance id -> arrival
    answers: list[tuple[int, float]] = field(default_factory=list)  # (loop, latency s)
    done: list[int] = field(default_factory=list)  # the loop of each final response chunk
    _pending: float | None = None  # the newest final's arrival, until a turn's first chunk
    _seen_turns: set[int] = field(default_factory=set)
    status: dict[str, dict] = field(default_factory=dict)
    heard: list[tuple[int, str, float, float]] = field(default_factory=list)
    stream_origin_ns: int = 0  # the session's first microphone stamp: heard spans count from it
    said: list[tuple[int, str]] = field(default_factory=list)  # (loop, a turn's user text)
    reasons: list[tuple[int, str]] = field(default_factory=list)  # (loop, state change reason)

    def on_transcript(self, msg: Transcript) -> None:
        if msg.is_final:
            start, end = (
                round((ns_from_time(t) - self.stream_origin_ns) / NS_PER_S, 2)
                for t in (msg.start, msg.end)
            )
            self.heard.append((self.loop, msg.text.strip(), start, end))
        if msg.is_final and msg.text.strip():
            self._pending = time.monotonic()

    def on_said(self, msg: Transcript) -> None:
        self.said.append((self.loop, msg.text))

    def on_state(self, msg: DialogueState) -> None:
        self.reasons.append((self.loop, re.sub(r"\d+(\.\d+)?", "N", msg.reason)))

    def on_chunk(self, msg: ResponseChunk) -> None:
        if msg.turn_id not in self._seen_turns:
            self._seen_turns.add(msg.turn_id)
            if self._pending is not None:
                self.answers.append((self.loop, time.monotonic() - self._pending))
                self._pending = None
        if msg.is_final:
            self.done.append(self.loop)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="wall time of the soak")
    parser.add_argument("--warmup", type=float, default=5.0, help="minutes left out of slopes")
    parser.add_argument("--rate", type=float, default=1.0, help="playback rate of the session")
    parser.add_argument("--sample-s", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--json", type=Path, help="also write the JSON here")
    parser.add_argument(
        "--floor-min", type=float, default=2.0, help="minutes per window of the RSS floor"
    )
    parser.add_argument(
        "--logs", type=Path, help="keep each node's output in DIR/<node>.log, samples.csv"
    )
    args = parser.parse_args()
    # SIGTERM unwinds like Ctrl-C, so the nodes are stopped (and --logs written), not orphaned.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("soak: stopped by SIGTERM"))
    result = run(args.minutes, args.warmup, args.rate, args.sample_s, args.floor_min, args.logs)
    write_result(result, args.json)


def run(
    minutes: float,
    warmup: float,
    rate: float,
    sample_s: float,
    floor_min: float,
    logs: Path | None,
) -> dict:
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    namespace = f"/soak{uuid.uuid4().hex[:6]}"
    share = str(share_dir())
    specs = profile_nodes("replay", share, namespace, log_level="warn")
    names = [spec.name for spec in specs]
    respawn_lines: list[str] = []
    supervisor = Supervisor(specs, set(names), RESPAWN_DELAY_S, report=respawn_lines.append)
    os.environ.update(frame_publisher_env(share))  # this process plays the frames
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("omniflow_soak", namespace=namespace, context=context)
    outputs = Outputs()
    node.create_subscription(Transcript, "transcript", outputs.on_transcript, EVENTS)
    node.create_subscription(ResponseChunk, "response", outputs.on_chunk, EVENTS)
    node.create_subscription(DialogueState, "dialogue_state", outputs.on_state, STATE_CHANGES)
    node.create_subscription(Transcript, "user_said", outputs.on_said, EVENTS)
    for name in names:
        node.create_subscription(
            String,
            f"{name}/status",
            lambda msg, name=name: outputs.status.__setitem__(name, json.loads(msg.data)),
            LATCHED,
        )
    reader = BagReader(sample("session.mcap"))
    first_chunk = next(msg for _, msg in reader.decoded(["audio"]))
    outputs.stream_origin_ns = ns_from_time(first_chunk.header.stamp)
    remap = {topic: graph_topic_name(topic) for topic in reader.topics}
    player = Player(node, reader, namespace=namespace, rate=rate, clock=True, remap=remap)
    stop = threading.Event()
    samples: list[tuple[float, str, dict]] = []  # (minute, node, proc_figures)
    graph_nodes: list[tuple[float, list[str]]] = []  # (minute, every node's full name)
    loop_starts: list[float] = []
    try:
        with spinning(node):
            deadline = time.monotonic() + 120
            while any(outputs.status.get(n, {}).get("state") != "active" for n in names):
                if time.monotonic() > deadline:
                    raise SystemExit(f"nodes not active within 120 s: {outputs.status}")
                supervisor.poll()
                time.sleep(0.2)
            player.wait_for_subscribers(10.0)

            def play() -> None:
                player.play(loop=True, stop=stop, preroll_s=0.5)

            def on_loop() -> None:  # the player counts loops; mirror them for the outputs
                while not stop.wait(0.2):
                    if player.stats.loops != outputs.loop:
                        outputs.loop = player.stats.loops
                        loop_starts.append(time.monotonic())

            threads = [threading.Thread(target=t, daemon=True) for t in (play, on_loop)]
            for thread in threads:
                thread.start()
            began = time.monotonic()
            next_sample = began
            while (now := time.monotonic()) < began + minutes * 60:
                supervisor.poll()
                if now >= next_sample:
                    minute = (now - began) / 60
                    for name, process in supervisor.processes.items():
                        figures = proc_figures(process.process.pid)
                        if figures is not None:
                            samples.append((minute, name, figures))
                    graph_nodes.append((minute, graph_names(node)))
                    next_sample += sample_s
                time.sleep(0.2)
            stop.set()
            for thread in threads:
                thread.join(10)
            time.sleep(1.0)  # the last statuses
    finally:
        stop.set()
        if logs is not None:
            logs.mkdir(parents=True, exist_ok=True)
            for name, process in supervisor.processes.items():
                process.stop()
                (logs / f"{name}.log").write_text(process.output(), encoding="utf-8")
            write_samples(logs / "samples.csv", samples)
        supervisor.close()
        node.destroy_node()
        rclpy.shutdown(context=context)
    graph = graph_growth(graph_nodes, namespace)
    return report(
        names, samples, graph, outputs, player, respawn_lines, minutes, warmup, rate, floor_min
    )


def write_samples(path: Path, samples: list[tuple[float, str, dict]]) -> None:
    """Every sample as a row of :data:`SAMPLE_COLUMNS`."""
    with path.open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(SAMPLE_COLUMNS)
        for minute, name, f in samples:
            kinds = [round(f["rss_kinds_mb"][k], 3) for k in RSS_KINDS]
            writer.writerow(
                [round(minute, 3), name, round(f["rss_mb"], 3), *kinds, f["threads"], f["fds"]]
            )


def report(names, samples, graph, outputs, player, respawn_lines, minutes, warmup, rate, floor_min):
    nodes = {}
    for name in names:
        rows = [(m, f) for m, n, f in samples if n == name]
        if not rows:
            nodes[name] = None
            continue
        after = [(m, f) for m, f in rows if m >= warmup] or rows[-1:]
        lows = floor([(m, f["rss_mb"]) for m, f in after], floor_min)
        nodes[name] = {
            "rss_mb": {
                "start": round(rows[0][1]["rss_mb"], 1),
                "after_warmup": round(after[0][1]["rss_mb"], 1),
                "end": round(rows[-1][1]["rss_mb"], 1),
                "mb_per_hour_after_warmup": slope_per_hour(
                    [m for m, _ in after], [f["rss_mb"] for _, f in after], 3
                ),
                "floor_after_warmup": [round(lows[0][1], 2), round(lows[-1][1], 2)],
                "floor_mb_per_hour_after_warmup": slope_per_hour(
                    [m for m, _ in lows], [v for _, v in lows], 3
                ),
                "by_kind": {
                    kind: {
                        "end": round(rows[-1][1]["rss_kinds_mb"][kind], 2),
                        "mb_per_hour_after_warmup": slope_per_hour(
                            [m for m, _ in after],
                            [f["rss_kinds_mb"][kind] for _, f in after],
                            3,
                        ),
                    }
                    for kind in RSS_KINDS
                },
                "shm_mapped_end": round(rows[-1][1]["shm_mapped_mb"], 2),
            },
            "threads": [rows[0][1]["threads"], after[0][1]["threads"], rows[-1][1]["threads"]],
            "fds": [rows[0][1]["fds"], after[0][1]["fds"], rows[-1][1]["fds"]],
            "status": outputs.status.get(name, {}),
        }
    loops = player.stats.loops
    per_loop = [
        {
            "loop": loop,
            "answers": sum(1 for d in outputs.done if d == loop),
            "latency_s": median([s for lp, s in outputs.answers if lp == loop], 3),
            "heard": [text for lp, text, _, _ in outputs.heard if lp == loop],
            "heard_at_s": [[a, b] for lp, _, a, b in outputs.heard if lp == loop],
            "turns": [text for lp, text in outputs.said if lp == loop],
            "dialogue": dict(Counter(reason for lp, reason in outputs.reasons if lp == loop)),
        }
        for loop in range(loops + 1)
    ]
    minutes_per_loop = minutes / max(loops, 1)
    first_loop = int(warmup / minutes_per_loop) if minutes_per_loop else 0
    warm = [s for lp, s in outputs.answers if lp >= first_loop]
    early = [s for lp, s in outputs.answers if first_loop <= lp < first_loop + 5]
    late = [s for lp, s in outputs.answers if lp >= max(loops - 4, first_loop)]
    return {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "minutes": minutes,
        "warmup_minutes": warmup,
        "floor_window_minutes": floor_min,
        "rate": rate,
        "loops": loops,
        "respawns": [line.splitlines()[0] for line in respawn_lines],
        "graph_nodes": graph,
        "nodes": nodes,
        "answers_per_loop": summary([p["answers"] for p in per_loop[:-1]], 1),
        "latency_s_after_warmup": summary(warm, 3),
        "latency_drift": {
            "first_loops_median_s": median(early, 3),
            "last_loops_median_s": median(late, 3),
            "ratio": ratio(median(late, 3), median(early, 3)),
        },
        "per_loop": per_loop,
    }


if __name__ == "__main__":
    main()
