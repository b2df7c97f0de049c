"""The replay regression: what the graph made of the sample session, against a golden file.

``OUTPUTS`` is the table of what is compared: per topic, how its messages become plain entries
and how each field is compared (exactly, as a stamp within a tolerance, as text by similarity,
or as a list of stamps). Topics are compared when their publishing node is part of the replay
graph (``omniflow.graph``): the fusion outputs, the dialogue node's ``dialogue_state`` sequence
of the first exchange and the first ``response`` (not empty, and the objects it names), as
``make golden`` recorded them.

    python -m omniflow.regression            # replay the sample session, compare, exit 1 on a
                                             # difference
    python -m omniflow.regression --update   # the same run, written as the new golden file
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from omniflow import report
from omniflow.core.lexicon import COCO_LABELS
from omniflow.graph import PROFILES, output_topics

EXACT, STAMP, STAMPS, TEXT = "exact", "stamp", "stamps", "text"
# Stamps are compared within this many ms: VAD events are exact on the same audio, but which
# frame the vision encoder took (the newest at 5 frames/s) depends on timing.
STAMP_TOLERANCE_MS = 250.0
# Texts are compared by difflib's ratio (0..1) of their words.
TEXT_SIMILARITY = 0.7
# The session is replayed at half speed (bag time, hence every stamp, is unchanged: the nodes
# run on /clock). At full speed a busy 2-core machine made the fusion node drop 15-25 % of the
# audio chunks at its sensor-data queue (depth 5, best effort), and the VAD's events moved
# with them; at half speed 96-100 % arrive and the outputs agree run to run.
REPLAY_RATE = 0.5
# Whisper decodes each utterance once, at its end: its partial decodes run on a thread, and
# which of them the final reuses depends on the machine's timing (the text could change by a
# few words from run to run). Partials themselves are covered by the fusion node's tests.
OVERRIDES = {"fusion": {"asr.whisper.partial_interval_ms": 5000}}


@dataclass(frozen=True)
class Output:
    """One compared output: its topic, how a run becomes entries, and the field rules."""

    topic: str
    entries: Callable[[report.Run], list[dict]]
    rules: dict[str, str]


def _voice_activity(run: report.Run) -> list[dict]:
    return [
        {
            "event": int(m.event),
            "utterance_id": int(m.utterance_id),
            "t_s": run.seconds(report.stamp_ns(m.header.stamp)),
        }
        for _, m in run.of("voice_activity")
        if int(m.event) != 1
    ]  # no ONGOING


def _associations(run: report.Run) -> list[dict]:
    """By trigger: an utterance's second decision (by the words of its final) comes when
    Whisper is done, which may be after the next utterance's first."""
    found = [
        {"trigger_s": a["trigger_s"], "chosen_s": a["chosen_s"]} for a in report.associations(run)
    ]
    return sorted(found, key=lambda a: a["trigger_s"])


def _transcripts(run: report.Run) -> list[dict]:
    return [
        {k: t[k] for k in ("utterance_id", "start_s", "end_s", "text")}
        for t in report.transcripts(run)
    ]


# The dialogue's later states and answers depend on how fast the model decodes on the machine
# (an answer still being generated when the session's next utterance starts is cancelled, and
# the words carried into the next turn), so only what every run shares is compared: the first
# exchange goes user speaking -> thinking -> speaking, and the first answer is not empty and
# names the objects it names in the golden file.
_USER_SPEAKING, _THINKING, _SPEAKING = 1, 2, 3


def _first_exchange(run: report.Run) -> list[dict]:
    seen: list[int] = []
    for entry in report.states(run, "dialogue_state", "state"):
        if entry["state"] in (_USER_SPEAKING, _THINKING, _SPEAKING) and entry["state"] not in seen:
            seen.append(entry["state"])
    return [{"state": state} for state in seen]


def named_objects(text: str) -> list[str]:
    """The COCO labels that ``text`` names (a plural counts), sorted."""
    lowered = text.lower()
    return sorted(
        label for label in COCO_LABELS if re.search(rf"\b{re.escape(label)}s?\b", lowered)
    )


def _responses(run: report.Run) -> list[dict]:
    """The first answer: said at all, and the objects it names (decoding is greedy, so the
    answer to "What is this?" with the hand pointing at the cup names the cup every run)."""
    return [
        {"nonempty": bool(r["text"].strip()), "names": named_objects(r["text"])}
        for r in report.responses(run)[:1]
    ]


OUTPUTS = (
    Output(
        "transcript",
        _transcripts,
        {"utterance_id": EXACT, "start_s": STAMP, "end_s": STAMP, "text": TEXT},
    ),
    Output("associations", _associations, {"trigger_s": STAMP, "chosen_s": STAMPS}),
    Output(
        "voice_activity", _voice_activity, {"event": EXACT, "utterance_id": EXACT, "t_s": STAMP}
    ),
    Output("dialogue_state", _first_exchange, {"state": EXACT}),
    Output("response", _responses, {"nonempty": EXACT, "names": EXACT}),
)


def compared_topics(nodes: tuple[str, ...] = PROFILES["replay"].nodes) -> list[str]:
    """The OUTPUTS topics that the given nodes publish."""
    published = {spec.name for spec in output_topics(nodes)}
    return [output.topic for output in OUTPUTS if output.topic in published]


def summarize(run: report.Run, topics: list[str] | None = None) -> dict[str, list[dict]]:
    """The compared entries of a run, by topic."""
    wanted = compared_topics() if topics is None else topics
    return {o.topic: o.entries(run) for o in OUTPUTS if o.topic in wanted}


def _similar(a: str, b: str) -> float:
    return (
        difflib.SequenceMatcher(None, a.lower().split(), b.lower().split()).ratio()
        if (a.strip() or b.strip())
        else 1.0
    )


def _field_problem(
    rule: str, got: object, want: object, tolerance_ms: float, similarity: float
) -> str | None:
    if rule == EXACT and got != want:
        return f"{got!r} != {want!r}"
    if rule == STAMP and abs(float(got) - float(want)) * 1000 > tolerance_ms:
        return (
            f"{got} s is {abs(float(got) - float(want)) * 1000:.0f} ms from {want} s "
            f"(tolerance {tolerance_ms:.0f} ms)"
        )
    if rule == STAMPS:
        if len(got) != len(want):
            return f"{len(got)} stamps {got} != {len(want)} stamps {want}"
        for g, w in zip(got, want, strict=True):
            if abs(g - w) * 1000 > tolerance_ms:
                return (
                    f"{got} vs {want}: {abs(g - w) * 1000:.0f} ms apart "
                    f"(tolerance {tolerance_ms:.0f} ms)"
                )
    if rule == TEXT and _similar(str(got), str(want)) < similarity:
        return f"{got!r} vs {want!r}: similarity {_similar(str(got), str(want)):.2f} < {similarity}"
    return None


def compare(
    actual: dict[str, list[dict]],
    golden: dict[str, list[dict]],
    *,
    tolerance_ms: float = STAMP_TOLERANCE_MS,
    similarity: float = TEXT_SIMILARITY,
) -> list[str]:
    """Every difference between a run's summary and the golden one, as readable lines."""
    rules = {o.topic: o.rules for o in OUTPUTS}
    problems = []
    for topic in actual.keys() | golden.keys():
        if topic not in golden:
            problems.append(
                f"{topic}: produced but not in the golden file (a new output? "
                "run `make golden` and review the diff)"
            )
            continue
        if topic not in actual:
            problems.append(f"{topic}: in the golden file but not produced")
            continue
        got, want = actual[topic], golden[topic]
        if len(got) != len(want):
            problems.append(
                f"{topic}: {len(got)} entries, golden has {len(want)}: got {got}, golden {want}"
            )
            continue
        for index, (g, w) in enumerate(zip(got, want, strict=True)):
            for name, rule in rules.get(topic, {}).items():
                problem = _field_problem(rule, g.get(name), w.get(name), tolerance_ms, similarity)
                if problem:
                    problems.append(f"{topic}[{index}].{name}: {problem}")
    return sorted(problems)


def golden_path() -> Path:
    """The golden file next to the sample session in the source tree."""
    return Path(__file__).resolve().parents[2] / "test" / "data" / "samples" / "session.golden.json"


def main(argv: list[str] | None = None) -> int:
    from omniflow import demo

    parser = argparse.ArgumentParser(
        description="Replay the sample session through the graph "
        "and compare its outputs with the golden file."
    )
    parser.add_argument(
        "--update", action="store_true", help="write this run's outputs as the new golden file"
    )
    parser.add_argument("--golden", type=Path, default=None, help="golden JSON file")
    parser.add_argument("--out", type=Path, default=None, help="where the run's files go")
    args = parser.parse_args(argv)
    golden = args.golden or golden_path()
    result = demo.run_session(
        demo.default_bag(), out_dir=args.out, quiet=True, rate=REPLAY_RATE, overrides=OVERRIDES
    )
    summary = summarize(result.run)
    if args.update:
        golden.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {golden}: " + ", ".join(f"{k} ({len(v)})" for k, v in summary.items()))
        return 0
    problems = compare(summary, json.loads(golden.read_text(encoding="utf-8")))
    for line in problems:
        print(line)
    print("matches the golden file" if not problems else f"{len(problems)} difference(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
