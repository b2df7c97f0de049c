#!/usr/bin/env python3
"""Run every benchmark script under ``benchmarks/`` and write one JSON summary (``make bench``).

Each script runs in its own process with the arguments in ``ARGUMENTS`` (a script not listed
there, e.g. a new one, runs with ``--json <out>/<name>.json`` only) and writes its own JSON;
the summary holds, per script, the command, its exit code, wall time and that JSON. A script
that fails is recorded with its output's tail, and the others still run.

    python scripts/run_benchmarks.py [--out build/bench] [--only speech fusion_core]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Arguments besides --json, chosen to keep `make bench` to minutes on a 2-core machine.
ARGUMENTS = {
    "transport": [
        "--all",
        "--rounds",
        "3",
        "--table",
        "--env",
        "ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST",
    ],
    "speech": ["--turns", "8"],
    "fusion_memory": ["--minutes", "10", "--warmup", "2"],
    "soak": ["--minutes", "5", "--warmup", "1"],
    "model_memory": ["--turns", "200", "--warmup", "25"],
    "token_freshness": ["--seconds", "40"],
    "echo": ["--rooms", "16"],
    "barge_in": ["--passes", "10"],
    "power": ["--seconds", "60"],
    "dialogue": ["--rounds", "7"],
    "llm": ["--rounds", "7"],
    "full_duplex": ["--passes", "8"],
    "intake": ["--seconds", "12"],
    "scene_bias": ["--quick"],
    "device_stamps": ["--seconds", "30", "--hog-cores", "1"],
}


def run(script: Path, out: Path) -> dict:
    name = script.stem
    result_path = out / f"{name}.json"
    result_path.unlink(missing_ok=True)
    command = [sys.executable, str(script), *ARGUMENTS.get(name, []), "--json", str(result_path)]
    print(f"== {name}: {' '.join(command[1:])}", flush=True)
    began = time.monotonic()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    entry = {
        "command": " ".join([Path(command[0]).name, *command[1:]]),
        "returncode": done.returncode,
        "seconds": round(time.monotonic() - began, 1),
    }
    sys.stdout.write(done.stdout)
    if done.returncode != 0:
        entry["error"] = (done.stdout + done.stderr)[-2000:]
        print(f"   {name} failed ({done.returncode}):\n{done.stderr[-2000:]}", flush=True)
    if result_path.is_file():
        entry["result"] = json.loads(result_path.read_text(encoding="utf-8"))
    return entry


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "build" / "bench")
    parser.add_argument("--only", nargs="+", help="run only these benchmarks (by name)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    # benchmarks/_common.py and any other _module are shared code, not benchmarks.
    scripts = sorted(s for s in (REPO / "benchmarks").glob("*.py") if not s.name.startswith("_"))
    if args.only:
        scripts = [s for s in scripts if s.stem in args.only]
    summary = {"python": sys.version.split()[0], "benchmarks": {}}
    for script in scripts:
        summary["benchmarks"][script.stem] = run(script, args.out)
    path = args.out / "summary.json"
    path.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    failed = [n for n, e in summary["benchmarks"].items() if e["returncode"] != 0]
    print(
        f"wrote {path}: {len(scripts)} benchmarks"
        + (f", failed: {', '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
