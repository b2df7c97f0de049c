"""Audio capture node: stamped microphone audio in fixed blocks (40 ms by default)."""

from __future__ import annotations

import threading

from omniflow.core.params import ParamSpec
from omniflow.core.stats import CaptureStats
from omniflow.core.timing import (
    NS_PER_S,
    SAMPLE_RATE,
    DeviceStreamStamper,
    GapDetector,
    Pacer,
    StreamClock,
)
from omniflow.devices.audio import AudioSource, open_audio_source
from omniflow.errors import ConfigError
from omniflow.msg import AudioChunk
from omniflow.ros import conversions
from omniflow.ros.device_node import DeviceNode
from omniflow.ros.qos import SENSOR_DATA
from omniflow.ros.run import run_node

PARAMS = (
    ParamSpec(
        "source",
        "device",
        "Where audio comes from: a PortAudio input device or a "
        "sound file (WAV/FLAC/OGG) paced in real time",
        choices=("device", "file"),
    ),
    ParamSpec(
        "device",
        "",
        "Input device by index or by (part of) its name; empty: the "
        "system default. An unknown device is refused with the list of devices",
    ),
    ParamSpec("file.path", "", "Sound file to stream when source is 'file'"),
    ParamSpec("file.loop", False, "Start the file again at its end"),
    ParamSpec(
        "file.rate",
        1.0,
        "Pacing of the file: 1.0 is real time, 2.0 twice as fast "
        "(stamps stay in stream time, one block period apart)",
        minimum=0.1,
        maximum=100.0,
    ),
    ParamSpec(
        "sample_rate",
        SAMPLE_RATE,
        "Sample rate of the published audio; files at another rate are resampled",
        unit="Hz",
        minimum=8000,
        maximum=48000,
    ),
    ParamSpec("channels", 1, "Channels of the published audio", minimum=1, maximum=8),
    ParamSpec(
        "chunk_ms",
        40,
        "Duration of one published block; sample_rate * chunk_ms must be a whole number of samples",
        unit="ms",
        minimum=10,
        maximum=500,
    ),
    ParamSpec(
        "queue_blocks",
        50,
        "Blocks a device may hold while the node catches up; "
        "beyond that the oldest are dropped and counted (devices only)",
        minimum=2,
        maximum=1000,
    ),
)


class AudioCaptureNode(DeviceNode):
    """Publishes microphone (or file) audio as stamped blocks.

    ROS contract:
        node name: ``audio_capture`` (lifecycle; autostarts unless ``autostart:=false``)
        publishes:
            ``audio`` (omniflow/msg/AudioChunk, sensor-data QoS): one block per
            ``chunk_ms``; ``header.stamp`` is the capture time of the block's first sample
            in stream time: one ``chunk_ms`` a block, from activation for files, and for
            devices following the device's ADC times mapped onto the node clock (see
            ``DeviceStreamStamper``: scheduling jitter never makes blocks overlap);
            ``sequence`` is the block's index in the stream, so a jump of k means k - 1
            blocks were lost.
            ``/diagnostics`` (diagnostic_msgs/DiagnosticArray, 1 Hz): counts of published
            blocks, overflows, gaps, drops and read errors.
            ``~/status`` (std_msgs/String JSON, latched, 1 Hz): the same counts, and
            ``subscribers``: the subscriptions matched to ``audio`` (0: nobody hears it).
        parameters: see ``PARAMS`` (``ros2 param describe`` shows ranges and choices) and
            the common ``autostart``, ``frame_id``, ``diagnostics_period``.
    """

    default_frame_id = "microphone"

    def __init__(self, **kwargs) -> None:
        self.stats = CaptureStats()
        super().__init__("audio_capture", PARAMS, **kwargs)
        self._publisher = None
        self._gaps = GapDetector()
        self._stamper: DeviceStreamStamper | None = None  # holds block 0 since configure
        self._pacer: Pacer | None = None
        self._stream: StreamClock | None = None
        self.block_frames  # noqa: B018 - refuse a chunk that is not whole samples at start-up

    @property
    def block_frames(self) -> int:
        samples = self.params["sample_rate"] * self.params["chunk_ms"]
        if samples % 1000:
            raise ConfigError(
                f"sample_rate {self.params['sample_rate']} Hz x chunk_ms "
                f"{self.params['chunk_ms']} is not a whole number of samples; choose a "
                "chunk_ms that divides evenly (e.g. 40 ms at 16000 Hz = 640 samples)"
            )
        return samples // 1000

    @property
    def period_ns(self) -> int:
        return self.params["chunk_ms"] * NS_PER_S // 1000

    def open_device(self) -> AudioSource:
        params = self.params
        location = params["device"] if params["source"] == "device" else params["file.path"]
        source = open_audio_source(
            params["source"],
            location,
            sample_rate=params["sample_rate"],
            channels=params["channels"],
            block_frames=self.block_frames,
            loop=params["file.loop"],
            queue_blocks=params["queue_blocks"],
            warn=self.get_logger().warning,
        )
        source.open()
        return source

    def create_outputs(self) -> None:
        self._publisher = self.create_lifecycle_publisher(AudioChunk, "audio", SENSOR_DATA)

    def destroy_outputs(self) -> None:
        self.destroy_lifecycle_publisher(self._publisher)
        self._publisher = None
        self._stamper = None

    def start_stream(self) -> None:
        self._pacer = Pacer(self.params["chunk_ms"] / 1000, rate=self.params["file.rate"])
        self._stream = StreamClock(self.now_ns())
        origin_ns = None if self._stamper is None else self._stamper.origin_ns
        self._stamper = DeviceStreamStamper(self.period_ns, origin_ns=origin_ns)

    def step(self, stop: threading.Event) -> None:
        source = self.device
        if source.paced_by_device:
            block = source.read(timeout=0.5)
            if block is None:
                return
        else:
            if not self._pacer.wait(stop):
                return
            block = source.read(0.0)
            self.stats.pacing_resyncs = self._pacer.resyncs
        if block.capture_time is None:
            capture_ns = self._stream.tick(self.period_ns)
        else:
            capture_ns = self.stamp_from_monotonic(block.capture_time)
        stamped = self._stamper.stamp(capture_ns, block.dropped_blocks)
        stamp_ns, sequence = stamped.stamp_ns, stamped.sequence
        if stamped.stepped_back:
            self.stats.restarts += 1
            self.get_logger().warning(
                "audio capture time went back more than "
                f"{self._stamper.step_ns / NS_PER_S:.0f} s (a clock step): the stream "
                "restarts there",
                throttle_duration_sec=5.0,
            )
        self._account(sequence, block.overflow, block.dropped_blocks)
        self._publisher.publish(
            conversions.audio_chunk(
                block.samples,
                stamp_ns=stamp_ns,
                frame_id=self.frame_id,
                sample_rate=source.sample_rate,
                sequence=sequence,
            )
        )
        self.stats.published += 1

    def summary(self) -> dict[str, object]:
        publisher = self._publisher
        return {
            **super().summary(),
            "subscribers": publisher.get_subscription_count() if publisher is not None else 0,
        }

    def _account(self, sequence: int, overflow: bool, dropped: int) -> None:
        report = self._gaps.observe(sequence)
        logger = self.get_logger()
        if report.missing:
            self.stats.gaps += 1
            self.stats.missing += report.missing
            logger.warning(
                f"gap in the audio stream: {report.missing} block(s) missing "
                f"before block {sequence}",
                throttle_duration_sec=5.0,
            )
        if report.backwards:  # resumed on a clock that went back (sim time restarted)
            self.stats.restarts += 1
            logger.warning(
                f"audio stream time went backwards (block {sequence}); restarting gap tracking",
                throttle_duration_sec=5.0,
            )
        if overflow:
            self.stats.overflows += 1
            logger.warning("audio input overflow reported by the device", throttle_duration_sec=5.0)
        if dropped:
            self.stats.dropped += dropped
            logger.warning(
                f"{dropped} audio block(s) dropped: the node fell behind the device",
                throttle_duration_sec=5.0,
            )


def main(args: list[str] | None = None) -> int:
    return run_node(AudioCaptureNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
