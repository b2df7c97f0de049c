"""The fusion node's messages <-> plain values: input checks and the pipeline's events.

The checks return ``(problem, None)`` or ``(None, value)`` so that the node counts and logs
a rejection without an exception per bad message; the builders turn
:mod:`omniflow.core.fusion_events` into ``omniflow/msg`` messages field for field.

Images: :func:`check_image` only validates (a zero-copy view of the pixels, so it is cheap
enough for a subscription callback); :func:`image_rgb` converts a checked frame to RGB, with
``cv_bridge`` when it imports (ROS installs on robots have it) and with
:mod:`omniflow.core.image_codec` otherwise, and is called off the executor, for the frames
that are used.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from builtin_interfaces.msg import Duration
from sensor_msgs.msg import Image

from omniflow.core import audio_format, image_codec
from omniflow.core.association import Decision, VisionPayload
from omniflow.core.association import TokenRef as CoreTokenRef
from omniflow.core.fusion_events import (
    FusionEvent,
    FusionStats,
    RingWarning,
    SceneEvent,
    StageError,
    TranscriptEvent,
    VoiceActivityEvent,
)
from omniflow.core.params import ParamSpec
from omniflow.core.scene import phrase
from omniflow.core.throttle import KindThrottle
from omniflow.core.timing import NS_PER_MS, NS_PER_S, SAMPLE_RATE
from omniflow.core.tokens import Modality
from omniflow.errors import AudioFormatError, ImageFormatError
from omniflow.msg import (
    Association,
    AudioChunk,
    Scene,
    TokenRef,
    Transcript,
    TranscriptWord,
    VoiceActivity,
)
from omniflow.ros.conversions import (
    audio_samples,
    header,
    image_pixels,
    ns_from_time,
    time_from_ns,
)

try:  # ROS installs have it (not installable from PyPI): the robot's own conversion
    from cv_bridge import CvBridge, CvBridgeError
except ImportError:
    CvBridge = CvBridgeError = None

__all__ = [
    "IMAGE_CONVERTER",
    "IMAGE_ENCODINGS",
    "INTAKE_PARAMS",
    "InputChecker",
    "IntakeStats",
    "SequenceGaps",
    "association_msg",
    "check_audio",
    "check_image",
    "image_rgb",
    "oversize_problem",
    "scene_msg",
    "stamp_problem",
    "transcript_msg",
    "voice_activity_msg",
]

#: Image encodings the fusion node accepts (converted to rgb8).
IMAGE_ENCODINGS = ("rgb8", "bgr8", "mono8")

#: What converts frames to RGB: cv_bridge when it imports, else omniflow's own codec.
IMAGE_CONVERTER = "cv_bridge" if CvBridge is not None else "omniflow.core.image_codec"
_BRIDGE = CvBridge() if CvBridge is not None else None

# The fusion node's intake settings (the node reads them when it subscribes).
INTAKE_PARAMS = (
    ParamSpec(
        "audio.queue_depth",
        50,
        "Microphone chunks the subscription holds while the node is busy (best effort, keep "
        "last; 50 chunks of 40 ms = 2 s; played_audio holds 8 times as many blocks, the same "
        "span in the speech node's blocks of 5 ms or more). The sensor-data depth of 5 "
        "(200 ms) lost chunks whenever a decode kept the node from taking them",
        unit="chunks",
        minimum=1,
        maximum=1000,
        read_only=True,
    ),
    ParamSpec(
        "image.max_pixels",
        3840 * 2160,
        "Larger camera frames are refused at intake, before any conversion or buffering, "
        "and counted (frames_too_large); default: 4K UHD",
        unit="pixels",
        minimum=1,
        maximum=100_000_000,
        read_only=True,
    ),
)


@dataclass
class IntakeStats:
    """What happened at the fusion node's intake, besides the counts of
    :class:`~omniflow.core.fusion_events.FusionStats` (plain values for status and
    diagnostics)."""

    audio_lost: int = 0  # microphone chunks sent but never received (see SequenceGaps)
    played_lost: int = 0  # played_audio blocks sent but never received: holes in the reference
    frames_lost: int = 0  # frames sent but never received, or replaced in the DDS queue
    frames_skipped: int = 0  # received frames replaced by a newer one before they were used
    frames_too_large: int = 0  # over image.max_pixels (also counted in rejected_images)
    image_converter: str = IMAGE_CONVERTER


class SequenceGaps:
    """Counts the messages of a topic that were published but never reached the callback,
    from the gaps in the DDS publication sequence numbers that rclpy passes with each
    message (exact with one publisher per topic; a step back, a new publisher, restarts the
    count; an rmw that gives no number counts nothing)."""

    def __init__(self) -> None:
        self._last: int | None = None

    def missing(self, info: dict) -> int:
        """How many messages are missing before the one ``info`` describes."""
        sequence = info.get("publication_sequence_number")
        if sequence is None:
            return 0
        last, self._last = self._last, sequence
        if last is None or sequence <= last:
            return 0
        return sequence - last - 1


#: A stamp this far ahead of the node's clock is no jitter: the publisher's host clock is off.
CLOCK_OFFSET_NS = 1_000_000_000


def stamp_problem(stamp_ns: int, now_ns: int, max_future_ns: int) -> str | None:
    """Why an input stamp is refused (zero, or too far ahead of ``now_ns``), or None."""
    if stamp_ns <= 0:
        return "header.stamp is zero (no capture time)"
    ahead = stamp_ns - now_ns
    if ahead > max_future_ns:
        return (
            f"header.stamp is {ahead / NS_PER_MS:.0f} ms ahead of the node clock "
            f"(at most {max_future_ns // NS_PER_MS} ms allowed)" + clock_offset_hint(ahead)
        )
    return None


def clock_offset_hint(ahead_ns: int) -> str:
    """For a stamp seconds ahead: the likely cause (the publishing host's clock is ahead of
    this one's) and the fix; '' for smaller offsets."""
    if ahead_ns < CLOCK_OFFSET_NS:
        return ""
    return (
        f"; the publisher's clock is about {ahead_ns / 1e9:.1f} s ahead of this host's: "
        "synchronise the hosts' clocks (chrony or PTP; chronyc tracking shows the offset), "
        "or use_sim_time on every node when replaying a bag"
    )


def check_audio(msg: AudioChunk, any_rate: bool = False) -> tuple[str | None, np.ndarray | None]:
    """(problem, None) or (None, 1-D int16 samples) for one chunk: at 16 kHz unless
    ``any_rate`` (then at ``msg.sample_rate``, which must be positive)."""
    if any_rate and msg.sample_rate <= 0:
        return f"sample_rate {msg.sample_rate} Hz; expected a positive rate", None
    if not any_rate and msg.sample_rate != SAMPLE_RATE:
        return f"sample_rate {msg.sample_rate} Hz; expected {SAMPLE_RATE} Hz", None
    if msg.channels != 1:
        return f"{msg.channels} channels; expected mono", None
    if len(msg.data) == 0:
        return "empty chunk (no samples)", None
    try:
        samples = audio_samples(msg)[:, 0]
    except AudioFormatError as err:
        return str(err), None
    if msg.format == audio_format.FORMAT_F32LE:
        if not np.all(np.isfinite(samples)):
            return "samples contain NaN or infinity", None
        samples = np.clip(np.round(samples * 32768.0), -32768, 32767).astype(np.int16)
    return None, np.ascontiguousarray(samples, dtype=np.int16)


def oversize_problem(msg: Image, max_pixels: int) -> str | None:
    """Why a frame is too large to take (over ``max_pixels``), or None."""
    if msg.width * msg.height <= max_pixels:
        return None
    return (
        f"{msg.width}x{msg.height} ({msg.width * msg.height:,} px) is over "
        f"image.max_pixels ({max_pixels:,} px): scale the camera down or raise "
        "image.max_pixels"
    )


def check_image(msg: Image) -> tuple[str | None, Image | None]:
    """(problem, None) or (None, msg) for one frame: its size, encoding and layout (step,
    data length), without copying or converting anything."""
    if msg.width == 0 or msg.height == 0:
        return f"zero size ({msg.width}x{msg.height})", None
    if msg.encoding not in IMAGE_ENCODINGS:
        return (f"unknown encoding {msg.encoding!r}; allowed: {', '.join(IMAGE_ENCODINGS)}", None)
    try:
        image_pixels(msg)  # a zero-copy view: validates step and data length
    except ImageFormatError as err:
        return str(err), None
    return None, msg


def image_rgb(msg: Image) -> np.ndarray:
    """The pixels of a frame that passed :func:`check_image`, as an RGB uint8 array:
    ``CvBridge().imgmsg_to_cv2(msg, desired_encoding="rgb8")`` when cv_bridge imports, else
    the codec (zero-copy for rgb8). ImageFormatError if the conversion fails."""
    if _BRIDGE is not None:
        try:
            return _BRIDGE.imgmsg_to_cv2(msg, desired_encoding="rgb8")
        except (CvBridgeError, TypeError, ValueError) as err:
            raise ImageFormatError(f"cv_bridge could not convert the frame: {err}") from err
    return image_codec.convert(np.asarray(image_pixels(msg)), msg.encoding, "rgb8")


class InputChecker:
    """Checks the fusion node's inputs: the stamp, then the message's own check; counts each
    rejection in ``stats`` (under ``lock``) and logs why, at most once per ``throttle_s``
    for each kind of problem (numbers aside), so a flood of one never hides another."""

    _COUNTERS = {"audio": "rejected_audio", "played": "rejected_played", "image": "rejected_images"}
    _WHAT = {"audio": "audio chunk", "played": "played_audio block", "image": "image"}

    def __init__(
        self,
        stats: FusionStats,
        lock: threading.Lock,
        now_ns: Callable[[], int],
        max_future_ns: int,
        warn: Callable[[str], None],
        throttle_s: float = 5.0,
    ) -> None:
        self.stats, self._lock, self._now_ns = stats, lock, now_ns
        self.max_future_ns = max_future_ns
        self._warn = warn
        self._throttle = KindThrottle(throttle_s)

    def __call__(
        self,
        kind: str,
        msg: AudioChunk | Image,
        check: Callable[[object], tuple[str | None, object]],
    ) -> tuple[int, object] | None:
        """(stamp ns, checked value) of a message that passes; None once counted."""
        stamp_ns = ns_from_time(msg.header.stamp)
        problem = stamp_problem(stamp_ns, self._now_ns(), self.max_future_ns)
        value = None
        if problem is None:
            problem, value = check(msg)
        if problem is None:
            return stamp_ns, value
        self.reject(kind, problem)
        return None

    def reject(self, kind: str, problem: str) -> None:
        """Count one rejected input of ``kind`` and log why (throttled)."""
        with self._lock:
            counter = self._COUNTERS[kind]
            setattr(self.stats, counter, getattr(self.stats, counter) + 1)
            self.stats.last_reject_reason = f"{kind}: {problem}"
        self.note(f"{self._WHAT[kind]} rejected: {problem}")

    def note(self, text: str) -> None:
        """Log a problem counted elsewhere (throttled per kind, as the rejections)."""
        with self._lock:
            due = self._throttle.due(text, time.monotonic())
        if due:
            self._warn(text)


def voice_activity_msg(event: VoiceActivityEvent) -> VoiceActivity:
    return VoiceActivity(
        header=header(event.stamp_ns, "microphone"),
        event=int(event.kind),
        utterance_id=event.utterance_id,
        start=time_from_ns(event.start_ns),
        speech_s=event.speech_s,
        echo_score=event.echo_score,
    )


def transcript_msg(event: TranscriptEvent) -> Transcript:
    words = [
        TranscriptWord(word=w, start=time_from_ns(s), end=time_from_ns(e), confidence=float(c))
        for w, s, e, c in event.words
    ]
    return Transcript(
        header=header(event.stamp_ns, "microphone"),
        utterance_id=event.utterance_id,
        start=time_from_ns(event.start_ns),
        end=time_from_ns(event.end_ns),
        text=event.text,
        confidence=event.confidence,
        is_final=event.final,
        words=words,
    )


def scene_msg(event: SceneEvent) -> Scene:
    return Scene(
        header=header(event.stamp_ns, "camera"),
        code=event.code,
        observations=list(event.observations),
        description=event.description,
        person_present=event.person_present,
    )


def _duration(ns: int) -> Duration:
    sec, nanosec = divmod(int(ns), NS_PER_S)
    return Duration(sec=sec, nanosec=nanosec)


def _token_ref(ref: CoreTokenRef) -> TokenRef:
    summary = ""
    if ref.modality == Modality.VISION and isinstance(ref.payload, VisionPayload):
        phrases = [phrase(kind, region) for kind, region in ref.payload.summary]
        named = [label for label in ref.labels if not any(label in p for p in phrases)]
        summary = "; ".join(dict.fromkeys([*named, *phrases]))
    return TokenRef(
        modality=int(ref.modality),
        stamp=time_from_ns(ref.stamp_ns),
        code=int(ref.code),
        resolution=int(ref.resolution),
        score=float(ref.score),
        chosen=ref.chosen,
        reason=ref.reason,
        summary=summary,
        time_offset_ns=int(ref.time_offset_ns),
        hamming=int(ref.hamming),
        bloom_hit=bool(ref.bloom_hit),
        labels=list(ref.labels),
        pointed=ref.pointed,
    )


def association_msg(decision: Decision) -> Association:
    return Association(
        header=header(decision.decided_ns, ""),
        decision_id=decision.decision_id,
        trigger=_token_ref(decision.trigger),
        window_before=_duration(decision.window_before_ns),
        window_after=_duration(decision.window_after_ns),
        candidates=[_token_ref(c) for c in decision.candidates],
        utterance_id=int(decision.utterance_id),
        query=decision.query,
    )


# Each event the pipeline emits: its message type, topic and builder.
_OUTPUTS = {
    TranscriptEvent: (Transcript, "transcript", transcript_msg),
    Decision: (Association, "associations", association_msg),
    VoiceActivityEvent: (VoiceActivity, "voice_activity", voice_activity_msg),
    SceneEvent: (Scene, "scene", scene_msg),
}


class EventPublisher:
    """The fusion node's outputs: one lifecycle publisher per event type, created on
    configure and destroyed on cleanup; stage errors and ring warnings become throttled log
    lines."""

    def __init__(self, node, qos, max_utterance_s: float, throttle_s: float) -> None:
        self._node = node
        self._logger = node.get_logger()
        self._max_utterance_s = max_utterance_s
        self._throttle_s = throttle_s
        self._pubs = {
            event_type: (node.create_lifecycle_publisher(msg_type, topic, qos), build)
            for event_type, (msg_type, topic, build) in _OUTPUTS.items()
        }

    def publish(self, events: list[FusionEvent]) -> None:
        """Each event as its message, or as a log line."""
        for event in events:
            if isinstance(event, StageError):
                self._logger.error(
                    f"{event.stage} stage failed: {type(event.error).__name__}: {event.error}",
                    throttle_duration_sec=self._throttle_s,
                )
            elif isinstance(event, RingWarning):
                self._logger.warning(event.message, throttle_duration_sec=self._throttle_s)
            else:
                publisher, build = self._pubs[type(event)]
                publisher.publish(build(event))
            if isinstance(event, VoiceActivityEvent) and event.cut:
                self._logger.warning(
                    f"speech lasted over {self._max_utterance_s:g} s: "
                    "transcript finalised and the VAD reset",
                    throttle_duration_sec=self._throttle_s,
                )

    def destroy(self) -> None:
        for publisher, _ in self._pubs.values():
            self._node.destroy_lifecycle_publisher(publisher)
        self._pubs = {}
