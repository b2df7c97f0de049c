"""The demo: the sensor nodes on bundled samples, and what they publish, over real DDS.

Runs the audio capture node on a bundled speech recording and the camera node on a bundled
video, each in its own process, subscribes to both from this process and prints, once a
second, what arrives: counts, rates, stamp spacing in stream time, lost blocks, transport
delay and the audio level; at the end, a summary and a text preview of the last frame.

    python -m omniflow.demo [--seconds 6] [--audio FILE.wav] [--video FILE]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

from omniflow.graph import CAPTURE_NODES, frame_publisher_env, graph_nodes, sample_overrides
from omniflow.launcher import NodeProcess
from omniflow.resources import sample, share_dir

NAMESPACE = "/omniflow_demo"
_PREVIEW_CHARS = " .:-=+*#%@"
_FIRST_MESSAGE_TIMEOUT_S = 30.0


def _stats_line(label: str, stamps_ns: list[int], arrivals_ns: list[int]) -> str:
    if len(stamps_ns) < 2:
        return f"{label}: {len(stamps_ns)} received"
    spacing_ms = np.diff(stamps_ns) / 1e6
    delay_ms = (np.array(arrivals_ns) - np.array(stamps_ns)) / 1e6
    rate = (len(stamps_ns) - 1) / ((arrivals_ns[-1] - arrivals_ns[0]) / 1e9 or 1.0)
    return (f"{label}: {len(stamps_ns):5d} received, {rate:5.1f}/s, stamp spacing "
            f"{np.median(spacing_ms):6.2f} ms (min {spacing_ms.min():.2f}, max "
            f"{spacing_ms.max():.2f}), stamp-to-arrival {np.median(delay_ms):6.2f} ms")


def preview(gray: np.ndarray, columns: int = 48) -> str:
    """A text rendering of a grayscale image, for a terminal."""
    height, width = gray.shape
    rows = max(1, int(height / width * columns * 0.5))
    ys = (np.arange(rows) * height / rows).astype(int)
    xs = (np.arange(columns) * width / columns).astype(int)
    levels = gray[np.ix_(ys, xs)].astype(int) * (len(_PREVIEW_CHARS) - 1) // 255
    return "\n".join("".join(_PREVIEW_CHARS[v] for v in row) for row in levels)


def level_dbfs(samples: np.ndarray) -> float:
    """RMS level of int16 samples in dB relative to full scale."""
    rms = np.sqrt(np.mean((samples.astype(np.float64) / 32768.0) ** 2))
    return 20 * np.log10(max(rms, 1e-6))


def run(seconds: float, audio: Path, video: Path) -> int:
    import rclpy
    from sensor_msgs.msg import Image

    from omniflow.msg import AudioChunk
    from omniflow.ros.conversions import audio_samples, image_pixels, ns_from_time
    from omniflow.ros.monitor import TopicRecorder, spinning
    from omniflow.ros.qos import SENSOR_DATA

    overrides = sample_overrides(str(audio), str(video))
    camera_env = frame_publisher_env(str(share_dir()))
    nodes = [NodeProcess(spec) for spec in graph_nodes(CAPTURE_NODES, NAMESPACE, overrides,
                                                       camera_env=camera_env)]
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("omniflow_demo_monitor", context=context)
    audio_rec = TopicRecorder(node, AudioChunk, f"{NAMESPACE}/audio", SENSOR_DATA)
    image_rec = TopicRecorder(node, Image, f"{NAMESPACE}/image_raw", SENSOR_DATA, keep=500)
    print(f"omniflow demo: audio {audio.name} -> {NAMESPACE}/audio (omniflow/msg/AudioChunk), "
          f"video {video.name} -> {NAMESPACE}/image_raw (sensor_msgs/Image)")
    try:
        with spinning(node):
            try:
                audio_rec.wait_for(1, _FIRST_MESSAGE_TIMEOUT_S)
                image_rec.wait_for(1, _FIRST_MESSAGE_TIMEOUT_S)
            except TimeoutError as err:
                print(f"error: {err}", file=sys.stderr)
                for process in nodes:
                    print(f"--- {process.spec.name} output ---\n{process.output()}",
                          file=sys.stderr)
                return 1
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                time.sleep(1.0)
                chunks, frames = audio_rec.received, image_rec.received
                last = chunks[-1].msg
                print(f"[{len(chunks) * 0.04:5.1f} s] audio seq {last.sequence:5d}  level "
                      f"{level_dbfs(audio_samples(last)):6.1f} dBFS | video "
                      f"{frames[-1].msg.width}x{frames[-1].msg.height} "
                      f"{frames[-1].msg.encoding}, {len(frames)} frames")
            chunks, frames = audio_rec.received, image_rec.received
        print("\nsummary (stamps are capture times in stream time; arrival is this process)")
        for label, items in (("audio", chunks), ("video", frames)):
            stamps = [ns_from_time(item.msg.header.stamp) for item in items]
            print("  " + _stats_line(label, stamps, [item.wall_ns for item in items]))
        sequences = [item.msg.sequence for item in chunks]
        lost = int(np.sum(np.maximum(np.diff(sequences) - 1, 0))) if len(sequences) > 1 else 0
        print(f"  audio blocks lost in transport or capture: {lost}")
        rgb = image_pixels(frames[-1].msg)
        print(f"\nlast frame ({frames[-1].msg.header.stamp.sec}."
              f"{frames[-1].msg.header.stamp.nanosec:09d}):")
        print(preview(rgb.mean(axis=2) if rgb.ndim == 3 else rgb))
        return 0
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)
        for process in nodes:
            process.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0, help="how long to watch")
    parser.add_argument("--audio", type=Path, help="a WAV/FLAC file instead of the sample")
    parser.add_argument("--video", type=Path, help="a video file instead of the sample")
    args = parser.parse_args(argv)
    # Keep the demo's DDS traffic on this machine unless the user configured otherwise.
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    audio = args.audio or sample("hello.wav")
    video = args.video or sample("scene.avi")
    for path in (audio, video):
        if not path.is_file():
            parser.error(f"{path} does not exist")
    return run(args.seconds, audio.resolve(), video.resolve())


if __name__ == "__main__":
    sys.exit(main())
