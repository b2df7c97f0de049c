"""The demo: the omniflow graph on a recorded session, and what it made of it.

Replays a session bag (by default the bundled ``session.mcap``: a user asking "What is this?"
while pointing at a cup, an echo of the robot's own voice, a barge-in) into the replay
profile's nodes (fusion, dialogue, speech to the null sink and the power manager), each in its
own process on /clock, records their outputs, and prints the transcript, the frames each
association chose and the response as it streams; at the end a per-stage latency table. It
writes a timeline picture, a JSON report, the chosen frames and the recorded outputs (a bag)
under an output directory it prints.

    omniflow demo                                   # the bundled session
    omniflow demo --bag my_session/                 # a bag of yours (audio + image_raw)
    omniflow demo --audio me.wav --video me.mp4     # your own files (made into a bag first)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from omniflow import report
from omniflow.bag import BagReader, BagWriter, decode
from omniflow.core.timing import NS_PER_S
from omniflow.errors import BagError, OmniflowError, SourceError
from omniflow.graph import (
    INPUT_TOPICS,
    PROFILES,
    TOPICS,
    frame_publisher_env,
    output_topics,
    profile_nodes,
)
from omniflow.launcher import NodeProcess
from omniflow.resources import sample, share_dir

NAMESPACE = "/omniflow_demo"
# Models load on configure: generous on a loaded 2-core machine.
READY_TIMEOUT_S = 120.0
SUBSCRIBER_TIMEOUT_S = 30.0
# /clock keeps running this long after the last message, so the end of speech is heard.
TAIL_S = 2.5
# After the tail, the clock keeps running until the dialogue is listening again (the last
# answer spoken), at most this long (wall).
ANSWER_WAIT_S = 60.0
# Wall time for the last outputs to arrive after the tail.
SETTLE_S = 1.0
# Recorded besides the outputs: the microphone (for the capture row and the timeline) and
# the diagnostics (the fusion node's stage times).
EXTRA_RECORDED = ("audio", "/diagnostics")
ACTIVE = 3  # lifecycle_msgs/State.PRIMARY_STATE_ACTIVE


def default_bag() -> Path:
    """The bundled sample session."""
    return sample("session.mcap")


@dataclass
class SessionResult:
    """One run: where its files are, and the decoded run for reports and comparisons."""

    out_dir: Path
    input_bag: Path
    outputs_bag: Path
    run: report.Run
    problems: list[str] = field(default_factory=list)


class Progress:
    """Steps and a progress line on stderr (overwritten in place on a terminal)."""

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self._tty = sys.stderr.isatty()
        self._step = 0

    def step(self, text: str, total: int = 5) -> None:
        self._step += 1
        if not self.quiet:
            print(f"[{self._step}/{total}] {text}", file=sys.stderr, flush=True)

    def bar(self, done: float, total: float, what: str, unit: str = " s") -> None:
        if self.quiet:
            return
        width = 30
        filled = int(width * min(done / total, 1.0)) if total else width
        line = (
            f"      [{'#' * filled}{'.' * (width - filled)}] {done:5.1f} / {total:.1f}{unit} {what}"
        )
        if self._tty:
            print("\r" + line, end="" if done < total else "\n", file=sys.stderr, flush=True)
        elif done >= total or int(done) % 4 == 0:
            print(line, file=sys.stderr, flush=True)


class LivePrinter:
    """Prints what the graph says as it arrives: transcripts, associations, response text."""

    def __init__(self, start_ns: int, out: Callable[[str], None] | None = None) -> None:
        self._start_ns = start_ns
        self._out = out or (lambda text: print(text, flush=True))
        self._lock = threading.Lock()
        self._turn: int | None = None
        self._triggers: set[int] = set()

    def _t(self, ns: int) -> str:
        return f"[{(ns - self._start_ns) / NS_PER_S:6.2f} s]"

    def __call__(self, topic: str, msgtype: str, stamp_ns: int, raw: bytes) -> None:
        if topic not in ("transcript", "associations", "response"):
            return
        msg = decode(raw, msgtype)
        with self._lock:
            if topic == "transcript" and msg.is_final:
                self._end_response()
                self._out(
                    f"{self._t(report.stamp_ns(msg.end))} heard (utterance "
                    f'{msg.utterance_id}): "{msg.text}"'
                )
            elif topic == "associations":
                self._end_response()
                chosen = [c for c in msg.candidates if c.chosen]
                frames = (
                    ", ".join(
                        f"{(report.stamp_ns(c.stamp) - self._start_ns) / NS_PER_S:.3f} s"
                        f" (score {c.score:.2f})"
                        for c in chosen
                    )
                    or "none"
                )
                seen = "; ".join(dict.fromkeys(c.summary for c in chosen if c.summary))
                trigger_ns = report.stamp_ns(msg.trigger.stamp)
                by = report.decided_by(msg.query, trigger_ns in self._triggers)
                self._triggers.add(trigger_ns)
                self._out(
                    f"{self._t(trigger_ns)} {by}: chose frame(s) "
                    f"{frames} of {len(msg.candidates)}" + (f" [{seen}]" if seen else "")
                )
            elif topic == "response":
                if self._turn != msg.turn_id:
                    self._end_response()
                    self._turn = msg.turn_id
                    print(
                        f"{self._t(report.stamp_ns(msg.header.stamp))} robot (turn "
                        f"{msg.turn_id}): ",
                        end="",
                        flush=True,
                    )
                print(msg.text_delta, end="", flush=True)
                if msg.is_final:
                    self._end_response()

    def _end_response(self) -> None:
        if self._turn is not None:
            print(flush=True)
            self._turn = None


def _lifecycle_state(client) -> int | None:
    """The state id a lifecycle node reports, or None when it does not answer in time."""
    from lifecycle_msgs.srv import GetState

    future = client.call_async(GetState.Request())
    done = threading.Event()
    future.add_done_callback(lambda _: done.set())
    return future.result().current_state.id if done.wait(5.0) else None


def wait_ready(node, processes: list[NodeProcess], timeout_s: float, progress: Progress) -> None:
    """Wait until every node process is in the graph and, if it is a lifecycle node, active;
    raise OmniflowError with the node's output if one dies or does not get there in time."""
    deadline = time.monotonic() + timeout_s
    for index, process in enumerate(processes):
        spec = process.spec

        def dead(process: NodeProcess = process) -> str | None:
            return None if process.running else f"exited with {process.process.returncode}"

        _wait_node_ready(node, spec.name, spec.namespace, deadline, timeout_s, dead, process.output)
        progress.bar(index + 1, len(processes), f"nodes ready ({spec.name})", unit="")


def wait_active(
    node, names: tuple[str, ...], namespace: str, timeout_s: float, progress: Progress
) -> None:
    """Wait until the named nodes, started by someone else (``ros2 launch``), are in the graph
    under ``namespace`` and, lifecycle nodes, active; OmniflowError naming the first that is
    not within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    for index, name in enumerate(names):
        _wait_node_ready(
            node, name, namespace, deadline, timeout_s, lambda: None, lambda: "(started elsewhere)"
        )
        progress.bar(index + 1, len(names), f"nodes ready ({name})", unit="")


def _wait_node_ready(
    node,
    name: str,
    namespace: str,
    deadline: float,
    timeout_s: float,
    dead: Callable[[], str | None],
    output: Callable[[], str],
) -> None:
    """Wait until node ``name`` is ready (see :func:`wait_ready`); ``dead()`` says why it
    cannot be any more (None while it can), ``output()`` what the error shows of it."""
    from lifecycle_msgs.srv import GetState

    namespace = "/" + namespace.strip("/")  # as the graph lists it ("robot1" is "/robot1")
    full = f"{namespace.rstrip('/')}/{name}"
    state_service = f"{full}/get_state"
    client = None
    while True:
        why = dead()
        if why is not None:
            raise OmniflowError(f"node {full} {why}:\n{output()}")
        if time.monotonic() > deadline:
            raise OmniflowError(f"node {full} was not ready within {timeout_s:.0f} s:\n{output()}")
        services = dict(node.get_service_names_and_types())
        listed = (name, namespace) in node.get_node_names_and_namespaces()
        if state_service in services:
            client = client or node.create_client(GetState, state_service)
            if _lifecycle_state(client) == ACTIVE:
                break
        elif listed and time.monotonic() > deadline - timeout_s + 5.0:
            break  # a plain node: being in the graph is enough
        time.sleep(0.2)
    if client is not None:
        node.destroy_client(client)


def listening_again(node, dialogue: bool) -> threading.Event:
    """Set while the dialogue is listening (no turn in progress), so that the replay's clock
    keeps running until the last answer has been spoken; always set without a dialogue."""
    from omniflow.msg import DialogueState
    from omniflow.ros.qos import LATCHED

    listening = threading.Event()
    if not dialogue:
        listening.set()
        return listening

    def on_state(msg: DialogueState) -> None:
        (listening.set if msg.state == DialogueState.LISTENING else listening.clear)()

    node.create_subscription(DialogueState, "dialogue_state", on_state, LATCHED)
    return listening


def run_session(
    bag: Path,
    *,
    out_dir: Path | None = None,
    rate: float = 1.0,
    quiet: bool = False,
    namespace: str = NAMESPACE,
    overrides: dict[str, dict[str, object]] | None = None,
) -> SessionResult:
    """Replay ``bag`` through the replay profile's nodes and record what they publish;
    ``overrides``: parameters by node name, over the replay profile's."""
    import rclpy
    from rclpy.parameter import Parameter

    from omniflow.ros.bag_io import Player, Recorder
    from omniflow.ros.monitor import spinning

    progress = Progress(quiet)
    out_dir = Path(out_dir or tempfile.mkdtemp(prefix="omniflow-demo-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    progress.step(f"reading {bag}")
    reader = BagReader(bag)
    reader.require(INPUT_TOPICS)
    problems = list(reader.problems)
    for name, msgtype in reader.unknown_types().items():
        problems.append(f"topic {name} has an unknown message type {msgtype}: not replayed")
    for line in problems:
        print(f"warning: {line}", file=sys.stderr)
    inputs = reader.resolve([spec.name for spec in TOPICS])  # graph name -> the bag's name
    start_ns = min(m.timestamp_ns for m in reader.messages([inputs[INPUT_TOPICS[0]]]))
    replay = PROFILES["replay"]
    overrides = {name: dict(values) for name, values in (overrides or {}).items()}
    overrides.setdefault("speech", {}).setdefault("sink", "null")
    specs = profile_nodes("replay", str(share_dir()), namespace, overrides=overrides)
    progress.step(f"starting {', '.join(replay.nodes)} (one process each, on /clock)")
    processes = [NodeProcess(spec) for spec in specs]
    # This process publishes the bag's frames and audio from one participant: with Fast DDS's
    # 512 KiB shared-memory segment a 640x480 frame does not fit, so most frames were lost and
    # audio chunks with them (244 of 279 chunks, 38 of 167 frames reached fusion). It gets the
    # camera's large-frames profile; set after the nodes started, so they keep the defaults.
    os.environ.update(frame_publisher_env(str(share_dir())))
    context = rclpy.Context()
    rclpy.init(context=context)
    monitor = rclpy.create_node(
        "omniflow_monitor",
        namespace=namespace,
        context=context,
        parameter_overrides=[Parameter("use_sim_time", value=True)],
    )
    player_node = rclpy.create_node("omniflow_player", namespace=namespace, context=context)
    if not quiet:  # the recorder's per-topic lines would drown the conversation
        monitor.get_logger().set_level(rclpy.logging.LoggingSeverity.WARN)
    else:
        monitor.get_logger().set_level(rclpy.logging.LoggingSeverity.ERROR)
    outputs_bag = out_dir / "outputs"
    if outputs_bag.exists():
        import shutil

        shutil.rmtree(outputs_bag)
    printer = LivePrinter(start_ns, out=(lambda text: None) if quiet else None)
    try:
        with spinning(monitor), BagWriter(outputs_bag) as writer:
            recorder = Recorder(monitor, writer, recorded_topics(), namespace, on_message=printer)
            answered = listening_again(monitor, "dialogue" in replay.nodes)
            wait_ready(monitor, processes, READY_TIMEOUT_S, progress)
            replayed = [t for t in inputs.values() if t not in reader.unknown_types()]
            player = Player(
                player_node,
                reader,
                topics=replayed,
                namespace=namespace,
                rate=rate,
                clock=True,
                remap={b: g for g, b in inputs.items()},
            )
            missing = player.wait_for_subscribers(
                SUBSCRIBER_TIMEOUT_S, [inputs[t] for t in INPUT_TOPICS]
            )
            if missing:
                raise OmniflowError(
                    f"no subscriber on {', '.join(missing)} after {SUBSCRIBER_TIMEOUT_S:.0f} s"
                )
            duration_s = (
                max(m.timestamp_ns for m in reader.messages([inputs[INPUT_TOPICS[0]]])) - start_ns
            ) / NS_PER_S
            progress.step(
                f"replaying {duration_s:.1f} s of {bag.name} at {rate:g}x "
                f"({', '.join(player.topics)})"
            )
            player.play(
                progress=lambda done, total: progress.bar(
                    done / NS_PER_S, total / NS_PER_S, "played"
                ),
                tail_s=TAIL_S,
                preroll_s=0.5,
                until=answered.is_set,
                until_max_s=ANSWER_WAIT_S,
            )
            time.sleep(SETTLE_S)
            recorder.close()
            if recorder.failure is not None:  # the disk filled up: the outputs are cut short
                raise recorder.failure
        progress.step("stopping the nodes")
    finally:
        player_node.destroy_node()
        monitor.destroy_node()
        rclpy.shutdown(context=context)
        for process in processes:
            process.close()
    run = session_run(outputs_bag, bag, start_ns)
    run.problems = problems + run.problems
    return SessionResult(out_dir, bag, outputs_bag, run, problems)


def recorded_topics() -> list[str]:
    """What a replay of a session records: the replay graph's outputs, the microphone and
    the diagnostics."""
    return [spec.name for spec in output_topics(PROFILES["replay"].nodes)] + list(EXTRA_RECORDED)


def session_run(outputs_bag: Path, input_bag: Path, start_ns: int | None = None) -> report.Run:
    """The decoded run of a replay: the recorded outputs with the input bag (whose audio and
    played audio were recorded among the outputs too), times from ``start_ns`` (default: the
    input bag's first microphone block)."""
    if start_ns is None:
        reader = BagReader(input_bag)
        audio = reader.resolve(INPUT_TOPICS)[INPUT_TOPICS[0]]
        start_ns = min(m.timestamp_ns for m in reader.messages([audio]))
    run = report.Run.from_bags(outputs_bag, input_bag, skip_by_bag={1: ("audio", "played_audio")})
    run.start_ns = start_ns
    return run


def print_summary(result: SessionResult) -> dict[str, Path]:
    """The transcript, chosen frames, responses, latency table; writes the report files."""
    run = result.run
    print("\ntranscript:")
    for entry in report.transcripts(run) or [
        {"start_s": 0, "end_s": 0, "text": "(nothing)", "utterance_id": 0}
    ]:
        print(
            f"  {entry['start_s']:6.2f}-{entry['end_s']:6.2f} s  utterance "
            f'{entry["utterance_id"]}: "{entry["text"]}"'
        )
    print("\nframes the association chose (at the speech onset, then by the final's words):")
    for entry in report.associations(run):
        chosen = ", ".join(f"{c:.3f} s" for c in entry["chosen_s"]) or "none"
        by = entry["by"]
        seen = "; ".join(dict.fromkeys(s for s in entry["chosen_summaries"] if s))
        print(
            f"  onset {entry['trigger_s']:6.2f} s, {by} -> {chosen} "
            f"(of {entry['candidates']} candidates)" + (f": {seen}" if seen else "")
        )
    turns = report.responses(run)
    print("\nresponse:" if turns else f"\nresponse: none ({report.why_no_answer(run)})")
    for turn in turns:
        print(f"  turn {turn['turn_id']}: {turn['text']}")
    for topic, counts in report.delivered(run).items():
        if counts["fusion"] < 0.95 * counts["monitor"]:
            print(
                f"\nnote: fusion received {counts['fusion']} of {counts['monitor']} {topic} "
                "messages. If you set FASTRTPS_DEFAULT_PROFILES_FILE, give it the shared-memory "
                "segment of config/fastdds/large_frames.xml (frames that do not fit are lost, "
                "and audio with them); else this machine was too busy: try --rate 0.5"
            )
    print("\nlatency per stage (bag replay on this machine):")
    print(report.latency_table(report.latency(run)))
    paths = report.write(run, result.out_dir)
    print(f"\nwrote under {result.out_dir}:")
    print(
        f"  {paths['json'].name}, {paths['timeline'].name}, "
        f"{len(paths) - 2} chosen frame(s), outputs/ (the recorded outputs, MCAP)"
    )
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="omniflow demo", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--bag",
        type=Path,
        help="a session bag (MCAP file or rosbag2 "
        "directory) with audio and image_raw; default: the bundled session",
    )
    parser.add_argument(
        "--audio",
        type=Path,
        help="a sound file instead of a bag (mono; 16 kHz and above resampled to 16 kHz, "
        "a band-limited rate such as 8 kHz kept, as its microphone would publish it); needs "
        "--video",
    )
    parser.add_argument("--video", type=Path, help="a video file; needs --audio")
    parser.add_argument(
        "--out", type=Path, help="output directory (default: a new temporary one, printed)"
    )
    parser.add_argument("--rate", type=float, default=1.0, help="replay rate factor")
    args = parser.parse_args(argv)
    if (args.audio is None) != (args.video is None):
        parser.error("--audio and --video go together")
    if args.bag and args.audio:
        parser.error("give either --bag or --audio/--video")
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    out_dir = args.out or Path(tempfile.mkdtemp(prefix="omniflow-demo-"))
    try:
        if args.audio:
            from omniflow.session import session_from_files

            bag = session_from_files(
                args.audio,
                args.video,
                out_dir / "input.mcap",
                warn=lambda text: print(f"note: {text}", file=sys.stderr),
            )
        else:
            bag = args.bag or default_bag()
        result = run_session(bag, out_dir=out_dir, rate=args.rate)
    except (BagError, SourceError, OmniflowError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print_summary(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
