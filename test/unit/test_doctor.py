"""Tests of ``omniflow doctor``: each check's ok / warn / fail paths (the pure verdicts of
omniflow.core.doctor, and the probes of omniflow.doctor over fake device lists, fake sysfs
trees and a fake pycoral module where this machine has no such hardware), and the command on
this machine, which has no microphone, camera or Coral."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import cv2
import numpy as np
import pytest
from test_portaudio import fake_sounddevice
from test_vision_objects import NO_TPU, fake_pycoral, no_pycoral
from tiny_gguf import write_tiny_gguf

from omniflow import doctor
from omniflow.cli import main
from omniflow.core import doctor as verdicts
from omniflow.core.doctor import FAIL, OK, WARN, Check
from omniflow.resources import share_dir

SYSFS = Path(__file__).parents[1] / "data" / "sysfs"


def parameters(node: str, profile: str = "pc", **values: object) -> dict[str, object]:
    """A node's parameters as the profile starts it, with ``values`` changed."""
    return {**doctor.node_parameters(profile)[node], **values}


# ----------------------------------------------------------------------- report
def test_exit_code_is_one_only_when_a_check_fails() -> None:
    assert verdicts.exit_code([Check("a", OK, ""), Check("b", WARN, "", "x")]) == 0
    assert verdicts.exit_code([Check("a", OK, ""), Check("b", FAIL, "", "x")]) == 1


def test_text_report_puts_each_fix_under_its_check_and_counts() -> None:
    text = verdicts.format_text(
        [Check("mic", FAIL, "no input", "plug one in"), Check("ros", OK, "jazzy")], "title"
    )
    lines = text.splitlines()
    assert lines[0] == "title" and lines[1].startswith("[FAIL] mic")
    assert lines[2].strip() == "fix: plug one in" and lines[-1] == "1 ok, 0 warn, 1 fail"


def test_an_unknown_verdict_is_refused() -> None:
    with pytest.raises(ValueError, match="ok, warn, fail"):
        Check("x", "maybe", "")


# ----------------------------------------------------------------------- ROS environment
def by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


@pytest.mark.parametrize(
    ("env", "distro", "name", "verdict"),
    [
        ({}, "jazzy", "ros.distro", OK),
        ({"ROS_DISTRO": "humble"}, "", "ros.distro", WARN),
        ({}, "", "ros.distro", FAIL),
        ({}, "jazzy", "ros.rmw", OK),
        ({"RMW_IMPLEMENTATION": "rmw_cyclonedds_cpp"}, "jazzy", "ros.rmw", WARN),
        ({"ROS_DOMAIN_ID": "42"}, "jazzy", "ros.domain_id", OK),
        ({}, "jazzy", "ros.domain_id", WARN),
        ({"ROS_DOMAIN_ID": "150"}, "jazzy", "ros.domain_id", WARN),
        ({"ROS_DOMAIN_ID": "robot"}, "jazzy", "ros.domain_id", FAIL),
        ({"ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST"}, "jazzy", "ros.discovery", OK),
        ({"ROS_LOCALHOST_ONLY": "1"}, "jazzy", "ros.discovery", WARN),
        ({"ROS_AUTOMATIC_DISCOVERY_RANGE": "LAN"}, "jazzy", "ros.discovery", FAIL),
        ({"ROS_AUTOMATIC_DISCOVERY_RANGE": "OFF"}, "jazzy", "ros.discovery", FAIL),
        (
            {"ROS_AUTOMATIC_DISCOVERY_RANGE": "OFF", "ROS_STATIC_PEERS": "10.0.0.2"},
            "jazzy",
            "ros.discovery",
            OK,
        ),
    ],
)
def test_ros_environment_verdicts(env, distro, name, verdict) -> None:
    check = by_name(verdicts.ros_environment(env, distro))[name]
    assert check.verdict == verdict
    assert bool(check.fix) == (verdict != OK)


def test_ros_check_here_finds_jazzy_and_the_interfaces() -> None:
    checks = by_name(doctor.check_ros({"ROS_DOMAIN_ID": "7"}))
    assert checks["ros.distro"].verdict == OK and "jazzy" in checks["ros.distro"].detail
    assert checks["ros.interfaces"].verdict == OK


# ----------------------------------------------------------------------- audio
class FakeStream:
    """A PortAudio stream reporting ``reported`` latency; an input one delivers one block
    when started (as PortAudio's callback would)."""

    def __init__(self, reported: float, deliver: bool, **kwargs: Any) -> None:
        self.kwargs, self.latency, self.deliver = kwargs, reported, deliver

    def start(self) -> None:
        if self.deliver:
            frames = self.kwargs["blocksize"]
            self.kwargs["callback"](
                np.zeros((frames, 1), np.int16),
                frames,
                SimpleNamespace(currentTime=1.0, inputBufferAdcTime=0.96),
                SimpleNamespace(input_overflow=False),
            )

    def abort(self) -> None:
        pass

    def close(self) -> None:
        pass


def sounddevice_with_streams(
    monkeypatch, latency: float, devices=None, deliver: bool = True
) -> ModuleType:
    sd = fake_sounddevice() if devices is None else fake_sounddevice(devices, default=None)
    sd.check_input_settings = sd.check_output_settings = lambda **kwargs: None
    sd.InputStream = lambda **kwargs: FakeStream(latency, deliver, **kwargs)
    sd.OutputStream = lambda **kwargs: FakeStream(latency, False, **kwargs)
    monkeypatch.setitem(sys.modules, "sounddevice", sd)
    return sd


@pytest.mark.parametrize(("latency", "verdict", "fix"), [(0.012, OK, ""), (0.090, WARN, "hw:")])
def test_microphone_latency_decides_between_ok_and_warn(monkeypatch, latency, verdict, fix):
    sounddevice_with_streams(monkeypatch, latency)
    check = doctor.check_microphone(parameters("audio_capture", device="USB"))
    assert check.verdict == verdict and fix in check.fix
    assert "'USB Mic'" in check.detail and check.data["block_ms"] == 40.0
    assert check.data["latency_ms"] == pytest.approx(latency * 1e3)


def test_microphone_that_delivers_nothing_fails(monkeypatch) -> None:
    sounddevice_with_streams(monkeypatch, 0.01, deliver=False)
    monkeypatch.setattr(doctor, "FIRST_BLOCK_TIMEOUT_S", 0.05)
    check = doctor.check_microphone(parameters("audio_capture", device="USB"))
    assert check.verdict == FAIL and "no audio within" in check.detail


def test_no_microphone_fails_and_points_to_the_stand_ins(monkeypatch) -> None:
    speakers_only = [
        {"index": 0, "name": "HDMI 0", "max_input_channels": 0, "max_output_channels": 8}
    ]
    sounddevice_with_streams(monkeypatch, 0.01, devices=speakers_only)
    check = doctor.check_microphone(parameters("audio_capture", "pi"))
    assert check.verdict == FAIL and "no audio input devices" in check.detail
    assert "source:=file" in check.fix and "--profile replay --bag" in check.fix


def test_microphone_file_stand_in_is_ok() -> None:
    check = doctor.check_microphone(
        parameters(
            "audio_capture",
            source="file",
            **{"file.path": str(share_dir() / "samples" / "hello.wav")},
        )
    )
    assert check.verdict == OK and "stand-in" in check.detail


def test_speaker_paths(monkeypatch) -> None:
    sounddevice_with_streams(monkeypatch, 0.02)
    assert doctor.check_speaker(parameters("speech", device="HDMI")).verdict == OK
    assert doctor.check_speaker(parameters("speech", sink="null")).verdict == OK
    sounddevice_with_streams(monkeypatch, 0.02, devices=[])
    check = doctor.check_speaker(parameters("speech"))
    assert check.verdict == FAIL and "sink:=null" in check.fix


# ----------------------------------------------------------------------- camera
@pytest.fixture(scope="module")
def video(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("camera") / "clip.avi"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 15.0, (320, 240))
    for i in range(8):
        writer.write(np.full((240, 320, 3), i * 20, np.uint8))
    writer.release()
    return path


def test_camera_file_stand_in_is_ok(video) -> None:
    check = doctor.check_camera(parameters("camera", source="video", path=str(video)))
    assert check.verdict == OK and "320x240" in check.detail


@pytest.mark.parametrize(
    ("source", "device", "expected"),
    [("device", "/dev/video97", "video97"), ("picamera2", "0", "picamera2")],
)
def test_missing_camera_fails_and_points_to_the_stand_ins(source, device, expected) -> None:
    check = doctor.check_camera(parameters("camera", source=source, device=device))
    assert check.verdict == FAIL and expected in check.detail
    assert "source:=video" in check.fix and "--bag" in check.fix


@pytest.mark.parametrize(
    ("size", "fps", "verdict"),
    [((640, 480), 15.0, OK), ((1280, 720), 15.0, WARN), ((640, 480), 7.0, WARN)],
)
def test_camera_size_and_rate_verdicts(size, fps, verdict) -> None:
    check = verdicts.camera_frames("camera", "cam", size, (640, 480), fps, 15.0)
    assert check.verdict == verdict


# ----------------------------------------------------------------------- Coral
def test_coral_through_pycoral_is_ok_with_its_inference_time(monkeypatch) -> None:
    for name, module in fake_pycoral([{"type": "usb", "path": "/sys/bus/usb/2-1"}]).items():
        monkeypatch.setitem(sys.modules, name, module)
    check = doctor.check_coral(parameters("fusion", "pi"), probe=NO_TPU)
    assert check.verdict == OK and check.data["backend"] == "pycoral"
    assert check.data["inference_ms"] > 0 and "usb" in check.detail


def test_no_coral_on_auto_warns_with_the_reason() -> None:
    check = doctor.check_coral(parameters("fusion", "pi"), probe=NO_TPU, import_module=no_pycoral)
    assert check.verdict == WARN and check.data["backend"] == "cpu"
    assert "pycoral not importable" in check.detail and "libedgetpu" in check.fix


def test_no_coral_on_edgetpu_fails() -> None:
    p = parameters("fusion", "pi", **{"vision.accelerator": "edgetpu"})
    check = doctor.check_coral(p, probe=NO_TPU, import_module=no_pycoral)
    assert check.verdict == FAIL and "accelerator=edgetpu" in check.detail


def test_cpu_on_purpose_is_ok() -> None:
    check = doctor.check_coral(parameters("fusion", **{"vision.accelerator": "cpu"}))
    assert check.verdict == OK and check.data["backend"] == "cpu"


# ----------------------------------------------------------------------- model files
def test_installed_model_files_match_their_manifests() -> None:
    checks = doctor.check_model_files(share_dir() / "models")
    assert [c.verdict for c in checks] == [OK]


def test_missing_and_damaged_model_files_fail_with_the_fetch_command(tmp_path) -> None:
    installed = share_dir() / "models"
    shutil.copy(installed / "coco_detector.toml", tmp_path)
    shutil.copytree(installed / "coco_ssd_mobilenet_v2", tmp_path / "coco_ssd_mobilenet_v2")
    labels = tmp_path / "coco_ssd_mobilenet_v2" / "coco_labels.txt"
    labels.write_text(labels.read_text().replace("cup", "mug"))
    (tmp_path / "coco_ssd_mobilenet_v2" / "mobilenet_ssd_v2_coco_quant_postprocess.tflite").unlink()
    (check,) = doctor.check_model_files(tmp_path)
    assert check.verdict == FAIL and "make setup" in check.fix
    assert "is missing" in check.detail and "wrong sha256" in check.detail
    (empty,) = doctor.check_model_files(tmp_path / "coco_ssd_mobilenet_v2")
    assert empty.verdict == FAIL and "no manifest" in empty.detail


# ----------------------------------------------------------------------- LLM and TTS
def test_llm_loads_and_reports_its_first_token(tmp_path) -> None:
    model = write_tiny_gguf(tmp_path / "tiny.gguf")
    p = parameters("dialogue", **{"llm.backend": "gguf", "llm.model_path": str(model)})
    check = doctor.check_llm(p)
    assert check.verdict == OK and check.data["first_token_s"] > 0


def test_missing_llm_fails() -> None:
    p = parameters("dialogue", **{"llm.backend": "gguf", "llm.model_path": "/nowhere.gguf"})
    check = doctor.check_llm(p)
    assert check.verdict == FAIL and "/nowhere.gguf" in check.detail and check.fix


def test_espeak_gives_its_first_audio_and_piper_without_a_voice_fails() -> None:
    check = doctor.check_tts(parameters("speech"))
    assert check.verdict == OK and check.data["first_audio_ms"] > 0
    check = doctor.check_tts(parameters("speech", engine="piper"))
    assert check.verdict == FAIL and "piper.model_path" in check.fix


# ----------------------------------------------------------------------- power and shm
def test_pi5_tree_has_thermal_zones_and_cpufreq() -> None:
    thermal, freq = doctor.check_power(str(SYSFS / "pi5"))
    assert thermal.verdict == OK and "°C" in thermal.detail
    assert freq.verdict in (OK, WARN) and freq.data["readable"]


def test_cpufreq_not_writable_warns() -> None:
    # (root writes any file, so this path is tested on the verdict alone)
    check = verdicts.cpufreq(["a", "b"], ["a"], "ondemand")
    assert check.verdict == WARN and "udev rule" in check.fix


def test_empty_tree_warns_for_both(tmp_path) -> None:
    thermal, freq = doctor.check_power(str(tmp_path))
    assert thermal.verdict == WARN and freq.verdict == WARN


@pytest.mark.parametrize(("free_mb", "verdict"), [(8, FAIL), (40, WARN), (256, OK)])
def test_shared_memory_verdicts(free_mb, verdict) -> None:
    check = verdicts.shared_memory(free_mb << 20, 16 << 20, processes=1)
    assert check.verdict == verdict


def test_shm_check_reads_the_segment_of_the_frames_profile() -> None:
    assert doctor.check_shm().data["needed_mb"] == 16.0


FASTDDS = Path(__file__).parents[2] / "config" / "fastdds"


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ((FASTDDS / "large_frames.xml").read_text(), 16 << 20),
        ((FASTDDS / "frame_receiver.xml").read_text(), 0),  # Fast DDS's default
        ("<dds><segment_size>lots</segment_size></dds>", 0),
        ("not xml", 0),
    ],
)
def test_the_segment_size_of_a_profile(text, size) -> None:
    assert verdicts.shm_segment_bytes(text) == size


def test_a_node_whose_profile_does_not_fit_in_shm_is_told_why(tmp_path) -> None:
    from omniflow.ros.run import _shm_shortfall

    huge = tmp_path / "huge.xml"  # a segment no /dev/shm holds
    huge.write_text(f"<dds><segment_size>{1 << 50}</segment_size></dds>")
    said = _shm_shortfall({"FASTRTPS_DEFAULT_PROFILES_FILE": str(huge)})
    assert "fall back to UDP" in said and str(huge) in said and "--shm-size" in said
    frames = str(FASTDDS / "large_frames.xml")
    assert _shm_shortfall({"FASTRTPS_DEFAULT_PROFILES_FILE": frames}, str(tmp_path)) == ""
    assert _shm_shortfall({}) == ""
    assert _shm_shortfall({"FASTRTPS_DEFAULT_PROFILES_FILE": str(tmp_path / "none")}) == ""


# ----------------------------------------------------------------------- the command here
def test_doctor_pi_on_this_machine_fails_clearly_and_exits_non_zero(capsys) -> None:
    code = main(["doctor", "--profile", "pi", "--json", "--skip", "llm,coral,tts"])
    report = json.loads(capsys.readouterr().out)
    checks = {c["name"]: c for c in report["checks"]}
    assert code == 1 and report["exit_code"] == 1 and report["profile"] == "pi"
    # No microphone, camera or speaker here: each says so and names its stand-in.
    assert (
        checks["audio.input"]["verdict"] == FAIL and "source:=file" in checks["audio.input"]["fix"]
    )
    assert checks["camera"]["verdict"] == FAIL and "picamera2" in checks["camera"]["detail"]
    assert checks["audio.output"]["verdict"] == FAIL
    assert all(c["verdict"] == OK or c["fix"] for c in report["checks"])
    assert {"ros.distro", "ros.interfaces", "models.coco_ssd_mobilenet_v2", "dds.shm"} <= set(
        checks
    )


def test_doctor_rejects_an_unknown_skip(capsys) -> None:
    assert main(["doctor", "--skip", "camera"]) == 1
    assert "--skip takes llm, coral, tts" in capsys.readouterr().err


@pytest.mark.parametrize("profile", ["split-robot", "split-dialogue"])
def test_doctor_checks_each_half_of_a_split_graph(capsys, profile) -> None:
    main(["doctor", "--profile", profile, "--json", "--skip", "llm,coral,tts"])
    names = {c["name"] for c in json.loads(capsys.readouterr().out)["checks"]}
    assert ("audio.input" in names) == (profile == "split-robot")
    assert "ros.discovery" in names
