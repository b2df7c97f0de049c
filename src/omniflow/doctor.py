"""``omniflow doctor``: check, on this machine and for one profile, everything the graph needs
before it starts, and say for each thing what is wrong and how to fix it.

    omniflow doctor [--profile pc|pi|replay] [--params-file F] [--json] [--skip llm,coral]

Checks (each ok / warn / fail with a one-line fix; the exit code is 1 when one fails): the ROS
environment, the package's interfaces, the profile's microphone and speaker (open at the
profile's rate, mono, block size; latency), its camera (a few frames: size and rate), the
Coral (through the vision engine's own accelerator selection, one inference timed), the model
files against their manifests, the LLM (load, first token), the TTS engine (first audio), the
thermal and cpufreq paths the power manager uses, and /dev/shm for the large-frames DDS
profile. The verdicts are pure functions (:mod:`omniflow.core.doctor`); this module probes.

Every probe takes its inputs from the profile's parameters (node defaults, then the profile's
YAML), so a check fails exactly where the node would.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Mapping
from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np

from omniflow.core import doctor as verdicts
from omniflow.core.doctor import FAIL, OK, WARN, Check
from omniflow.errors import OmniflowError

#: Checks ``--skip`` can leave out (the slow ones: a model load each).
SLOW_CHECKS = ("llm", "coral", "tts")
#: How long a microphone may take to deliver its first block (PulseAudio: up to 2 s).
FIRST_BLOCK_TIMEOUT_S = 3.0
#: Frames read to measure a camera's rate.
CAMERA_FRAMES = 6
#: Where a user without the hardware finds stand-ins (the fixes point there).
MIC_STAND_IN = (
    "connect a microphone (arecord -l lists them) and set audio_capture device:=<name>; "
    "without one: audio_capture source:=file file.path:=<wav>, or omniflow run --profile "
    "replay --bag <bag>"
)
SPEAKER_STAND_IN = (
    "connect a speaker (aplay -l lists them) and set speech device:=<name>; without one: "
    "speech sink:=null or sink:=wav"
)
CAMERA_STAND_IN = (
    "without a camera: camera source:=video path:=<file.mp4> (or source:=folder), or "
    "omniflow run --profile replay --bag <bag>"
)


def node_parameters(profile_name: str, params_file: str | None = None) -> dict[str, dict]:
    """Each node's parameters as the profile starts it: the node's defaults, then the
    profile's YAML (``params_file`` in its place)."""
    from omniflow.core.params import defaults
    from omniflow.graph import profile_nodes
    from omniflow.resources import share_dir

    values = {}
    for spec in profile_nodes(profile_name, str(share_dir()), params_file=params_file):
        merged = defaults(import_module(spec.module).PARAMS)
        merged.update(spec.parameters)
        values[spec.name] = merged
    return values


def _timed(action: Callable[[], object]) -> tuple[object, float]:
    began = time.perf_counter()
    result = action()
    return result, time.perf_counter() - began


# ----------------------------------------------------------------------- ROS
def check_ros(env: Mapping[str, str]) -> list[Check]:
    """The ROS environment and whether the package's interfaces import."""
    distro = ""
    for name in ("jazzy", "kilted", "humble"):
        try:
            version(f"ros-{name}-rclpy")
        except PackageNotFoundError:
            continue
        distro = name
        break
    try:
        import rclpy  # noqa: F401
    except ImportError:
        distro = ""
    checks = verdicts.ros_environment(env, distro)
    try:
        from omniflow.action import Converse  # noqa: F401
        from omniflow.msg import Association, AudioChunk, Transcript  # noqa: F401
    except ImportError as err:
        checks.append(
            Check(
                "ros.interfaces",
                FAIL,
                f"omniflow's messages do not import ({err})",
                "build the package: make setup (wheels) or colcon build, then source "
                "install/setup.bash",
            )
        )
    else:
        checks.append(Check("ros.interfaces", OK, "omniflow.msg and omniflow.action import"))
    return checks


# ----------------------------------------------------------------------- audio
def check_microphone(p: Mapping[str, object]) -> Check:
    """The capture node's input: opens at its rate, channels and block size, delivers a
    block; its latency."""
    from omniflow.devices.audio import open_audio_source
    from omniflow.errors import SourceError

    block_frames = int(p["sample_rate"]) * int(p["chunk_ms"]) // 1000
    location = str(p["device"] if p["source"] == "device" else p["file.path"])
    try:
        source = open_audio_source(
            str(p["source"]),
            location,
            sample_rate=int(p["sample_rate"]),
            channels=int(p["channels"]),
            block_frames=block_frames,
        )
        source.open()
    except OmniflowError as err:
        fix = MIC_STAND_IN if p["source"] == "device" else "give file.path an existing WAV file"
        return Check("audio.input", FAIL, str(err).split("\n")[0], fix)
    try:
        if p["source"] != "device":
            return Check("audio.input", OK, f"file {location} (a stand-in for a microphone)")
        try:
            block = source.read(FIRST_BLOCK_TIMEOUT_S)
        except SourceError as err:
            block, why = None, str(err)
        else:
            why = f"no audio within {FIRST_BLOCK_TIMEOUT_S:g} s"
        if block is None:
            return Check(
                "audio.input",
                FAIL,
                f"{source.describe()}: opened but {why}",
                "check the device is not muted or used by another program (fuser -v /dev/snd/*)",
            )
        return verdicts.audio_latency(
            "audio.input",
            source.describe(),
            source.input_latency,
            block_frames / source.sample_rate,
        )
    finally:
        source.close()


def check_speaker(p: Mapping[str, object]) -> Check:
    """The speech node's output: opens at its rate and block size; its latency."""
    from omniflow.devices.playback import open_audio_sink

    if p["sink"] != "device":
        return Check("audio.output", OK, f"sink {p['sink']} (no speaker used)")
    block_frames = int(p["sample_rate"]) * int(p["block_ms"]) // 1000
    try:
        sink = open_audio_sink(
            "device", str(p["device"]), sample_rate=int(p["sample_rate"]), block_frames=block_frames
        )
        sink.open()
    except OmniflowError as err:
        return Check("audio.output", FAIL, str(err).split("\n")[0], SPEAKER_STAND_IN)
    try:
        return verdicts.audio_latency(
            "audio.output", sink.describe(), sink.output_latency, block_frames / sink.sample_rate
        )
    finally:
        sink.close()


# ----------------------------------------------------------------------- camera
def check_camera(p: Mapping[str, object]) -> Check:
    """The camera node's source: opens, delivers frames; their size and rate."""
    from omniflow.devices.camera import open_frame_source

    location = str(p["device"] if p["source"] == "device" else p["path"])
    try:
        source = open_frame_source(
            str(p["source"]),
            location,
            width=int(p["width"]),
            height=int(p["height"]),
            fps=float(p["fps"]),
        )
        source.open()
    except OmniflowError as err:
        return Check("camera", FAIL, str(err).split("\n")[0], CAMERA_STAND_IN)
    try:
        began = time.perf_counter()
        frames = [source.read() for _ in range(CAMERA_FRAMES)]
        elapsed = time.perf_counter() - began
    except OmniflowError as err:
        return Check("camera", FAIL, f"{source.describe()}: opened but {err}", CAMERA_STAND_IN)
    finally:
        source.close()
    height, width = frames[-1].image.shape[:2]
    if p["source"] in ("video", "folder"):
        # Files are paced by the node, not the source: only their size is the source's.
        return Check("camera", OK, f"{source.describe()}: {width}x{height} (a stand-in)")
    fps = (CAMERA_FRAMES - 1) / elapsed if elapsed > 0 else float("inf")
    return verdicts.camera_frames(
        "camera",
        source.describe(),
        (width, height),
        (int(p["width"]), int(p["height"])),
        fps,
        float(p["fps"]),
    )


# ----------------------------------------------------------------------- Coral
def check_coral(p: Mapping[str, object], **engine: object) -> Check:
    """The fusion node's object detector, built by the vision engine's own selection
    (pycoral, else the libedgetpu delegate, else the CPU), and one inference timed.
    ``engine``: the detector's replaceable parts (``probe``, ``import_module``, ...)."""
    from omniflow.engines.vision.objects import ObjectDetector

    accelerator = str(p["vision.accelerator"])
    try:
        detector = ObjectDetector(
            str(p["vision.model_dir"]),
            accelerator=accelerator,
            num_threads=int(p["vision.threads"]),
            **engine,
        )
        _, seconds = _timed(lambda: detector.detect(np.zeros((300, 300, 3), np.uint8)))
    except OmniflowError as err:
        return Check(
            "coral",
            FAIL,
            str(err),
            "install libedgetpu1-std from Coral's apt repository, plug the Coral into USB 3 "
            "and replug after adding the udev rule (docs/hardware.md); or vision.accelerator:=auto",
        )
    data = {"backend": detector.backend, "inference_ms": round(seconds * 1e3, 1)}
    detail = f"objects on {detector.backend}, one inference {seconds * 1e3:.1f} ms"
    if detector.backend == "cpu" and accelerator != "cpu":
        return Check(
            "coral",
            WARN,
            f"no Edge TPU: {detail} ({detector.reason})",
            "for the Coral: Coral's apt repository, libedgetpu1-std and its udev rule "
            "(docs/hardware.md); the CPU works, slower",
            data,
        )
    return Check("coral", OK, f"{detail} ({detector.reason})", data=data)


# ----------------------------------------------------------------------- models
def check_model_files(folder: Path) -> list[Check]:
    """Every manifest under the installed ``models/``: its files present, sizes and sha256."""
    from omniflow.engines.vision.files import FETCH_COMMAND, read_manifest, verify

    checks = []
    for path in sorted(folder.glob("*.toml")):
        try:
            manifest = read_manifest(path)
        except OmniflowError as err:
            checks.append(Check(f"models.{path.stem}", FAIL, str(err), FETCH_COMMAND))
            continue
        problems = verify(manifest, path.parent / manifest.name)
        name = f"models.{manifest.name}"
        if problems:
            checks.append(Check(name, FAIL, "; ".join(problems), FETCH_COMMAND))
        else:
            checks.append(
                Check(name, OK, f"{len(manifest.files)} file(s) match {path.name} (sha256)")
            )
    if not checks:
        checks.append(Check("models", FAIL, f"no manifest in {folder}", "reinstall the package"))
    return checks


def check_llm(p: Mapping[str, object]) -> Check:
    """The dialogue node's language model: builds, loads, and its first token's time."""
    from omniflow.core.prompt import Prompt
    from omniflow.engines.llm import make_backend

    backend_name = str(p["llm.backend"])
    try:
        backend = make_backend(p)
        _, load_s = _timed(backend.load)
    except OmniflowError as err:
        return Check(
            "llm",
            FAIL,
            f"llm.backend {backend_name}: {err}",
            "fix llm.model_path / llm.remote.url, or llm.backend:=embedded (Gemma from PyPI)",
        )
    try:
        began = time.perf_counter()
        first = float("nan")
        prompt = Prompt(system="You are a robot.", user="Say hello.")
        generation = backend.generate(prompt, cancel=threading.Event(), max_tokens=4)
        for _ in generation:
            first = time.perf_counter() - began
            break
        generation.close()
    except OmniflowError as err:
        return Check("llm", FAIL, f"llm.backend {backend_name}: {err}", "see the error above")
    finally:
        backend.close()
    data = {"backend": backend_name, "load_s": round(load_s, 2), "first_token_s": round(first, 3)}
    return Check(
        "llm",
        OK,
        f"{backend_name}: loaded in {load_s:.1f} s, first token {first:.2f} s",
        data=data,
    )


def check_tts(p: Mapping[str, object]) -> Check:
    """The speech node's TTS engine: starts and gives its first audio (timed)."""
    from omniflow.engines.tts import make_tts_engine

    engine = str(p["engine"])
    try:
        with make_tts_engine(
            engine,
            voice=str(p["voice"]),
            words_per_minute=int(p["words_per_minute"]),
            model_path=str(p["piper.model_path"]),
        ) as tts:
            began = time.perf_counter()
            stream = tts.synthesize("Ready.")
            next(stream)
            first = time.perf_counter() - began
            stream.close()
            detail = tts.describe()
    except (OmniflowError, StopIteration) as err:
        fix = (
            "apt install espeak-ng"
            if engine == "espeak-ng"
            else "pip install piper-tts and set piper.model_path to a voice (.onnx)"
        )
        return Check("tts", FAIL, f"{engine}: {err or 'no audio'}", fix)
    return Check(
        "tts",
        OK,
        f"{detail}: first audio {first * 1e3:.0f} ms",
        data={"first_audio_ms": round(first * 1e3, 1)},
    )


# ----------------------------------------------------------------------- power and DDS
def check_power(root: str) -> list[Check]:
    """The thermal zones and cpufreq files the power manager reads and writes."""
    from omniflow.devices import sysfs

    cpus = sysfs.cpu_frequencies(root)
    readable = [cpu.path for cpu in cpus]
    writable = [
        cpu.path for cpu in cpus if os.access(os.path.join(cpu.path, "scaling_governor"), os.W_OK)
    ]
    governor = cpus[0].governor if cpus else ""
    return [
        verdicts.thermal(sysfs.thermal_zones(root)),
        verdicts.cpufreq(readable, writable, governor),
    ]


def check_shm(shm: str = "/dev/shm") -> Check:
    """Room in /dev/shm for the camera process's large-frames segment."""
    from omniflow.graph import FRAME_PUBLISHER_PROFILE
    from omniflow.resources import share_dir

    profile = share_dir().joinpath(*FRAME_PUBLISHER_PROFILE)
    segment = verdicts.shm_segment_bytes(profile.read_text(encoding="utf-8"))
    try:
        free = shutil.disk_usage(shm).free
    except OSError as err:
        return Check("dds.shm", FAIL, f"{shm}: {err}", "mount a tmpfs on /dev/shm")
    return verdicts.shared_memory(free, segment, processes=1)


# ----------------------------------------------------------------------- all
def run_checks(
    profile_name: str,
    params_file: str | None = None,
    skip: tuple[str, ...] = (),
    env: Mapping[str, str] | None = None,
    sysfs_root: str | None = None,
    coral: Mapping[str, object] | None = None,
) -> list[Check]:
    """Every check for a profile, in the order a user fixes things."""
    from omniflow.graph import CAPTURE_NODES
    from omniflow.resources import share_dir

    checks = check_ros(os.environ if env is None else env)
    nodes = node_parameters(profile_name, params_file)
    if "audio_capture" in nodes:
        checks.append(check_microphone(nodes["audio_capture"]))
    if "camera" in nodes:
        checks.append(check_camera(nodes["camera"]))
    if "fusion" in nodes and not set(CAPTURE_NODES) & set(nodes):
        checks.append(Check("capture", OK, "profile without capture nodes: a bag stands in"))
    if "speech" in nodes:
        checks.append(check_speaker(nodes["speech"]))
    checks += check_model_files(share_dir() / "models")
    if "coral" not in skip and "fusion" in nodes:
        checks.append(check_coral(nodes["fusion"], **(coral or {})))
    if "llm" not in skip and "dialogue" in nodes:
        checks.append(check_llm(nodes["dialogue"]))
    if "tts" not in skip and "speech" in nodes:
        checks.append(check_tts(nodes["speech"]))
    if "power_manager" in nodes or sysfs_root is not None:
        default_root = nodes.get("power_manager", {}).get("sysfs_root", "/")
        checks += check_power(sysfs_root if sysfs_root is not None else str(default_root))
    if "camera" in nodes:
        checks.append(check_shm())
    return checks


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``omniflow doctor``."""
    from omniflow.graph import PROFILES

    parser.add_argument("--profile", choices=tuple(PROFILES), default="pc", help="what to check")
    parser.add_argument("--params-file", help="YAML keyed by node name instead of the profile's")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--skip",
        default="",
        help=f"comma-separated slow checks to leave out: {', '.join(SLOW_CHECKS)}",
    )


def cmd_doctor(args: argparse.Namespace) -> int:
    skip = tuple(s.strip() for s in args.skip.split(",") if s.strip())
    unknown = set(skip) - set(SLOW_CHECKS)
    if unknown:
        raise OmniflowError(f"--skip takes {', '.join(SLOW_CHECKS)}; got {', '.join(unknown)}")
    checks = run_checks(args.profile, args.params_file, skip)
    if args.json:
        print(verdicts.format_json(checks, args.profile))
    else:
        print(verdicts.format_text(checks, f"omniflow doctor --profile {args.profile}"))
    return verdicts.exit_code(checks)


if __name__ == "__main__":
    top = argparse.ArgumentParser(prog="omniflow doctor")
    add_arguments(top)
    sys.exit(cmd_doctor(top.parse_args()))
