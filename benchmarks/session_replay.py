#!/usr/bin/env python3
"""The demo's per-stage latency table, measured: the bundled session replayed through the graph.

Each of ``--runs`` runs replays ``test/data/samples/session.mcap`` (12 s) through the replay
profile's nodes (today fusion and speech to the null sink; the dialogue and power nodes join by
name when they exist), each in its own process on /clock, exactly as ``omniflow demo`` does,
and computes the latency rows of ``omniflow.report`` from what was recorded. Reported per
stage: the median over runs of each run's median, the largest p90, the sample count, and the
source material's Pi 5 + Coral figure beside it (different hardware; and the VAD/ASR and
association rows include waits by design: the VAD's closing silence and the window's
``after_ms``). Rows whose topics nobody publishes are null. Also the wall time per run
(12 s of session, plus node start-up, the 2.5 s tail and shutdown). Prints JSON; ``--json
PATH`` also writes it.

``--baseline NAME`` also replays the session, run for run alternating with the defaults, with
one of ``BASELINES``: ``turn-taking`` before the semantic end of turn (``vad.min_silence_ms``
400, the dialogue answering every final at once), ``partials`` before the draft partials and
vision's yield (``asr.whisper.draft_window_s`` 30, ``vision.turn_yield_ms`` 0), or the other
recogniser, ``moonshine`` (``asr.engine`` moonshine), or ``answer-ahead``, without the answer
started while the end-of-turn wait runs (``end_of_turn.answer_ahead`` false), or
``final-window``, finals from a cut 10 s encoder window (``asr.whisper.final_window_s``); it
gives each stage's median beside the defaults' and their ratio. ``--set NODE:NAME=VALUE``
changes a parameter in both (the answer ahead against none, with Moonshine: ``--set
fusion:asr.engine=moonshine --set dialogue:end_of_turn.answer_ahead=true --baseline
answer-ahead``).

    .venv/bin/python benchmarks/session_replay.py --runs 3 --json build/bench/session_replay.json
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
import uuid
from pathlib import Path

import yaml
from _common import median, ratio, write_result

from omniflow import demo, report

# Baselines (--baseline NAME): "turn-taking", before the semantic end of turn (the VAD's
# 400 ms closing silence, every final transcript answered at once); "partials", before the
# draft partials and vision's yield at the end of a turn (partials read Whisper's whole
# window, frames encoded throughout); "moonshine", the other open-vocabulary recogniser;
# "answer-ahead", without the answer started while the end-of-turn wait runs (off by
# default: measure it with --set dialogue:end_of_turn.answer_ahead=true); "final-window",
# Whisper's finals from a 10 s encoder window (faster, more words wrong at 16 kHz);
# "first-at-mark", the speech node's first phrase waiting for the token after its full stop.
BASELINES = {
    "turn-taking": {
        "fusion": {"vad.min_silence_ms": 400},
        "dialogue": {"end_of_turn.enabled": False},
    },
    "partials": {"fusion": {"asr.whisper.draft_window_s": 30.0, "vision.turn_yield_ms": 0}},
    "moonshine": {"fusion": {"asr.engine": "moonshine"}},
    "answer-ahead": {"dialogue": {"end_of_turn.answer_ahead": False}},
    "final-window": {"fusion": {"asr.whisper.final_window_s": 10.0}},
    "first-at-mark": {"speech": {"chunker.first_at_mark": False}},
}


def replay(overrides: dict | None) -> tuple[dict, float]:
    """One replay of the bundled session: (its latency table, its wall time in s)."""
    with tempfile.TemporaryDirectory() as tmp:
        began = time.monotonic()
        result = demo.run_session(
            demo.default_bag(),
            out_dir=Path(tmp),
            quiet=True,
            namespace=f"/bench{uuid.uuid4().hex[:6]}",
            overrides=overrides,
        )
        return report.latency(result.run), time.monotonic() - began


def parse_sets(parser: argparse.ArgumentParser, sets: list[str]) -> dict:
    """``NODE:NAME=VALUE`` strings as overrides by node (values read as YAML scalars)."""
    out: dict[str, dict] = {}
    for item in sets:
        node, sep, rest = item.partition(":")
        name, eq, value = rest.partition("=")
        if not (sep and eq and node and name):
            parser.error(f"--set {item!r}: expected NODE:NAME=VALUE")
        out.setdefault(node, {})[name] = yaml.safe_load(value)
    return out


def merged(common: dict, baseline: dict) -> dict:
    """``common``'s overrides with a baseline's over them."""
    out = {node: dict(values) for node, values in common.items()}
    for node, values in baseline.items():
        out.setdefault(node, {}).update(values)
    return out


def stage_medians(tables: list[dict]) -> dict:
    """Per stage: the median over runs of each run's median, and what the row measures."""
    stages = {}
    for row in report.LATENCY_ROWS:
        entries = [t[row.stage] for t in tables if t[row.stage] is not None]
        stages[row.stage] = (
            None
            if not entries
            else {
                "median_ms": median((e["median_ms"] for e in entries), 1),
                "p90_ms_max": round(max(e["p90_ms"] for e in entries), 1),
                "n_per_run": entries[0]["n"],
                "runs": len(entries),
                "measures": row.measures,
                "source_pi5_ms": row.budget_ms,
            }
        )
    return stages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--baseline", choices=sorted(BASELINES), help="also replay with this baseline, alternating"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NODE:NAME=VALUE",
        help="a parameter for both configurations (repeatable), e.g. fusion:asr.engine=moonshine",
    )
    parser.add_argument("--json", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    common = parse_sets(parser, args.set)
    tables, walls, baseline = [], [], []
    for _ in range(args.runs):
        table, wall = replay(common)
        tables.append(table)
        walls.append(wall)
        if args.baseline:
            baseline.append(replay(merged(common, BASELINES[args.baseline]))[0])
    stages = stage_medians(tables)
    out = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "session_s": 12.0,
        "runs": args.runs,
        "set": common,
        "wall_s_per_run": [round(w, 1) for w in walls],
        "stages": stages,
    }
    if args.baseline:
        before = stage_medians(baseline)
        out["baseline"] = {
            "name": args.baseline,
            "overrides": BASELINES[args.baseline],
            "stages": before,
        }
        out["ratio_vs_baseline"] = {
            stage: ratio(row["median_ms"], (before.get(stage) or {}).get("median_ms"))
            for stage, row in stages.items()
            if row is not None
        }
    write_result(out, args.json)


if __name__ == "__main__":
    main()
