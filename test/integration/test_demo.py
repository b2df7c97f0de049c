"""`make demo`'s program end to end: the bundled session, and the user's own files (tier 3)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from omniflow.resources import sample


@pytest.mark.parametrize(
    "inputs",
    [[], ["--audio", "hello.wav", "--video", "scene.avi"]],
    ids=["bundled session", "own files"],
)
def test_demo_prints_transcript_frames_latency_and_writes_the_report(tmp_path, inputs):
    args = [str(sample(a)) if a.endswith((".wav", ".avi")) else a for a in inputs]
    result = subprocess.run(
        [sys.executable, "-m", "omniflow.cli", "demo", "--out", str(tmp_path), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "heard (utterance 1)" in out and "transcript:" in out
    assert "frames the association chose" in out and "speech onset" in out
    for stage in (
        "capture",
        "VAD/ASR",
        "vision",
        "association",
        "first token",
        "first audio",
        "end to end",
    ):
        assert f"\n{stage} " in out, stage
    assert "robot (turn" in out and "response:" in out  # the answer, as it streamed
    assert f"wrote under {tmp_path}" in out
    for step in ("[1/5]", "[3/5] replaying"):
        assert step in result.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["transcripts"] and report["associations"]
    assert report["latency"]["association"]["n"] >= 1
    assert report["responses"] and any(r["text"].strip() for r in report["responses"])
    assert report["latency"]["first token"]["n"] >= 1
    assert (tmp_path / "timeline.png").read_bytes().startswith(b"\x89PNG")
    assert list(tmp_path.glob("chosen_frame_*.png"))
    if inputs:
        assert (tmp_path / "input.mcap").is_file()


def test_demo_refuses_a_bag_without_the_inputs(tmp_path):
    from omniflow.bag import BagMessage, write_mcap_file

    bag = write_mcap_file(
        tmp_path / "only_clock.mcap",
        [BagMessage("clock", "rosgraph_msgs/msg/Clock", 10**9, bytes(4) + bytes(8))],
    )
    result = subprocess.run(
        [sys.executable, "-m", "omniflow.cli", "demo", "--bag", str(bag)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "has no messages on audio, image_raw" in result.stderr
