"""Tier 1: the `omniflow` command's arguments and refusals, and sessions made from the user's
own files (resampled audio, undecodable video), without ROS."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
import soundfile

from omniflow import cli, demo
from omniflow.bag import BagReader, decode
from omniflow.errors import SourceError
from omniflow.session import session_from_files

SAMPLES = Path(__file__).resolve().parents[2] / "test" / "data" / "samples"


def test_the_command_has_run_record_replay_and_demo():
    parser = cli.parser()
    args = parser.parse_args(["run", "--profile", "pi"])
    assert (args.command, args.profile, args.bag) == ("run", "pi", None)
    args = parser.parse_args(["replay", "x.mcap", "--rate", "2", "--clock", "--loop"])
    assert (args.bag, args.rate, args.clock, args.loop) == (Path("x.mcap"), 2.0, True, True)
    args = parser.parse_args(["record", "--topics", "audio", "transcript", "-o", "out"])
    assert args.topics == ["audio", "transcript"] and args.output == Path("out")
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "--profile", "laptop"])


def test_the_replay_profile_needs_a_bag(capsys):
    assert cli.main(["run", "--profile", "replay"]) == 1
    assert "needs --bag" in capsys.readouterr().err


def test_record_refuses_a_negative_free_space_margin(tmp_path, capsys):
    assert cli.main(["record", "--min-free-mb", "-5", "-o", str(tmp_path / "rec")]) == 1
    assert "--min-free-mb must be 0 or more, got -5" in capsys.readouterr().err
    assert not (tmp_path / "rec").exists()


def test_replaying_a_missing_or_foreign_bag_fails_clearly(tmp_path, capsys):
    assert cli.main(["replay", str(tmp_path / "none.mcap")]) == 1
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "x.mcap").write_text("hello")
    assert cli.main(["replay", str(tmp_path / "x.mcap")]) == 1
    assert "not a readable MCAP file" in capsys.readouterr().err


def test_demo_refuses_half_of_the_file_pair(capsys):
    with pytest.raises(SystemExit):
        demo.main(["--audio", "a.wav"])
    assert "--audio and --video go together" in capsys.readouterr().err


def test_the_installed_command_runs(tmp_path):
    exe = Path(sys.executable).parent / "omniflow"
    if not exe.exists():
        pytest.skip("omniflow is not installed into this environment (make setup)")
    done = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "run,record,replay,demo" in done.stdout


def test_a_wav_at_another_rate_is_resampled_into_the_session(tmp_path):
    rate = 44100
    t = np.arange(rate) / rate  # 1 s of a 440 Hz tone, stereo
    tone = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    soundfile.write(tmp_path / "tone.wav", np.stack([tone, tone], axis=1), rate)
    notes = []
    path = session_from_files(
        tmp_path / "tone.wav", SAMPLES / "scene.avi", tmp_path / "s.mcap", warn=notes.append
    )
    assert any("44100 Hz -> 16000 Hz" in n for n in notes)
    reader = BagReader(path)
    chunks = [msg for _, msg in reader.decoded(["audio"])]
    assert len(chunks) == 25 and {c.sample_rate for c in chunks} == {16000}
    assert {len(c.data) for c in chunks} == {1280} and {c.channels for c in chunks} == {1}
    frames = [msg for _, msg in reader.decoded(["image_raw"])]
    assert len(frames) == 15 and frames[0].encoding == "rgb8"
    stamps = [m.timestamp_ns for m in reader.messages(["image_raw"])]
    assert np.allclose(np.diff(stamps), 1e9 / 15, atol=1)
    assert decode(next(reader.messages(["audio"])).raw, "omniflow/msg/AudioChunk").sequence == 0


def test_a_telephone_band_wav_keeps_its_8k_rate_in_the_session(tmp_path):
    """Below 16 kHz the messages carry the source's own rate (the fusion node resamples it
    and reports the band), in 40 ms chunks stamped as at 16 kHz."""
    t = np.arange(8000) / 8000  # 1 s of a 440 Hz tone at 8 kHz
    soundfile.write(tmp_path / "phone.wav", (0.3 * np.sin(2 * np.pi * 440 * t)), 8000)
    notes = []
    path = session_from_files(
        tmp_path / "phone.wav", SAMPLES / "scene.avi", tmp_path / "s.mcap", warn=notes.append
    )
    assert not notes  # nothing converted on the way
    reader = BagReader(path)
    chunks = [msg for _, msg in reader.decoded(["audio"])]
    assert len(chunks) == 25 and {c.sample_rate for c in chunks} == {8000}
    assert {len(c.data) for c in chunks} == {640}  # 320 samples, 40 ms
    stamps = [m.timestamp_ns for m in reader.messages(["audio"])]
    assert np.allclose(np.diff(stamps), 40e6, atol=1)


def test_a_video_that_cannot_be_decoded_is_refused_naming_it(tmp_path):
    (tmp_path / "broken.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42" + bytes(500))
    with pytest.raises(SourceError, match="cannot decode video file .*broken.mp4"):
        session_from_files(SAMPLES / "hello.wav", tmp_path / "broken.mp4", tmp_path / "s.mcap")


def test_audio_that_is_not_audio_is_refused_naming_it(tmp_path):
    (tmp_path / "noise.wav").write_bytes(b"RIFF nonsense")
    with pytest.raises(SourceError, match="noise.wav"):
        session_from_files(tmp_path / "noise.wav", SAMPLES / "scene.avi", tmp_path / "s.mcap")


def test_large_frames_are_scaled_down(tmp_path):
    writer = cv2.VideoWriter(
        str(tmp_path / "big.avi"), cv2.VideoWriter_fourcc(*"MJPG"), 15, (1280, 720)
    )
    for _ in range(3):
        writer.write(np.full((720, 1280, 3), 128, np.uint8))
    writer.release()
    path = session_from_files(SAMPLES / "hello.wav", tmp_path / "big.avi", tmp_path / "s.mcap")
    frame = next(BagReader(path).decoded(["image_raw"]))[1]
    assert (frame.width, frame.height) == (640, 360)


def test_the_supervisor_respawns_the_nodes_it_is_told_to(tmp_path):
    import time

    from omniflow.launcher import NodeSpec, Supervisor

    (tmp_path / "of_dies.py").write_text("import sys\nprint('bye')\nsys.exit(3)\n")
    lines: list[str] = []
    supervisor = Supervisor(
        [NodeSpec(module="of_dies", name="camera"), NodeSpec(module="of_dies", name="fusion")],
        {"camera"},
        0.2,
        report=lines.append,
        env={"PYTHONPATH": str(tmp_path)},
    )
    try:
        deadline = time.monotonic() + 30
        while supervisor.respawns["camera"] < 2 and time.monotonic() < deadline:
            supervisor.poll()
            time.sleep(0.05)
        assert supervisor.respawns["camera"] >= 2
        assert supervisor.respawns["fusion"] == 0
        assert sum("fusion exited with 3" in line for line in lines) == 1
        assert any(
            "camera exited with 3; respawning in 0.2 s" in line and "bye" in line for line in lines
        )
        assert "respawned camera" in lines
    finally:
        supervisor.close()
