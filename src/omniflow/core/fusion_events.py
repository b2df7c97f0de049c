"""What the fusion pipeline hands out: plain event values and its counters.

:class:`~omniflow.core.fusion_pipeline.FusionPipeline` returns these from each step; the
fusion node turns them into messages (``VoiceActivity``, ``Transcript``, ``Scene``,
``Association``) and log lines, a benchmark or a test reads them as they are. Stamps are
integer nanoseconds in stream time. No ROS imports.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from omniflow.core.association import Decision

__all__ = [
    "Activity",
    "FusionEvent",
    "FusionStats",
    "RingWarning",
    "SceneEvent",
    "StageError",
    "TranscriptEvent",
    "VoiceActivityEvent",
]


class Activity(enum.IntEnum):
    """Kinds of voice activity event (the values of ``omniflow/msg/VoiceActivity.event``)."""

    START = 0
    ONGOING = 1
    END = 2
    SILENCE = 3


@dataclass(frozen=True)
class VoiceActivityEvent:
    """The user's speech started, goes on or ended at ``stamp_ns``.

    ``start_ns`` is the utterance's first sample; ``speech_s`` how much of it was heard by
    ``stamp_ns`` (by the end of the chunk that confirmed a start); ``echo_score`` the echo
    stage's last score (NaN: no reference). ``cut`` marks an END forced at
    ``vad.max_utterance_s``.
    """

    kind: Activity
    stamp_ns: int
    utterance_id: int
    start_ns: int
    speech_s: float
    echo_score: float = math.nan
    cut: bool = False


@dataclass(frozen=True)
class TranscriptEvent:
    """A partial hypothesis (``final`` false) or the final text of one utterance.

    ``stamp_ns`` is when the pipeline produced it (the caller's ``now_ns``); ``start_ns`` and
    ``end_ns`` the utterance's span as heard so far; ``words`` the final's
    ``(word, start_ns, end_ns, confidence)`` where the recogniser gives them (the confidence
    NaN when it gives none per word).
    """

    utterance_id: int
    stamp_ns: int
    start_ns: int
    end_ns: int
    text: str
    final: bool
    confidence: float = math.nan
    words: tuple[tuple[str, int, int, float], ...] = ()


@dataclass(frozen=True)
class SceneEvent:
    """One encoded frame in words: its phrases, a sentence, whether a person is in view."""

    stamp_ns: int
    code: int
    observations: tuple[str, ...]
    description: str
    person_present: bool


@dataclass(frozen=True)
class StageError:
    """A stage (``audio``, ``ingest``, ``encode``, ``associate``, ``emit``) raised ``error``;
    counted in ``engine_errors``; the other stages ran."""

    stage: str
    error: Exception


@dataclass(frozen=True)
class RingWarning:
    """A token the ring refused (it counts them; the input checks make this rare)."""

    message: str


FusionEvent = (
    VoiceActivityEvent | TranscriptEvent | SceneEvent | Decision | StageError | RingWarning
)


@dataclass
class FusionStats:
    """Counters of the fusion inputs and outputs, for status and diagnostics.

    The node counts its inputs (``audio_chunks`` to ``buffer_overflows``, ``rejected_*``);
    the pipeline the rest. One instance outlives the pipelines of successive configures.
    """

    audio_chunks: int = 0
    frames: int = 0
    rejected_audio: int = 0
    rejected_images: int = 0
    buffer_overflows: int = 0
    vision_encoded: int = 0
    vision_yielded: int = 0  # frames left unencoded while the user's turn ended
    scenes: int = 0
    speech_starts: int = 0
    speech_ends: int = 0
    forced_ends: int = 0  # utterances cut at vad.max_utterance_s
    partials: int = 0
    finals: int = 0
    finals_abandoned: int = 0  # utterances ended with an empty final: the recogniser failed
    associations: int = 0
    engine_errors: int = 0
    played_blocks: int = 0  # played_audio blocks taken as the echo reference
    rejected_played: int = 0
    echo_chunks: int = 0  # microphone chunks judged to be the robot's own voice
    echo_suppressed_starts: int = 0  # speech starts the raw microphone had, echo removed
    voice_activity: int = 0  # voice activity events handed out
    primed_utterances: int = 0  # utterances whose recogniser was primed (asr.bias.*)
    last_bias: str = ""  # the words the last primed utterance was primed with
    echo_delay_ms: float = float("nan")  # the echo delay last estimated
    audio_ingest_ms_max: float = 0.0  # longest prompt audio pass (echo, VAD, ASR)
    last_reject_reason: str = ""
