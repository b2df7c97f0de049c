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


@pytest.mark.serial  # the words heard
def test_demo_hears_a_telephone_band_8k_wav_and_names_its_band(tmp_path):
    """An 8 kHz WAV (the committed question, band-limited as a telephone line would) through
    ``omniflow demo --audio``: the fusion node takes the 8 kHz chunks over DDS, resamples
    them, reports the band in its diagnostics (and the shorter window Whisper's finals read
    from it) and hears the words."""
    import numpy as np
    import soundfile
    from scipy.signal import resample_poly

    from omniflow.bag import BagReader
    from omniflow.core.params import defaults
    from omniflow.core.text import edit_distance, words
    from omniflow.engines.fusion_engines import ENGINE_PARAMS

    speech, rate = soundfile.read(str(sample("hello.wav")), dtype="float64")
    assert rate == 16_000
    # 1.5 s more of silence after the words, as a recording goes on: the final transcript
    # comes after the VAD's closing silence and the decode, before the session ends.
    phone = np.concatenate([resample_poly(speech, 1, 2), np.zeros(12_000)])
    soundfile.write(tmp_path / "phone.wav", phone, 8000, subtype="PCM_16")
    result = subprocess.run(
        [sys.executable, "-m", "omniflow.cli", "demo", "--out", str(tmp_path / "out")]
        + ["--audio", str(tmp_path / "phone.wav"), "--video", str(sample("scene.avi"))]
        + ["--rate", "0.5"],  # half speed: the recogniser keeps up on a busy machine
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    finals = [t["text"] for t in report["transcripts"]]
    # Words, not noise: the greeting exactly, the question (when its final came before the
    # session's end) with at most 4 of its 5 words wrong; tiny.en hears this voice's "what is
    # this" as "well in this" at 16 kHz too, and at 8 kHz "well in different box" (the
    # hearing benchmark has the word error rates at 8 and 16 kHz).
    assert finals and words(finals[0]) == ["hello", "robot"], finals
    reference = words("What is this red box?")
    for text in finals[1:]:
        assert edit_distance(reference, words(text)) <= 4, finals
    reader = BagReader(tmp_path / "out" / "outputs")
    fusion = [
        {kv.key: kv.value for kv in status.values}
        for _, msg in reader.decoded(["/diagnostics"])
        for status in msg.status
        if status.name.endswith("/fusion")
        and any(kv.key == "audio_band_hz" for kv in status.values)
    ]
    assert fusion, "no fusion diagnostics recorded"
    assert fusion[-1]["audio_source_rate_hz"] == "8000"
    assert fusion[-1]["audio_band_hz"] == "4000"
    assert fusion[-1]["audio_band_limited"] == "True"
    window_s = defaults(ENGINE_PARAMS)["asr.whisper.band_limited_final_window_s"]
    assert fusion[-1]["asr_final_window_s"] == str(window_s) != "30.0"
    assert fusion[-1]["rejected_audio"] == "0"


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
