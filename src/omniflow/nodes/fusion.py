"""Fusion node: audio and camera streams -> transcripts and explained associations, per slice."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import asdict

import numpy as np
from sensor_msgs.msg import Image

from omniflow.core.audio_continuity import AudioContinuity
from omniflow.core.fusion_events import FusionStats
from omniflow.core.fusion_pipeline import (
    PIPELINE_PARAMS,
    FusionConfig,
    FusionPipeline,
    Recognizer,
)
from omniflow.core.resample import SourceRate, resample_int16
from omniflow.core.stats import OK, WARN
from omniflow.core.timing import NS_PER_MS, SAMPLE_RATE
from omniflow.engines.fusion_engines import (
    ENGINE_PARAMS,
    describe_engines,
    fusion_engines_from_params,
)
from omniflow.engines.vision import VisionEncoder
from omniflow.errors import ImageFormatError
from omniflow.msg import AudioChunk
from omniflow.ros import fusion_messages as messages
from omniflow.ros.lifecycle import AUTOSTART, Diagnosis, LifecycleBase
from omniflow.ros.qos import EVENTS, sensor_queue
from omniflow.ros.run import run_node

# The pipeline's settings, its engines' and the node's own (see docs/nodes.md).
PARAMS = (*PIPELINE_PARAMS, *ENGINE_PARAMS, *messages.INTAKE_PARAMS, AUTOSTART)

# Bounded input buffers: callbacks append, the slice thread drains (the oldest is dropped
# when full). Frames: one slot, the newest wins (only the newest frame is ever encoded).
_AUDIO_BUFFER = 100  # chunks (4 s of 40 ms chunks)
_PLAYED_BUFFER = 200  # played blocks (20 ms blocks: 4 s)
# The speech node's played blocks are 5-20 ms (its block_ms) against the microphone's 40 ms
# chunks: its subscription holds this many times audio.queue_depth, the same span at 5 ms.
_PLAYED_PER_CHUNK = 8
# Frames the image subscription's DDS queue holds: the callback only keeps the newest, so a
# deeper queue would only cost memory (a frame each) and copies of frames about to be
# replaced; frames replaced there are counted as lost (frames_lost).
_FRAME_QUEUE = 2
# Seconds between repeats of one kind of log line (rejections, stage errors).
_THROTTLE_S = 5.0


class FusionNode(LifecycleBase):
    """Turns the audio and camera streams into transcripts and association records.

    ROS contract:
        node name: ``fusion`` (lifecycle; autostarts unless ``autostart:=false``). Models (VAD,
        recogniser, vision detectors) are loaded on configure and freed on cleanup; the
        slice timer runs while active.
        subscribes:
            ``audio`` (omniflow/msg/AudioChunk, best effort, keep last ``audio.queue_depth``,
            so it matches sensor-data publishers): mono S16LE or F32LE, 16 kHz best; 8 to
            48 kHz sources (a telephone-band microphone) are resampled to 16 kHz chunk by
            chunk, each chunk keeping its stamp and duration, and ``~/status`` names the
            source's rate and band (``audio_source_rate_hz``, ``audio_band_hz``,
            ``audio_band_limited``: below 16 kHz the speech above half the rate is missing;
            ``asr_final_window_s``: the encoder window Whisper's finals then read).
            ``image_raw`` (sensor_msgs/Image, best effort, keep last 2): rgb8, bgr8 or mono8,
            at most ``image.max_pixels``; converted to RGB by cv_bridge when it imports, by
            ``omniflow.core.image_codec`` otherwise.
            ``played_audio`` (omniflow/msg/AudioChunk, as ``audio``): what the speech
            node plays, stamped when its first sample goes out, mono S16LE or F32LE at any
            rate (resampled to 16 kHz): the echo reference (see ``omniflow.core.echo``).
            Bad input (a rate outside 8-48 kHz, another format, empty, NaN, a wrong step or
            encoding, zero size, a frame over ``image.max_pixels``, a zero stamp or one more than
            ``max_future_ms`` ahead) is rejected with a throttled log line naming the problem
            and counted; nothing reaches the buffers.
        publishes:
            ``transcript`` (omniflow/msg/Transcript, reliable, keep last 50): partial
            hypotheses while the user speaks (``is_final`` false, when they change) and the
            final text at the end of speech (or when speech lasts longer than
            ``vad.max_utterance_s``, or the stream jumps back in time); every utterance gets
            one final, empty with confidence 0 when the recogniser failed on it (abandoned);
            start/end are the VAD's stream-time stamps.
            ``voice_activity`` (omniflow/msg/VoiceActivity, reliable, keep last 50): the
            user's speech with the robot's voice taken out: START as soon as the VAD
            confirms speech (stamped with its first sample), ONGOING once per slice while
            it lasts, END after the silence that ends it (or at ``vad.max_utterance_s``),
            SILENCE while there is none (how far the stream is heard; every 100 ms for
            2 s after speech, then every 500 ms);
            stream-time stamps; ``utterance_id`` matches the transcript's.
            ``associations`` (omniflow/msg/Association, reliable, keep last 50): one per
            speech start (the trigger), with every vision candidate in
            [t - before, t + after] and why each was or was not chosen; a chosen vision
            token carries what was seen in words (``summary``).
            ``scene`` (omniflow/msg/Scene, reliable, keep last 50): each encoded frame's
            observations, as phrases and one sentence, and whether a person is in view.
            ``~/status`` (std_msgs/String, latched): a JSON summary (state, engines, counts).
            ``/diagnostics`` (diagnostic_msgs/DiagnosticArray, 1 Hz): buffers, stage times,
            rejected inputs, what was received or lost on the way, and the audio stream's
            own continuity (gaps, duplicates, overlaps and restarts, by the chunks'
            ``sequence`` and stamps: :mod:`omniflow.core.audio_continuity`; duplicated or
            overlapping audio is never fed twice). Every field: docs/nodes.md, fusion.
        parameters: see ``PARAMS``; ``vision.rate_hz`` is live, the others apply at start-up
        (read-only).

    The work itself is :class:`~omniflow.core.fusion_pipeline.FusionPipeline` (no ROS); this
    node feeds it the inputs and publishes its events.

    Threads and intake (docs/nodes.md, fusion; docs/design.md, "One process per node"):
    callbacks only check inputs, without copying frames, and append to lock-guarded bounded
    buffers on a SingleThreadedExecutor; the slices run on their own thread, woken at once by
    each audio chunk (``audio.prompt``), so a slow encode never stalls the inputs and image
    work never crowds out audio (``benchmarks/intake.py``).
    """

    def __init__(
        self, *, vision_factory: Callable[[], VisionEncoder] | None = None, **kwargs
    ) -> None:
        self.stats = FusionStats()
        self._vision_factory = vision_factory
        self._lock = threading.Lock()  # the input buffers and the input counters
        self._audio_in: deque[tuple[int, np.ndarray]] = deque()
        self._frame_in: tuple[int, Image] | None = None  # the newest frame, not converted
        self._played_in: deque[tuple[int, np.ndarray]] = deque(maxlen=_PLAYED_BUFFER)
        self._core_lock = threading.Lock()  # the pipeline: the slice thread's alone
        self._pipeline: FusionPipeline | None = None
        self._next_utterance = 1  # utterance ids go on across configures
        self.intake = messages.IntakeStats()
        self._audio_gaps = messages.SequenceGaps()
        self._played_gaps = messages.SequenceGaps()
        self._continuity = AudioContinuity()  # by the chunks' own sequence and stamps
        self._source_rate = SourceRate(SAMPLE_RATE)  # the callback's alone
        self._frame_gaps = messages.SequenceGaps()
        self._events: messages.EventPublisher | None = None
        self._wake = threading.Event()  # audio arrived (or stop): the slice thread runs it
        super().__init__("fusion", PARAMS, **kwargs)
        self._check = messages.InputChecker(
            self.stats,
            self._lock,
            self.now_ns,
            self.params["max_future_ms"] * NS_PER_MS,
            self.get_logger().warning,
            _THROTTLE_S,
        )
        self._max_pixels = self.params["image.max_pixels"]
        depth = self.params["audio.queue_depth"]
        self.create_subscription(AudioChunk, "audio", self._on_audio, sensor_queue(depth))
        self.create_subscription(
            AudioChunk,
            "played_audio",
            self._on_played,
            sensor_queue(depth * _PLAYED_PER_CHUNK),
        )
        self.create_subscription(Image, "image_raw", self._on_image, sensor_queue(_FRAME_QUEUE))
        self.publish_status()

    # ----------------------------------------------------------------- inputs
    def _on_audio(self, msg: AudioChunk, info: dict) -> None:
        missing = self._audio_gaps.missing(info)
        if missing:
            with self._lock:
                self.intake.audio_lost += missing
        band = self._source_rate.band_hz
        item = self._check("audio", msg, self._audio_at_16k)
        if item is None:
            return
        if self._source_rate.band_hz != band:
            self._tell_band()
            self.get_logger().info(self._band_note())
        with self._lock:
            self.stats.audio_chunks += 1
            verdict = self._continuity.observe(msg.sequence, *item)
            if verdict.samples is not None:
                if len(self._audio_in) >= _AUDIO_BUFFER:
                    self._audio_in.popleft()
                    self.stats.buffer_overflows += 1
                self._audio_in.append((verdict.stamp_ns, verdict.samples))
        for problem in verdict.problems:
            self._check.note(problem)
        if verdict.samples is not None:
            self._wake.set()

    def _audio_at_16k(self, msg: AudioChunk) -> tuple[str | None, np.ndarray | None]:
        """The chunk's problem, or its samples at 16 kHz (resampled from the source's rate)."""
        problem = self._source_rate.problem(msg.sample_rate)
        if problem is None:
            problem, samples = messages.check_audio(msg, any_rate=True)
        if problem is not None:
            return problem, None
        return None, self._source_rate.convert(msg.sample_rate, samples)

    def _recognizer(self) -> Recognizer | None:
        pipeline = self._pipeline
        return pipeline.engines.recognizer if pipeline is not None else None

    def _tell_band(self) -> None:
        """The recogniser hears a band-limited source its own way (Whisper: a shorter final
        window, ``asr.whisper.band_limited_final_window_s``)."""
        recognizer = self._recognizer()
        if recognizer is not None:
            recognizer.set_band_limited(self._source_rate.band_limited)

    def _band_note(self) -> str:
        rate = self._source_rate
        if not rate.band_limited:
            return f"audio at {rate.source_rate} Hz: full band for the recogniser"
        window_s = getattr(self._recognizer(), "final_window_s", None)  # Whisper's alone
        return (
            f"audio at {rate.source_rate} Hz: resampled to {SAMPLE_RATE} Hz; a band-limited "
            f"source (nothing above {rate.band_hz} Hz), so expect more recognition errors"
            + ("" if window_s is None else f"; Whisper's finals read a {window_s:g} s window")
        )

    def _on_played(self, msg: AudioChunk, info: dict) -> None:
        """A block the speech node played: kept (at 16 kHz) as the echo reference."""
        missing = self._played_gaps.missing(info)
        if missing:
            with self._lock:
                self.intake.played_lost += missing
        item = self._check("played", msg, lambda m: messages.check_audio(m, any_rate=True))
        if item is None:
            return
        stamp_ns, samples = item
        if msg.sample_rate != SAMPLE_RATE:
            samples = resample_int16(samples, msg.sample_rate, SAMPLE_RATE)
        with self._lock:
            self._played_in.append((stamp_ns, samples))
        self._wake.set()

    def _on_image(self, msg: Image, info: dict) -> None:
        """Validate the frame without copying it and keep it if it is the newest; the slice
        thread converts the one it takes (:meth:`take_frame`)."""
        missing = self._frame_gaps.missing(info)
        if missing:
            with self._lock:
                self.intake.frames_lost += missing
        problem = messages.oversize_problem(msg, self._max_pixels)
        if problem is not None:
            with self._lock:
                self.intake.frames_too_large += 1
            self._check.reject("image", problem)
            return
        item = self._check("image", msg, messages.check_image)
        if item is None:
            return
        with self._lock:
            if self._frame_in is not None and self.state_text == "active":
                self.intake.frames_skipped += 1  # (while inactive no slice takes frames)
            self._frame_in = item
            self.stats.frames += 1

    # ----------------------------------------------------------------- lifecycle
    def configure(self) -> str:
        p = self.params
        engines = fusion_engines_from_params(p, self._vision_factory)
        with self._core_lock:
            self._pipeline = FusionPipeline(
                FusionConfig.from_params(p),
                engines,
                stats=self.stats,
                first_utterance_id=self._next_utterance,
                source=self,
            )
            self._tell_band()  # a source heard before this configure
        self._events = messages.EventPublisher(self, EVENTS, p["vad.max_utterance_s"], _THROTTLE_S)
        return describe_engines(engines, p)

    def activate(self) -> None:
        with self._lock:
            self._audio_in.clear()
            self._frame_in = None
            self._played_in.clear()
            self._continuity.reset()
        self.start_worker(self._run_slices, "slices", wake=self._wake.set)

    def release_resources(self) -> None:
        with self._core_lock:
            if self._pipeline is not None:
                self._next_utterance = self._pipeline.utterance_id + 1
                self._pipeline.engines.close()  # the decode thread, before the process ends
            self._pipeline = None
        if self._events is not None:
            self._events.destroy()
            self._events = None

    def apply_live(self, changes: dict[str, object]) -> str | None:
        pipeline = self._pipeline  # one float set: no need to wait for the slice to finish
        if "vision.rate_hz" in changes:
            if pipeline is not None:
                pipeline.set_vision_rate(changes["vision.rate_hz"])
            self.get_logger().info(f"encoding {changes['vision.rate_hz']:g} frames/s")
        return None

    # ----------------------------------------------------------------- slices
    def _run_slices(self) -> None:
        """The slice thread: run the audio as soon as it arrives, and the slice that is due
        on the node clock at least every quarter slice (the scheduler merges overdue slices,
        so a slow one never queues more)."""
        poll_s = self.params["scheduler.slice_ms"] / 4000
        prompt = self.params["audio.prompt"]
        while not self.stopping.is_set():
            (self._wake if prompt else self.stopping).wait(poll_s)
            self._wake.clear()
            if self.stopping.is_set():
                break
            with self._core_lock:
                if self._pipeline is not None:
                    self._events.publish(self._pipeline.step(self.now_ns(), prompt=prompt))

    # The pipeline's input source (InputSource): what the callbacks buffered.
    def take_audio(self) -> list[tuple[int, np.ndarray]]:
        with self._lock:
            audio = list(self._audio_in)
            self._audio_in.clear()
        return audio

    def take_played(self) -> list[tuple[int, np.ndarray]]:
        with self._lock:
            played = list(self._played_in)
            self._played_in.clear()
        return played

    def take_frame(self) -> tuple[int, np.ndarray] | None:
        """The newest frame received since the last call, converted to RGB here (on the
        slice thread, not in the subscription callback)."""
        with self._lock:
            frame, self._frame_in = self._frame_in, None
        if frame is None:
            return None
        stamp_ns, msg = frame
        try:
            return stamp_ns, messages.image_rgb(msg)
        except ImageFormatError as err:
            self._check.reject("image", str(err))
            return None

    # ----------------------------------------------------------------- reporting
    def summary(self) -> dict[str, object]:
        pipeline = self._pipeline
        with self._lock:
            return {
                "state": self.state_text,
                **asdict(self.stats),
                **asdict(self.intake),
                **{f"audio_{k}": v for k, v in asdict(self._continuity.counts).items()},
                "audio_source_rate_hz": self._source_rate.source_rate or 0,
                "audio_band_hz": self._source_rate.band_hz or 0,
                "audio_band_limited": self._source_rate.band_limited,
                # Whisper's: the window its finals read now, by the band (else empty).
                "asr_final_window_s": getattr(self._recognizer(), "final_window_s", ""),
                "audio_buffer": len(self._audio_in)
                + (pipeline.pending_audio if pipeline is not None else 0),
                "frame_buffer": int(self._frame_in is not None),
            }

    def diagnosis(self) -> Diagnosis:
        values = self.summary()
        with self._core_lock:
            if self._pipeline is not None:
                values.update(self._pipeline.diagnostics())
        errors = (
            values["rejected_audio"]
            or values["rejected_images"]
            or values["engine_errors"]
            or values["audio_lost"]
            or values["audio_gaps"]
            or values["audio_duplicates"]
            or values["audio_overlaps"]
        )
        level = WARN if errors or self.state_text != "active" else OK
        return Diagnosis(level, self.state_text, "fusion", values)


def main(args: list[str] | None = None) -> int:
    """Run the fusion node until shutdown (2: bad parameter)."""
    return run_node(FusionNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
