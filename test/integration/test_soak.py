"""Tier 2: the short soak. ``benchmarks/soak.py`` for a minute of wall time: the
bundled session looped at 1x through fusion, dialogue, speech and the power manager over DDS.

Nothing dies (no respawn), every loop is answered, the nodes' threads and open descriptors do
not grow after the warm-up, no node appears in the soak's graph, and no node counts an engine
error. The long run (30 minutes, RSS slopes) is the benchmark's own (README, "Figures")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SOAK = Path(__file__).parents[2] / "benchmarks" / "soak.py"

pytestmark = pytest.mark.timeout(420)


def test_a_short_soak_keeps_answering_with_flat_threads_and_descriptors(tmp_path):
    out = tmp_path / "soak.json"
    run = subprocess.run(
        [
            sys.executable,
            str(SOAK),
            "--minutes",
            "1.0",
            "--warmup",
            "0.3",
            "--sample-s",
            "5",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=360,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["loops"] >= 3, result
    assert result["respawns"] == [], result["respawns"]
    assert result["answers_per_loop"]["median"] >= 1, result["per_loop"]
    # The soak's own nodes; nodes of other programs in the domain are listed, not judged.
    graph = result["graph_nodes"]
    assert graph["first"] >= len(result["nodes"]) + 1, graph
    assert graph["appeared"] == [], graph
    for name, node in result["nodes"].items():
        assert node is not None, f"{name} was never sampled"
        # A turn's synthesis and decoding start short-lived threads and pipes: a sample can
        # catch a few; a leak grows with every loop.
        _, after_warmup, end = node["threads"]
        assert end <= after_warmup + 4, (name, node["threads"])
        _, after_warmup, end = node["fds"]
        assert end <= after_warmup + 4, (name, node["fds"])
        assert node["status"].get("engine_errors", 0) == 0, (name, node["status"])
