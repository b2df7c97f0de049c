"""The replay regression: what the graph made of the sample session, against a golden file.

``OUTPUTS`` is the table of what is compared: per topic, how its messages become plain entries
and how each field is compared (exactly, as a stamp within a tolerance, or as a list of
stamps). Topics are compared when their publishing node is part of the replay graph
(``omniflow.graph``): the fusion outputs, the dialogue node's ``dialogue_state`` sequence of
the first exchange and the first ``response`` (not empty, and the objects it names), as
``make golden`` recorded them.

What was heard is not compared with what was heard before, but with what was said: the golden
file's ``spoken`` holds the user's lines (start s, words) that scripts/make_sample_session.py
has espeak-ng say, and the session's final transcripts must reach them within a word error rate
of ``MAX_WER`` (:func:`hearing` reports it line by line). ``make golden`` keeps ``spoken`` as
it is and records the rest.

    python -m omniflow.regression            # replay the sample session, compare, exit 1 on a
                                             # difference
    python -m omniflow.regression --update   # the same run, written as the new golden file
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from omniflow import report
from omniflow.core.fusion_events import Activity
from omniflow.core.lexicon import COCO_LABELS
from omniflow.core.text import edit_distance, words
from omniflow.graph import PROFILES, output_topics

EXACT, STAMP, STAMPS = "exact", "stamp", "stamps"
# Stamps are compared within this many ms: VAD events are exact on the same audio, but which
# frame the vision encoder took (the newest at 5 frames/s) depends on timing.
STAMP_TOLERANCE_MS = 250.0
# The golden file's key for the words the user said (not a topic).
SPOKEN = "spoken"
# The word error rate of the session's finals against the words spoken may be at most this.
# Whisper tiny.en on the sample session: 0 (the barge-in "Stop." under the robot's voice was
# heard as "up", 0.125, until the echo stage's linear canceller handed the recogniser its
# residual; "What is that animal?" was "What is now telling me?" until the recogniser heard
# a lead-in before each onset, 0.5); the margin is one wrong word in 8.
MAX_WER = 0.125
# A final belongs to the spoken line it starts after (less this much: the VAD's start may
# come a little early) and before the next line.
LINE_SLACK_S = 0.5
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
        if int(m.event) in (Activity.START, Activity.END)
    ]  # no ONGOING or SILENCE: how often they come depends on the machine's pace


def _associations(run: report.Run) -> list[dict]:
    """By trigger: an utterance's second decision (by the words of its final) comes when
    Whisper is done, which may be after the next utterance's first."""
    found = [
        {"trigger_s": a["trigger_s"], "chosen_s": a["chosen_s"]} for a in report.associations(run)
    ]
    return sorted(found, key=lambda a: a["trigger_s"])


def _transcripts(run: report.Run) -> list[dict]:
    """The finals: their utterance and times are compared with the golden file, their text
    with the words spoken (:func:`hearing`)."""
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
        {"utterance_id": EXACT, "start_s": STAMP, "end_s": STAMP},
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


def hearing(transcripts: list[dict], spoken: list[dict]) -> dict:
    """The finals (``text``, ``start_s``) against the spoken lines (``at_s``, ``text``): per
    line what was heard and its word errors, and the session's word error rate (all errors
    over all words spoken). A final belongs to the last line that started before it (less
    ``LINE_SLACK_S``), the first line if none did; a line nothing was heard for counts each
    of its words as an error."""
    if not spoken:
        raise ValueError("no spoken lines to compare with: the golden file needs 'spoken'")
    heard: list[list[str]] = [[] for _ in spoken]
    for t in transcripts:
        started = [
            i for i, line in enumerate(spoken) if line["at_s"] - LINE_SLACK_S <= t["start_s"]
        ]
        heard[started[-1] if started else 0].append(t["text"])
    lines = []
    for line, texts in zip(spoken, heard, strict=True):
        said, got = words(line["text"]), words(" ".join(texts))
        lines.append(
            {
                "at_s": line["at_s"],
                "spoken": line["text"],
                "heard": " ".join(texts),
                "errors": edit_distance(said, got),
                "words": len(said),
            }
        )
    total = sum(line["words"] for line in lines)
    errors = sum(line["errors"] for line in lines)
    return {
        "wer": round(errors / total, 3) if total else 0.0,
        "errors": errors,
        "words": total,
        "lines": lines,
    }


def hearing_text(result: dict, max_wer: float) -> str:
    """:func:`hearing`'s result as lines of text."""
    head = (
        f"word error rate {result['wer']:.3f} ({result['errors']} of {result['words']} words "
        f"spoken), at most {max_wer}"
    )
    return "\n".join(
        [head]
        + [
            f"  {line['at_s']:5.2f} s said {line['spoken']!r}, heard {line['heard']!r}: "
            f"{line['errors']} error(s) in {line['words']} words"
            for line in result["lines"]
        ]
    )


def _field_problem(rule: str, got: object, want: object, tolerance_ms: float) -> str | None:
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
    return None


def compare(
    actual: dict[str, list[dict]],
    golden: dict[str, list[dict]],
    *,
    tolerance_ms: float = STAMP_TOLERANCE_MS,
    max_wer: float = MAX_WER,
) -> list[str]:
    """Every difference between a run's summary and the golden one, as readable lines; and
    the finals' word error rate against the golden file's ``spoken`` words, when it is over
    ``max_wer``."""
    rules = {o.topic: o.rules for o in OUTPUTS}
    problems = []
    if "transcript" in actual and SPOKEN in golden:
        result = hearing(actual["transcript"], golden[SPOKEN])
        if result["wer"] > max_wer:
            problems.append("transcript: " + hearing_text(result, max_wer))
    for topic in actual.keys() | (golden.keys() - {SPOKEN}):
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
                problem = _field_problem(rule, g.get(name), w.get(name), tolerance_ms)
                if problem:
                    problems.append(f"{topic}[{index}].{name}: {problem}")
    return sorted(problems)


def golden_entries(summary: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """What the golden file records of a run: the compared fields only (what the finals said
    is checked against the words spoken, not recorded)."""
    rules = {o.topic: o.rules for o in OUTPUTS}
    return {
        topic: [{k: v for k, v in entry.items() if k in rules[topic]} for entry in entries]
        for topic, entries in summary.items()
    }


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
    parser.add_argument(
        "--max-wer",
        type=float,
        default=MAX_WER,
        help="highest word error rate of the finals against the words spoken",
    )
    args = parser.parse_args(argv)
    golden = args.golden or golden_path()
    previous = json.loads(golden.read_text(encoding="utf-8")) if golden.is_file() else {}
    if SPOKEN not in previous:
        print(f"{golden} has no '{SPOKEN}' lines (the words said in the session): add them")
        return 2
    result = demo.run_session(
        demo.default_bag(), out_dir=args.out, quiet=True, rate=REPLAY_RATE, overrides=OVERRIDES
    )
    summary = summarize(result.run)
    if "transcript" in summary:
        print(hearing_text(hearing(summary["transcript"], previous[SPOKEN]), args.max_wer))
    if args.update:
        recorded = {SPOKEN: previous[SPOKEN], **golden_entries(summary)}
        golden.write_text(json.dumps(recorded, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {golden}: " + ", ".join(f"{k} ({len(v)})" for k, v in recorded.items()))
        return 0
    problems = compare(summary, previous, max_wer=args.max_wer)
    for line in problems:
        print(line)
    print("matches the golden file" if not problems else f"{len(problems)} difference(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
