"""``benchmarks/scene_bias.py`` runs end to end on one question (its rooms, mixing and
scoring are the benchmark's; the figures are its own, not a test's): a change to the shared
room code once made every run of it fail before its first decode."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "scene_bias.py"

pytestmark = pytest.mark.timeout(300)


def test_the_scene_bias_benchmark_runs_on_one_question(tmp_path):
    out = tmp_path / "scene_bias.json"
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--room", "fan:10", "--questions", "1", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["questions"] == 1
    assert result["rooms"] == ["fan 10 dB"]
    runs = {"none", "hotwords/in_view", "hotwords/not_in_view"}
    assert runs <= set(result["by_run"]), result["by_run"].keys()
    assert len(result["transcripts"]) == len(result["by_run"])
    for figures in result["by_run"].values():
        assert figures["questions"] == 1
        assert 0.0 <= figures["wer"], figures


def test_the_scene_bias_benchmark_refuses_a_question_count_it_cannot_ask():
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--questions", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2
    assert "--questions 0: ask 1 to 24" in run.stderr
