"""What a run of the graph did, from its recorded outputs: transcripts, the frames each
association chose, the streamed responses, a per-stage latency table, a timeline picture and a
JSON report. No rclpy: everything is read from bags (``omniflow.bag``).

A run is two bags: the input session (``audio``, ``image_raw``, maybe ``played_audio``) and the
outputs the monitor recorded while it played (bag time = arrival on the sim clock). Latency rows
whose topics were not published (their node did not run, or published nothing) say "n/a".
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from omniflow.bag import BagReader
from omniflow.core.fusion_events import Activity
from omniflow.core.timing import NS_PER_MS, NS_PER_S
from omniflow.graph import graph_topic_name


def stamp_ns(stamp: object) -> int:
    """Nanoseconds of a ``builtin_interfaces/Time`` (rosbags or rclpy object)."""
    return int(stamp.sec) * NS_PER_S + int(stamp.nanosec)


@dataclass
class Run:
    """Decoded messages of one run by topic, each with its bag time: [(bag_ns, msg)]."""

    messages: dict[str, list[tuple[int, object]]] = field(default_factory=dict)
    start_ns: int = 0
    problems: list[str] = field(default_factory=list)

    def of(self, topic: str) -> list[tuple[int, object]]:
        return self.messages.get(topic, [])

    def seconds(self, ns: int) -> float:
        """Seconds from the start of the session."""
        return round((ns - self.start_ns) / NS_PER_S, 3)

    @classmethod
    def from_bags(
        cls, *paths: str | Path, skip_by_bag: dict[int, tuple[str, ...]] | None = None
    ) -> Run:
        """Read and decode every topic of the bags; ``skip_by_bag``: {index of a bag in
        ``paths``: topics not to take from it} (a topic recorded twice is taken once)."""
        run = cls()
        starts = []
        for index, path in enumerate(paths):
            skip = (skip_by_bag or {}).get(index, ())
            reader = BagReader(path)
            run.problems.extend(reader.problems)
            for name, msgtype in reader.unknown_types().items():
                run.problems.append(f"{path}: topic {name} has an unknown type {msgtype}; left out")
            topics = [t for t in reader.topics if graph_topic_name(t) not in skip]
            for message, msg in reader.decoded(topics):
                run.messages.setdefault(graph_topic_name(message.topic), []).append(
                    (message.timestamp_ns, msg)
                )
                starts.append(message.timestamp_ns)
        run.start_ns = min(starts, default=0)
        return run


# ----------------------------------------------------------------------------- what was said
def transcripts(run: Run) -> list[dict]:
    """Final transcripts in order: utterance, start/end (s from the session start), text."""
    return [
        {
            "utterance_id": int(m.utterance_id),
            "start_s": run.seconds(stamp_ns(m.start)),
            "end_s": run.seconds(stamp_ns(m.end)),
            "text": m.text,
            "confidence": None if np.isnan(m.confidence) else round(float(m.confidence), 3),
        }
        for _, m in run.of("transcript")
        if m.is_final
    ]


def decided_by(query: str, again: bool) -> str:
    """What an association decision went by: fusion decides once at the speech onset (time
    only) and ``again`` when the final transcript comes, by its object words (``query``)."""
    if not again:
        return "speech onset"
    return f'the words "{query}"' if query else "the final (no object named)"


def associations(run: Run) -> list[dict]:
    """Every association decision: trigger time, the words it was decided by ("" at the
    onset: time only), chosen frames with what they hold, and the candidates' count."""
    out = []
    triggers: set[int] = set()
    for _, m in run.of("associations"):
        chosen = [c for c in m.candidates if c.chosen]
        trigger_ns = stamp_ns(m.trigger.stamp)
        again = trigger_ns in triggers
        triggers.add(trigger_ns)
        out.append(
            {
                "decision_id": int(m.decision_id),
                "utterance_id": int(m.utterance_id),
                "trigger_s": run.seconds(trigger_ns),
                "query": m.query,
                "by": decided_by(m.query, again),
                "chosen_s": [run.seconds(stamp_ns(c.stamp)) for c in chosen],
                "chosen_scores": [round(float(c.score), 3) for c in chosen],
                "chosen_summaries": [c.summary for c in chosen],
                "candidates": len(m.candidates),
                "decided_s": run.seconds(stamp_ns(m.header.stamp)),
            }
        )
    return out


def responses(run: Run) -> list[dict]:
    """Each response turn's text (pieces joined in index order) and when it began."""
    turns: dict[int, dict] = {}
    for _, m in run.of("response"):
        turn = turns.setdefault(
            int(m.turn_id),
            {
                "turn_id": int(m.turn_id),
                "pieces": {},
                "start_s": run.seconds(stamp_ns(m.turn_start)),
                "final": False,
            },
        )
        turn["pieces"][int(m.index)] = m.text_delta
        turn["final"] = turn["final"] or bool(m.is_final)
    return [
        {
            "turn_id": t["turn_id"],
            "start_s": t["start_s"],
            "final": t["final"],
            "text": "".join(t["pieces"][k] for k in sorted(t["pieces"])),
        }
        for t in turns.values()
    ]


def states(run: Run, topic: str, field_name: str) -> list[dict]:
    """A latched state's sequence: [{t_s, value, turn_id?}] without repeats of one value.

    States stamped before the session's start are not events of the session: a node publishes
    its first latched state when it starts, before the player's /clock runs, so under sim time
    it is stamped 0 (or with whatever time the node had). Of those, only the last one is kept,
    at 0 s: the state in force when the session began."""
    before = [m for _, m in run.of(topic) if stamp_ns(m.header.stamp) < run.start_ns]
    during = [m for _, m in run.of(topic) if stamp_ns(m.header.stamp) >= run.start_ns]
    out: list[dict] = []
    for m in before[-1:] + during:
        value = int(getattr(m, field_name))
        t_s = max(run.seconds(stamp_ns(m.header.stamp)), 0.0)
        entry = {"t_s": t_s, field_name: value}
        if hasattr(m, "turn_id"):
            entry["turn_id"] = int(m.turn_id)
        if not out or {k: v for k, v in out[-1].items() if k != "t_s"} != {
            k: v for k, v in entry.items() if k != "t_s"
        }:
            out.append(entry)
    return out


# Dialogue states by their DialogueState constant.
_STATE_NAMES = ("LISTENING", "USER_SPEAKING", "THINKING", "SPEAKING", "INTERRUPTED")


def why_no_answer(run: Run) -> str:
    """Why a run has no response, from what the dialogue node and fusion published: a node
    that published its state ran, and is never said to be missing."""
    sequence = states(run, "dialogue_state", "state")
    if not sequence:
        return (
            "no dialogue_state was received: the dialogue node did not run, or its state "
            "did not reach this process"
        )
    names = [_STATE_NAMES[e["state"]] if e["state"] < len(_STATE_NAMES) else "?" for e in sequence]
    ran = f"the dialogue node ran (states: {' -> '.join(names)}) but answered nothing: "
    finals = transcripts(run)
    if finals:
        if "THINKING" not in names:
            return ran + f"{len(finals)} final transcript(s) came but no turn started"
        return ran + "a turn started but no response text was published"
    if names[-1] == "USER_SPEAKING":
        return ran + (
            "the user's speech never ended, so no final transcript came (steady noise taken "
            "for speech? see the fusion node's vad.noise.margin_db)"
        )
    return ran + "no final transcript came, so there was nothing to answer"


# ----------------------------------------------------------------------------- latency
def _header_minus(
    topic: str, other: Callable[[object], int], keep: Callable[[object], bool] = lambda m: True
) -> Callable[[Run], list]:
    def measure(run: Run) -> list[float]:
        return [
            (stamp_ns(m.header.stamp) - other(m)) / NS_PER_MS for _, m in run.of(topic) if keep(m)
        ]

    return measure


def _capture(run: Run) -> list[float]:
    """Capture stamp -> delivery to a subscriber (the monitor), audio and frames."""
    return [
        (bag_ns - stamp_ns(m.header.stamp)) / NS_PER_MS
        for topic in ("audio", "image_raw")
        for bag_ns, m in run.of(topic)
    ]


def _vision(run: Run) -> list[float]:
    """The fusion node's encode stage per encoded frame, from its /diagnostics."""
    values = []
    for _, array in run.of("/diagnostics"):
        for status in array.status:
            kv = {item.key: item.value for item in status.values}
            if "vision_encoded" in kv and "scheduler.stage_ns_total.encode" in kv:
                values.append(
                    (int(kv["scheduler.stage_ns_total.encode"]), int(kv["vision_encoded"]))
                )
    if not values:
        return []
    total_ns, count = max(values, key=lambda v: v[1])
    return [total_ns / count / NS_PER_MS] if count else []


def _first_token(run: Run) -> list[float]:
    """The dialogue starts the turn (THINKING) -> its first response piece: the model's
    share, without the recognition and the end-of-turn wait before it."""
    started: dict[int, int] = {}
    for _, m in run.of("dialogue_state"):
        if _STATE_NAMES[m.state] == "THINKING":
            started.setdefault(int(m.turn_id), stamp_ns(m.header.stamp))
    firsts: dict[int, int] = {}
    for _, m in run.of("response"):
        turn = int(m.turn_id)
        firsts[turn] = min(firsts.get(turn, 2**63), stamp_ns(m.header.stamp))
    return [(firsts[t] - started[t]) / NS_PER_MS for t in firsts if t in started]


def _end_of_turn(run: Run) -> list[float]:
    """The final transcript -> the dialogue starts the turn it ends (the end-of-turn score
    and wait); turns that no final started (goals, proactive) are left out."""
    finals = sorted(stamp_ns(m.header.stamp) for _, m in run.of("transcript") if m.is_final)
    out = []
    for _, m in run.of("dialogue_state"):
        started = stamp_ns(m.header.stamp)
        before = [f for f in finals if f <= started]
        if _STATE_NAMES[m.state] == "THINKING" and before:
            out.append((started - before[-1]) / NS_PER_MS)
    return out


def _speaking_starts(run: Run) -> dict[int, int]:
    starts: dict[int, int] = {}
    for _, m in run.of("speech_state"):
        if m.speaking and int(m.turn_id) not in starts:
            starts[int(m.turn_id)] = stamp_ns(m.header.stamp)
    return starts


def _first_audio(run: Run) -> list[float]:
    """First response piece -> the speaker starts that turn."""
    firsts: dict[int, int] = {}
    for _, m in run.of("response"):
        turn = int(m.turn_id)
        firsts[turn] = min(firsts.get(turn, 2**63), stamp_ns(m.header.stamp))
    speaking = _speaking_starts(run)
    return [(speaking[t] - firsts[t]) / NS_PER_MS for t in firsts if t in speaking]


def _end_to_end(run: Run) -> list[float]:
    """End of the user's speech -> the robot starts speaking its answer."""
    ends = sorted(stamp_ns(m.end) for _, m in run.of("transcript") if m.is_final)
    turn_starts = {int(m.turn_id): stamp_ns(m.turn_start) for _, m in run.of("response")}
    out = []
    for turn, spoke_ns in _speaking_starts(run).items():
        before = [e for e in ends if e <= turn_starts.get(turn, spoke_ns)]
        if before:
            out.append((spoke_ns - before[-1]) / NS_PER_MS)
    return out


@dataclass(frozen=True)
class LatencyRow:
    """One stage of the latency table: what it measures and how, from a run's messages."""

    stage: str
    measures: str
    measure: Callable[[Run], list[float]]
    budget_ms: float | None = None  # the source material's Pi 5 + Coral figure


# Shaped like the source material's per-stage table; rows without data read "n/a".
LATENCY_ROWS = (
    LatencyRow("capture", "capture stamp -> delivered to a subscriber", _capture, 28.0),
    LatencyRow(
        "VAD/ASR",
        "end of speech -> final transcript (includes the VAD's closing silence)",
        _header_minus("transcript", lambda m: stamp_ns(m.end), lambda m: m.is_final),
        49.3,
    ),
    LatencyRow("vision", "fusion encode stage per encoded frame", _vision, 63.5),
    LatencyRow(
        "association",
        "speech onset -> decision (includes the window's wait)",
        _header_minus("associations", lambda m: stamp_ns(m.trigger.stamp)),
        28.9,
    ),
    LatencyRow(
        "end of turn",
        "final transcript -> the dialogue starts the turn (end-of-turn score and wait)",
        _end_of_turn,
    ),
    LatencyRow(
        "first token", "the dialogue starts the turn -> first response piece", _first_token, 112.4
    ),
    LatencyRow("first audio", "first response piece -> speaker starts", _first_audio, 44.9),
    LatencyRow("end to end", "end of user speech -> speaker starts", _end_to_end, 327.0),
)


def latency(run: Run) -> dict[str, dict | None]:
    """Every row: {median_ms, p90_ms, n, measures} or None (n/a)."""
    out: dict[str, dict | None] = {}
    for row in LATENCY_ROWS:
        values = row.measure(run)
        out[row.stage] = (
            None
            if not values
            else {
                "median_ms": round(statistics.median(values), 2),
                "p90_ms": round(float(np.percentile(values, 90)), 2),
                "n": len(values),
                "measures": row.measures,
                "source_budget_ms": row.budget_ms,
            }
        )
    return out


def latency_table(table: dict[str, dict | None]) -> str:
    """The latency table as aligned text."""
    lines = [f"{'stage':<12} {'median ms':>10} {'p90 ms':>8} {'n':>5}  measures", "-" * 78]
    for row in LATENCY_ROWS:
        entry = table.get(row.stage)
        if entry is None:
            lines.append(f"{row.stage:<12} {'n/a':>10} {'n/a':>8} {'-':>5}  {row.measures}")
        else:
            lines.append(
                f"{row.stage:<12} {entry['median_ms']:>10.1f} {entry['p90_ms']:>8.1f} "
                f"{entry['n']:>5}  {row.measures}"
            )
    return "\n".join(lines)


# ----------------------------------------------------------------------------- frames, picture
def chosen_frames(run: Run) -> dict[float, np.ndarray]:
    """The frames the associations chose, by their time (s), as RGB arrays."""
    wanted = {c for a in associations(run) for c in a["chosen_s"]}
    frames = {}
    for _, m in run.of("image_raw"):
        t = run.seconds(stamp_ns(m.header.stamp))
        if t in wanted and m.encoding in ("rgb8", "bgr8"):
            pixels = np.asarray(m.data, dtype=np.uint8).reshape(m.height, m.step)
            rgb = pixels[:, : m.width * 3].reshape(m.height, m.width, 3)
            frames[t] = rgb[:, :, ::-1] if m.encoding == "bgr8" else rgb
    return frames


def _level_db(run: Run, topic: str) -> tuple[list[float], list[float]]:
    times, levels = [], []
    for _, m in run.of(topic):
        samples = np.frombuffer(bytes(m.data), dtype="<i2" if m.format == 1 else "<f4")
        scale = 32768.0 if m.format == 1 else 1.0
        rms = (
            float(np.sqrt(np.mean((samples.astype(np.float64) / scale) ** 2)))
            if len(samples)
            else 0.0
        )
        times.append(run.seconds(stamp_ns(m.header.stamp)))
        levels.append(20 * np.log10(max(rms, 1e-5)))
    return times, levels


def timeline_figure(run: Run):
    """A picture of the run: audio levels and speech, vision tokens, associations, transcript,
    response tokens, what the speaker played, and the states, on one time axis (seconds from
    the session's start). The axis spans everything drawn, and every label lies inside it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    lanes = ["states", "speech", "response", "transcript", "associations", "vision", "audio"]
    y = {lane: i for i, lane in enumerate(lanes)}
    fig = Figure(figsize=(14, 6.5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    drawn: list[float] = []  # every time drawn, for the axis' extent
    t, level = _level_db(run, "audio")
    if t:
        norm = (np.clip(np.array(level), -70, 0) + 70) / 70 * 0.8
        ax.fill_between(
            t,
            y["audio"] - 0.4,
            y["audio"] - 0.4 + norm,
            step="post",
            color="tab:blue",
            alpha=0.6,
            label="microphone level",
        )
        drawn += t
    t, level = _level_db(run, "played_audio")
    if t:
        norm = (np.clip(np.array(level), -70, 0) + 70) / 70 * 0.8
        ax.bar(
            t, norm, width=0.02, bottom=y["speech"] - 0.4, color="tab:orange", label="played audio"
        )
        drawn += t
    frames = [run.seconds(stamp_ns(m.header.stamp)) for _, m in run.of("image_raw")]
    ax.vlines(frames, y["vision"] - 0.3, y["vision"] + 0.3, color="gray", lw=0.6, label="frames")
    drawn += frames
    for a in associations(run):
        ax.plot([a["trigger_s"]], [y["associations"]], "v", color="tab:red")
        for c in a["chosen_s"]:
            ax.plot([a["trigger_s"], c], [y["associations"], y["vision"]], color="tab:red", lw=1.2)
            ax.plot([c], [y["vision"]], "s", color="tab:red", ms=6)
        drawn += [a["trigger_s"], *a["chosen_s"]]
    labels = []
    for entry in transcripts(run):
        ax.plot(
            [entry["start_s"], entry["end_s"]],
            [y["transcript"]] * 2,
            lw=6,
            color="tab:green",
            solid_capstyle="butt",
        )
        labels.append(
            ax.text(
                entry["start_s"], y["transcript"] + 0.2, entry["text"][:40] or "(empty)", fontsize=8
            )
        )
        drawn += [entry["start_s"], entry["end_s"]]
    for _, m in run.of("response"):
        ts = run.seconds(stamp_ns(m.header.stamp))
        ax.plot([ts], [y["response"]], "|", color="tab:purple", ms=12)
        drawn.append(ts)
    for entry in responses(run):
        labels.append(
            ax.text(entry["start_s"], y["response"] + 0.2, entry["text"][:50], fontsize=8)
        )
        drawn.append(entry["start_s"])
    for entry in states(run, "speech_state", "speaking"):
        ax.plot(
            [entry["t_s"]],
            [y["speech"] + 0.3],
            "^" if entry["speaking"] else "v",
            color="black",
            ms=5,
        )
        drawn.append(entry["t_s"])
    for index, entry in enumerate(states(run, "dialogue_state", "state")):
        name = _STATE_NAMES[entry["state"]] if entry["state"] < len(_STATE_NAMES) else "?"
        ax.plot([entry["t_s"]], [y["states"] - 0.35], "|", color="black", ms=8)
        # three heights in turn, so that the labels of states close in time do not collide
        labels.append(
            ax.text(entry["t_s"], y["states"] - 0.3 + 0.25 * (index % 3), name, fontsize=7)
        )
        drawn.append(entry["t_s"])
    for entry in states(run, "voice_activity", "event"):
        if entry["event"] not in (Activity.START, Activity.END):
            continue
        ax.plot([entry["t_s"]], [y["audio"] + 0.45], "o", color="tab:cyan", ms=4)
        drawn.append(entry["t_s"])
    ax.set_xlim(-0.3, max(drawn, default=10.0) + 0.3)
    ax.set_yticks(range(len(lanes)), lanes)
    ax.set_ylim(-0.7, len(lanes) - 0.3)
    ax.set_xlabel("seconds from the start of the session (bag time)")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title("omniflow run: inputs, fusion, response, speech and states")
    fig.tight_layout()
    _keep_inside(fig, ax, labels)
    return fig


def _keep_inside(fig, ax, labels: list) -> None:
    """Labels that would run past the right edge of the axes end at their time instead of
    starting there; a label still too wide for the axes is shortened until it fits."""
    renderer = fig.canvas.get_renderer()
    box = ax.get_window_extent(renderer)
    for label in labels:
        if label.get_window_extent(renderer).x1 > box.x1:
            label.set_horizontalalignment("right")
        while label.get_text() and (
            label.get_window_extent(renderer).x0 < box.x0
            or label.get_window_extent(renderer).x1 > box.x1
        ):
            label.set_text(label.get_text()[:-2] + "…" if len(label.get_text()) > 2 else "")


def timeline_png(run: Run, path: Path) -> Path:
    """The timeline picture (:func:`timeline_figure`) as a PNG file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    timeline_figure(run).savefig(path)
    return path


def delivered(run: Run) -> dict[str, dict]:
    """How many of the replayed inputs reached the fusion node (its /diagnostics counters)
    against how many the monitor received: {topic: {"fusion": n, "monitor": m}}."""
    last: dict[str, str] = {}
    for _, array in run.of("/diagnostics"):
        for status in array.status:
            values = {item.key: item.value for item in status.values}
            if "audio_chunks" in values:
                last = values
    if not last:
        return {}
    return {
        "audio": {"fusion": int(last["audio_chunks"]), "monitor": len(run.of("audio"))},
        "image_raw": {"fusion": int(last["frames"]), "monitor": len(run.of("image_raw"))},
    }


def build(run: Run) -> dict:
    """The JSON report of a run."""
    return {
        "topics": {t: len(v) for t, v in sorted(run.messages.items())},
        "transcripts": transcripts(run),
        "associations": associations(run),
        "responses": responses(run),
        "dialogue_states": states(run, "dialogue_state", "state"),
        "latency": latency(run),
        "delivered": delivered(run),
        "problems": run.problems,
    }


def write(run: Run, out_dir: Path) -> dict[str, Path]:
    """report.json, timeline.png and the chosen frames (PNG) under ``out_dir``."""
    import cv2

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "report.json", "timeline": out_dir / "timeline.png"}
    paths["json"].write_text(json.dumps(build(run), indent=2) + "\n", encoding="utf-8")
    timeline_png(run, paths["timeline"])
    for stale in out_dir.glob("chosen_frame_*.png"):  # from an earlier run into this directory
        stale.unlink()
    for t, rgb in chosen_frames(run).items():
        frame_path = out_dir / f"chosen_frame_{t:07.3f}s.png"
        cv2.imwrite(str(frame_path), np.ascontiguousarray(rgb[:, :, ::-1]))
        paths[f"frame {t:.3f} s"] = frame_path
    return paths
