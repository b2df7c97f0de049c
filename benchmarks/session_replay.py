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

from _common import median, write_result

from omniflow import demo, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    tables, walls = [], []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            began = time.monotonic()
            result = demo.run_session(
                demo.default_bag(),
                out_dir=Path(tmp),
                quiet=True,
                namespace=f"/bench{uuid.uuid4().hex[:6]}",
            )
            walls.append(time.monotonic() - began)
            tables.append(report.latency(result.run))
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
    out = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "session_s": 12.0,
        "runs": args.runs,
        "wall_s_per_run": [round(w, 1) for w in walls],
        "stages": stages,
    }
    write_result(out, args.json)


if __name__ == "__main__":
    main()
