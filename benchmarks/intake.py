#!/usr/bin/env python3
"""Audio first: how many audio chunks and camera frames the fusion node receives of those sent.

Method (prints one JSON object, and a Markdown table on stderr):

- For each *condition* (frame size and rate, e.g. ``640x480@15``) and each *variant*, one
  fusion node is started (its own process, real engines: webrtc VAD, Whisper tiny.en, the
  vision detectors at ``vision.rate_hz`` 15, so every 15 fps frame is encoded, as in a
  replay) and, once it is active, publishers send ``--seconds`` of audio (the sample
  question, looped: 40 ms chunks at 25 Hz) and rgb8 frames of that size and rate
  (photographs), stamped now, paced by the wall clock. ``--layout player`` (default): both
  streams from one process, one DDS participant, as ``omniflow demo`` / ``omniflow replay``
  send a bag, the harder case for audio; ``--layout graph``: a microphone process and a
  camera process, as the live graph runs.
- The publisher reports what it sent; the fusion node's ``~/status`` counters say what it
  received (``audio_chunks``, ``frames``) and what its intake saw lost on the way
  (``audio_lost``, ``frames_lost``: gaps in the DDS publication sequence numbers), skipped
  for a newer frame (``frames_skipped``) or refused as too large (``frames_too_large``).
  The peak resident memory of the fusion process (``VmHWM``) is read before it stops; its
  resident memory (``VmRSS``) before the stream, sampled every 0.5 s during it (the largest
  sample of each third: levelling off or climbing) and after it.
- Variants, all measured in the same run, one after another per condition:
  ``before``: every process on Fast DDS's default participant settings (what the demo's
  player had: a 512 KiB shared-memory segment) and the fusion node's audio queue at the
  sensor-data depth of 5 chunks (``audio.queue_depth: 5``), the intake as issue #12 found
  it; ``after``: omniflow's DDS profiles as the graph now gives them, the publishers with
  ``config/fastdds/large_frames.xml`` (as the camera node, the demo and ``omniflow replay``)
  and the fusion node with ``config/fastdds/frame_receiver.xml`` (a deeper shared-memory
  port queue), and the node's default audio queue (50 chunks, 2 s). ``--variants`` adds
  ``profile_only`` (the profiles, queue of 5) and ``queue_only`` (defaults, queue of 50) to
  apportion the gain.
- ``--hog-cores N``: each variant is run a second time with ``scripts/cpu_hog.py`` keeping N
  cores busy (a busy robot computer); ``audio_ratio_vs_no_hog`` divides its audio ratio by the
  one without the hog, measured just before, and ``hog`` says what CPU time the hog got.
- ``7680x4320@1`` (``--conditions``, with ``--layout graph``) shows a stream of frames far
  over ``image.max_pixels``: they are refused at intake, and audio and memory must not
  suffer. (From one participant, 100 MB frames crowd the sender's own audio out of its
  shared-memory segment whatever the receiver does.)

Ratios are received / sent per variant; ``audio_ratio_vs_before`` divides a variant's audio
ratio by the ``before`` one of the same condition. A benchmark prints figures; it does not
fail on a slow machine.

Run from the repository root::

    .venv/bin/python benchmarks/intake.py --seconds 12 --json build/bench/intake.json
    .venv/bin/python benchmarks/intake.py --variants before profile_only queue_only after
    .venv/bin/python benchmarks/intake.py --layout graph --conditions 640x480@15 7680x4320@1
    .venv/bin/python benchmarks/intake.py --variants after --hog-cores 1
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from _common import cpu_hog, ratio, write_result

REPO = Path(__file__).resolve().parents[1]
HELLO = REPO / "test" / "data" / "samples" / "hello.wav"
LARGE_FRAMES = REPO / "config" / "fastdds" / "large_frames.xml"
FRAME_RECEIVER = REPO / "config" / "fastdds" / "frame_receiver.xml"
PROFILE_VARIABLES = ("FASTRTPS_DEFAULT_PROFILES_FILE", "FASTDDS_DEFAULT_PROFILES_FILE")
CHUNK_S = 0.04
READY_TIMEOUT_S = 180.0  # the fusion node loads Whisper and the detectors on a busy machine
SETTLE_S = 3.0  # after the publisher stops, for the last status (published every second)


@dataclass(frozen=True)
class Variant:
    description: str
    profiles: bool  # the publisher uses large_frames.xml, fusion frame_receiver.xml
    queue_depth: int | None  # the fusion node's audio.queue_depth; None: its default


VARIANTS = {
    "before": Variant("default DDS profiles, audio queue 5 (as issue #12 found it)", False, 5),
    "profile_only": Variant("omniflow's DDS profiles, audio queue 5", True, 5),
    "queue_only": Variant("default DDS profiles, audio queue 50", False, None),
    "after": Variant("omniflow's DDS profiles, audio queue 50 (now)", True, None),
}


def parse_condition(text: str) -> tuple[int, int, float]:
    match = re.fullmatch(r"(\d+)x(\d+)@(\d+(?:\.\d+)?)", text)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r}: expected WIDTHxHEIGHT@FPS, e.g. 640x480@15")
    return int(match[1]), int(match[2]), float(match[3])


# ----------------------------------------------------------------------------- publisher
def frames_of(width: int, height: int) -> list:
    """Two photographs at width x height, rgb8."""
    import cv2
    import numpy as np
    import skimage.data

    return [
        np.ascontiguousarray(cv2.resize(photo, (width, height), interpolation=cv2.INTER_AREA))
        for photo in (skimage.data.coffee(), skimage.data.astronaut())
    ]


def run_publisher(args: argparse.Namespace) -> dict[str, object]:
    """A publisher process: audio and/or frames (``--streams``) at their rates."""
    import rclpy
    import soundfile
    from sensor_msgs.msg import Image

    from omniflow.msg import AudioChunk
    from omniflow.ros import conversions
    from omniflow.ros.qos import SENSOR_DATA

    width, height, fps = parse_condition(args.condition)
    samples, rate = soundfile.read(HELLO, dtype="int16")
    assert rate == 16000, rate
    chunk = int(rate * CHUNK_S)
    samples = samples[: len(samples) // chunk * chunk].reshape(-1, chunk)
    rclpy.init()
    node = rclpy.create_node("intake_publisher", namespace=args.namespace)
    audio_pub = node.create_publisher(AudioChunk, "audio", SENSOR_DATA)
    image_pub = node.create_publisher(Image, "image_raw", SENSOR_DATA)
    publishers = {"audio": [audio_pub], "frames": [image_pub]}.get(
        args.streams, [audio_pub, image_pub]
    )
    images = [
        conversions.image(rgb, "rgb8", stamp_ns=1, frame_id="camera")
        for rgb in frames_of(width, height)
    ]
    deadline = time.monotonic() + 60
    while any(p.get_subscription_count() < 1 for p in publishers):
        if time.monotonic() > deadline:
            raise TimeoutError("the fusion node never subscribed")
        time.sleep(0.05)
    time.sleep(1.0)  # both ways matched
    sent_audio = sent_frames = 0
    late_ms_max = publish_ms_max = 0.0
    start = time.monotonic()
    total_chunks = int(args.seconds / CHUNK_S) if args.streams != "frames" else 0
    total_frames = int(args.seconds * fps) if args.streams != "audio" else 0
    due = sorted(
        [(k * CHUNK_S, 0, k) for k in range(total_chunks)]
        + [(j / fps, 1, j) for j in range(total_frames)]
    )
    for offset, kind, index in due:
        wait = start + offset - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        else:
            late_ms_max = max(late_ms_max, -wait * 1000)
        now_ns = node.get_clock().now().nanoseconds
        if kind == 0:
            audio_pub.publish(
                conversions.audio_chunk(
                    samples[index % len(samples)],
                    stamp_ns=now_ns,
                    frame_id="microphone",
                    sample_rate=rate,
                    sequence=index,
                )
            )
            sent_audio += 1
        else:
            msg = images[index % len(images)]
            msg.header = conversions.header(now_ns, "camera")
            began = time.perf_counter()
            image_pub.publish(msg)
            publish_ms_max = max(publish_ms_max, (time.perf_counter() - began) * 1000)
            sent_frames += 1
    time.sleep(1.0)  # the last messages leave before the participant goes
    node.destroy_node()
    rclpy.shutdown()
    return {
        "audio_sent": sent_audio,
        "frames_sent": sent_frames,
        "late_ms_max": round(late_ms_max, 1),
        "frame_publish_ms_max": round(publish_ms_max, 1),
    }


# ----------------------------------------------------------------------------- driver
def child_env(variant: Variant, profile: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in PROFILE_VARIABLES}
    if variant.profiles:
        env["FASTRTPS_DEFAULT_PROFILES_FILE"] = str(profile)
    return env


def memory_mb(pid: int, field: str = "VmHWM") -> float | None:
    """A memory figure of a process from /proc (VmHWM: peak resident, VmRSS: resident now)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text(encoding="utf-8")
    except OSError:
        return None
    match = re.search(rf"{field}:\s+(\d+) kB", text)
    return round(int(match[1]) / 1024, 1) if match else None


class RssSampler:
    """Samples a process's resident memory every ``period_s`` on a thread while in use; the
    samples show whether memory levels off (bounded) or keeps climbing through a stream."""

    def __init__(self, pid: int, period_s: float = 0.5) -> None:
        self.pid, self.period_s = pid, period_s
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            value = memory_mb(self.pid, "VmRSS")
            if value is not None:
                self.samples.append(value)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict[str, float | None]:
        """Resident MB: the largest sample of each third of the stream (climbing or flat)."""
        n = len(self.samples)
        return {
            f"fusion_rss_max_mb_third{k + 1}": (
                max(self.samples[k * n // 3 : (k + 1) * n // 3]) if n >= 3 else None
            )
            for k in range(3)
        }


def run_publishers(condition: str, namespace: str, variant: Variant, args) -> dict:
    """Run the publisher process(es) of ``args.layout``; what they sent, summed."""
    streams = ["both"] if args.layout == "player" else ["audio", "frames"]
    processes = [
        subprocess.Popen(
            [sys.executable, __file__, "--role", "pub", "--condition", condition]
            + ["--namespace", namespace, "--seconds", str(args.seconds), "--streams", which],
            env=child_env(variant, LARGE_FRAMES),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for which in streams
    ]
    sent: dict[str, float] = {}
    for process in processes:
        out, err = process.communicate(timeout=args.seconds + 120)
        if process.returncode != 0:
            raise RuntimeError(f"publisher failed:\n{err[-2000:]}")
        for key, value in json.loads(out.strip().splitlines()[-1]).items():
            sent[key] = (
                max(sent.get(key, 0), value) if key.endswith("_max") else sent.get(key, 0) + value
            )
    return sent


def run_trial(node, condition: str, variant: Variant, args) -> dict:
    from std_msgs.msg import String

    from omniflow.launcher import NodeProcess, NodeSpec
    from omniflow.ros.monitor import TopicRecorder
    from omniflow.ros.qos import LATCHED

    namespace = f"/intake{os.getpid()}_{random.randrange(10**6)}"
    parameters: dict[str, object] = {"vision.rate_hz": 15.0}
    if variant.queue_depth is not None:
        parameters["audio.queue_depth"] = variant.queue_depth
    status = TopicRecorder(node, String, f"{namespace}/fusion/status", LATCHED)
    fusion = NodeProcess(
        NodeSpec("omniflow.nodes.fusion", "fusion", parameters, namespace=namespace),
        env=child_env(variant, FRAME_RECEIVER),
    )
    try:
        status.wait_until(
            lambda msgs: any(json.loads(m.data)["state"] == "active" for m in msgs),
            timeout=READY_TIMEOUT_S,
            what="fusion active",
        )
        rss_before = memory_mb(fusion.process.pid, "VmRSS")
        with RssSampler(fusion.process.pid) as rss:
            sent = run_publishers(condition, namespace, variant, args)
        time.sleep(SETTLE_S)
        last = json.loads(status.messages[-1].data)
        peak = memory_mb(fusion.process.pid)
        rss_after = memory_mb(fusion.process.pid, "VmRSS")
    finally:
        fusion.close()
    received_audio = last["audio_chunks"] + last["rejected_audio"]
    received_frames = last["frames"] + last["rejected_images"]
    return {
        "variant": variant.description,
        **sent,
        "audio_received": received_audio,
        "audio_lost": last.get("audio_lost"),
        "audio_ratio": ratio(received_audio, sent["audio_sent"]),
        "frames_received": received_frames,
        "frames_lost": last.get("frames_lost"),
        "frames_skipped": last.get("frames_skipped"),
        "frames_too_large": last.get("frames_too_large"),
        "frames_ratio": ratio(received_frames, sent["frames_sent"]),
        "vision_encoded": last["vision_encoded"],
        "fusion_peak_rss_mb": peak,
        "fusion_rss_before_mb": rss_before,
        **rss.summary(),
        "fusion_rss_after_mb": rss_after,
    }


def run_trials(node, condition: str, name: str, args) -> dict[str, object]:
    """A variant's trial, and with ``--hog-cores`` the same again beside the CPU hog."""
    trials: dict[str, object] = {name: run_trial(node, condition, VARIANTS[name], args)}
    if args.hog_cores:
        hogged = f"{name}+hog{args.hog_cores}"
        print(f"== {condition} {hogged}", file=sys.stderr, flush=True)
        with cpu_hog(args.hog_cores) as used:
            trial = run_trial(node, condition, VARIANTS[name], args)
        trial["hog"] = used
        trial["audio_ratio_vs_no_hog"] = ratio(trial["audio_ratio"], trials[name]["audio_ratio"])
        trials[hogged] = trial
    return trials


def markdown_table(result: dict) -> str:
    rows = [
        "| condition | variant | audio received / sent | lost (node's count) | frames received "
        "/ sent | skipped | too large | fusion peak RSS MB | fusion RSS MB: before, each third "
        "of the stream, after |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for condition, trials in result["conditions"].items():
        for name, t in trials.items():
            if not isinstance(t, dict):
                continue
            rows.append(
                f"| {condition} | {name} | {t['audio_received']} / {t['audio_sent']} | "
                f"{t['audio_lost']} | {t['frames_received']} / {t['frames_sent']} | "
                f"{t['frames_skipped']} | {t['frames_too_large']} | {t['fusion_peak_rss_mb']} | "
                + ", ".join(
                    str(t.get(key))
                    for key in (
                        "fusion_rss_before_mb",
                        "fusion_rss_max_mb_third1",
                        "fusion_rss_max_mb_third2",
                        "fusion_rss_max_mb_third3",
                        "fusion_rss_after_mb",
                    )
                )
                + " |"
            )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", choices=("pub",), help=argparse.SUPPRESS)
    parser.add_argument("--namespace", help=argparse.SUPPRESS)
    parser.add_argument("--condition", help=argparse.SUPPRESS)
    parser.add_argument("--streams", default="both", help=argparse.SUPPRESS)
    parser.add_argument(
        "--layout",
        choices=("player", "graph"),
        default="player",
        help="player: audio and frames from one process (a bag player); graph: a microphone "
        "process and a camera process",
    )
    parser.add_argument("--seconds", type=float, default=12.0, help="streaming time per trial")
    parser.add_argument(
        "--conditions",
        nargs="+",
        default=["640x480@15", "1280x720@30"],
        type=str,
        help="frame size and rate per trial, WIDTHxHEIGHT@FPS",
    )
    parser.add_argument(
        "--variants",
        nargs="+",
        default=["before", "after"],
        choices=tuple(VARIANTS),
        help="what to compare (see the docstring)",
    )
    parser.add_argument(
        "--hog-cores",
        type=int,
        default=0,
        help="also run each variant with scripts/cpu_hog.py keeping this many cores busy",
    )
    parser.add_argument("--json", type=Path, help="also write the JSON here")
    args = parser.parse_args(argv)
    if args.role == "pub":
        print(json.dumps(run_publisher(args)), flush=True)
        return 0
    for condition in args.conditions:
        parse_condition(condition)

    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    os.environ.setdefault("ROS_DOMAIN_ID", str(random.randint(1, 101)))
    for variable in PROFILE_VARIABLES:  # this process only listens: Jazzy defaults
        os.environ.pop(variable, None)
    import rclpy

    from omniflow.ros.monitor import spinning

    rclpy.init()
    node = rclpy.create_node("intake_bench")
    result: dict[str, object] = {
        "seconds": args.seconds,
        "layout": args.layout,
        "conditions": {},
    }
    try:
        with spinning(node):
            for condition in args.conditions:
                trials: dict[str, object] = {}
                for name in args.variants:
                    print(f"== {condition} {name}", file=sys.stderr, flush=True)
                    trials.update(run_trials(node, condition, name, args))
                if "before" in trials:
                    base = trials["before"]["audio_ratio"]
                    for name in args.variants:
                        trials[name]["audio_ratio_vs_before"] = ratio(
                            trials[name]["audio_ratio"], base
                        )
                result["conditions"][condition] = trials
    finally:
        node.destroy_node()
        rclpy.shutdown()
    print(markdown_table(result), file=sys.stderr)
    write_result(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
