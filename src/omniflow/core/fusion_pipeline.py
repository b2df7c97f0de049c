"""The fusion pipeline: audio and camera streams -> voice activity, transcripts, scenes and
explained associations, on plain values.

:class:`FusionPipeline` owns the temporal token ring, the associator, the TDM scheduler,
the audio tokens, the preroll, the utterance ids, the forced cut at
``vad.max_utterance_s``, the collection of finals from the recogniser, the echo wait and the
vision rate gate. The engines come in through the small protocols below (the real ones are
in ``omniflow.engines`` and ``omniflow.core.echo``; tests script fakes). It has no thread,
no clock and no I/O: the caller pushes stamped inputs, calls :meth:`FusionPipeline.step`
with the current stream time and publishes the events it returns
(:mod:`omniflow.core.fusion_events`). Not thread-safe: one caller at a time.

One microphone chunk takes this path (see :meth:`FusionPipeline.process_audio`):

1. it waits, while the robot speaks, until the played audio covering it has arrived: an echo
   without its reference would pass as speech. It goes on without it ``echo_wait_ns`` after
   its end and its arrival once no played block has come for as long (the robot stopped),
   and at most ``MAX_REFERENCE_WAIT_NS`` after its arrival. The waits count from arrivals,
   not only from stamps: when the node's intake stalls (a busy core), both streams queue
   up and come in interleaved, the microphone ahead of the played audio by hundreds of ms
   of stream time while the clock has moved on; a wait by stamps alone let those chunks go
   without their echo removed (``benchmarks/soak.py``: the recorded answer's echo heard as
   "the curb I'm coming"). While the robot is silent, a chunk that came later than the
   stream's chunks usually do (by more than ``echo_wait_ns``: a stalled intake) waits until
   ``echo_wait_ns`` after the last such chunk came, since the first block of an answer that
   began meanwhile may be queued behind them;
2. a stream restart (stamps more than 1 s back: a bag looping, a sensor restarting) ends
   the speech, and the recogniser's utterance with it (its final still comes), and resets
   the VAD, the preroll and the echo stage;
3. the echo stage takes the robot's voice out; a VAD on the raw microphone counts the speech
   starts only the echo made; the noise suppressor (``audio.denoise``, when one is chosen)
   cleans what is left, for the VAD and the recogniser;
4. the chunk joins the preroll (the VAD confirms a start up to ~0.2 s after it happened)
   and becomes an audio token in the ring;
5. the VAD's events: a start opens an utterance (new id), primes the recogniser with the
   labels of the frames in view around it (``config.bias``, :mod:`omniflow.core.scene_bias`;
   again when the frame nearest the onset is encoded), feeds it the preroll from
   ``config.lead_in_ns`` before the start on (not from before the previous utterance's end)
   and requests an association; an end ends the recogniser's utterance
   without waiting for its final;
6. speech longer than ``max_utterance_ns`` is cut: END, the utterance ended, the VAD reset;
7. finals the recogniser has ready are collected, oldest first, and handed out at once, each
   after the decision by its words (below), not with the next slice; an utterance whose final
   the recogniser fails on gets an empty final with confidence 0 (abandoned) instead.

The slices (:class:`~omniflow.core.scheduler.TdmScheduler`) run ingest (audio left over),
encode (the newest frame, when the vision rate allows), associate (triggers whose window
closed, one slice of slack for late frames) and emit (transcripts, scenes, decisions, and an
ONGOING while speech lasts; while it does not, a SILENCE saying how far the stream is heard,
every 100 ms for 2 s after speech and every 500 ms after that).

Association, in two steps per utterance (the words come after the onset):

- at the speech START the onset is a trigger without words; the frame nearest the onset is
  encoded even when the vision rate is low (the newest ``onset_ring_ns`` of raw frames are
  kept for it; from a camera behind the microphone, once a frame of the onset or later has
  come, waiting at most ``MAX_FRAME_LAG_NS``), and when the window has closed the frame
  nearest the onset is chosen;
- when the final transcript is in, the same onset is asked again with the transcript's
  :class:`~omniflow.core.lexicon.Query` (``engines.words`` makes it): a named object is
  looked for ``look_back_ns`` back, "this" resolves to what the hand points at, and the
  frames are scored by their Bloom filter and code (:class:`~omniflow.core.semantic.Gate`).
  That decision is handed out just before the final transcript, so the dialogue has it when
  the turn starts.

A vision token's payload is a :class:`~omniflow.core.association.VisionPayload` (labels, code,
Bloom filter, the frame); each newly encoded frame is a freshness round for the older ones
(quarter-size frame after ``unused_limit`` rounds), and tokens an utterance may still pick
(``look_back_ns`` before the oldest open one, or before now) are not retired. No ROS imports.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Protocol

import numpy as np

from omniflow.core.association import (
    Ask,
    Associator,
    Decision,
    Freshness,
    VisionPayload,
    quarter_frame,
)
from omniflow.core.fusion_events import (
    Activity,
    FusionEvent,
    FusionStats,
    RingWarning,
    SceneEvent,
    StageError,
    TranscriptEvent,
    VoiceActivityEvent,
)
from omniflow.core.lexicon import Sight, WordSpace
from omniflow.core.params import ParamSpec
from omniflow.core.scene import describe, person_present
from omniflow.core.scene_bias import BIAS_PARAMS, SceneBias, bias_prompt
from omniflow.core.scheduler import Slice, TdmScheduler
from omniflow.core.semantic import CODE_BITS, BloomFilter, Gate, LshEncoder
from omniflow.core.timing import NS_PER_MS, NS_PER_S, NS_PER_SAMPLE
from omniflow.core.tokens import Modality, Token, TokenRing
from omniflow.errors import EngineError

__all__ = [
    "AUDIO_BANDS",
    "EchoStage",
    "FusionConfig",
    "FusionEngines",
    "FusionPipeline",
    "InputSource",
    "audio_features",
]

# Spectral bands of the audio token's feature vector (what its LSH code hashes).
AUDIO_BANDS = 16
# Audio kept for the recogniser: the VAD reports a start up to ~0.2 s after it happened
# (``config.lead_in_ns`` more is kept for the recogniser's lead-in).
PREROLL_NS = 600 * NS_PER_MS
# The robot counts as speaking (microphone chunks wait for its reference) this long after
# the end of the last block it played.
SPEAKING_NS = 300 * NS_PER_MS
# A chunk stamped this far before the end of the previous one starts a new stream (a loop).
RESTART_NS = NS_PER_S
# How often SILENCE says how far the stream is heard: every 100 ms for 2 s after speech
# ends, where the dialogue judges whether the user's turn is over (its waits are up to
# a second), and every 500 ms in a longer quiet (a listener's sign that the stream goes on).
# Not once per slice: each message wakes every subscriber (~4 % of a core at 25/s each).
SILENCE_EVERY_NS = 100 * NS_PER_MS
SILENCE_IDLE_EVERY_NS = 500 * NS_PER_MS
SILENCE_PAUSE_NS = 2 * NS_PER_S
# The longest a microphone chunk waits for its reference after it reached the pipeline, however
# the played audio keeps coming (a speech node whose stamps run behind the microphone's).
MAX_REFERENCE_WAIT_NS = 500 * NS_PER_MS
# Microphone chunks over which the usual delay from a chunk's end to its arrival is taken
# (the least of them): 2 s of 40 ms, so a stall stands out and a slower link is learnt.
LATENESS_CHUNKS = 50
# Chunks held by the pipeline (waiting for their reference or their slice): 4 s of 40 ms.
MAX_PENDING_AUDIO = 100
# The longest frames wait after the user's speech ended (for its final transcript, and
# vision.turn_yield_ms after it).
MAX_TURN_YIELD_NS = 2 * NS_PER_S
# A decision waits for the frames of its window while the camera is at most this far behind
# the microphone (a busy machine delivers frames late); further behind, or no camera: it is
# decided when the window has closed on the audio's clock.
MAX_FRAME_LAG_NS = 500 * NS_PER_MS
# A token may arrive this far behind the newest of its stream (the vision stage's jitter), and
# at least as far as the onset ring reaches back (the onset frame is encoded once the VAD has
# confirmed the start, up to ~0.3 s later, and after a backlog of audio handed over at once).
REORDER_NS = 500 * NS_PER_MS
# Utterances remembered between their START and their final (a lost final is forgotten).
MAX_OPEN_UTTERANCES = 8
# Bits of a vision token's Bloom filter of label words (a few dozen words: ~0.1 % false hits).
BLOOM_BITS = 512


# ----------------------------------------------------------------------------- engines
class SpeechBoundary(Protocol):
    """A VAD event: ``kind`` is ``"start"`` or ``"end"``."""

    @property
    def kind(self) -> str: ...

    @property
    def stamp_ns(self) -> int: ...


class VoiceActivityDetector(Protocol):
    """``omniflow.engines.vad.VoiceActivityDetector``, as far as the pipeline uses it."""

    @property
    def is_speech(self) -> bool: ...

    def reset(self) -> None: ...

    def process(self, samples: np.ndarray, stamp_ns: int) -> Iterable[SpeechBoundary]: ...


class FinalHypothesis(Protocol):
    """``omniflow.engines.asr.RecognitionResult``: the final text of one utterance."""

    @property
    def text(self) -> str: ...

    @property
    def confidence(self) -> float: ...

    @property
    def words(self) -> Sequence[tuple[str, int, int]]: ...


class Recognizer(Protocol):
    """``omniflow.engines.asr.Recognizer``: ``start`` -> ``feed``... -> ``end``, then
    ``poll_final`` hands each ended utterance's final over once, in order."""

    @property
    def active(self) -> bool: ...

    def start(self, stamp_ns: int) -> None: ...

    def set_prompt(self, prompt: str | None) -> None: ...

    def set_band_limited(self, limited: bool) -> None: ...

    def feed(self, samples: np.ndarray) -> str | None: ...

    @property
    def pausing(self) -> bool: ...

    def end(self) -> None: ...

    def poll_final(self) -> FinalHypothesis | None: ...


class Observation(Protocol):
    @property
    def kind(self) -> str: ...

    @property
    def region(self) -> str | None: ...

    @property
    def value(self) -> object: ...


class EncodedFrame(Protocol):
    """``omniflow.engines.vision.VisionResult``. Also read when present (``getattr``, so
    encoders without them still fit): ``labels`` (tuple of COCO labels seen, most confident
    first; default none) and ``pointed`` (the label a hand points at; default None)."""

    @property
    def code(self) -> int: ...

    @property
    def observations(self) -> Sequence[Observation]: ...

    @property
    def summary(self) -> Sequence[tuple[str, str | None]]:
        """The frame as (kind, detail) pairs (``omniflow.core.scene.scene_pairs``)."""
        ...


class VisionEncoder(Protocol):
    """``omniflow.engines.vision.VisionEncoder``: one RGB frame -> code and observations."""

    def encode(self, rgb: np.ndarray, stamp_ns: int) -> EncodedFrame: ...


class EchoOutcome(Protocol):
    """``omniflow.core.echo.EchoResult``."""

    @property
    def samples(self) -> np.ndarray: ...

    @property
    def echo_score(self) -> float: ...

    @property
    def echo(self) -> bool: ...

    @property
    def delay_ms(self) -> float: ...

    @property
    def heard(self) -> np.ndarray | None: ...


class EchoGate(Protocol):
    """``omniflow.core.echo.EchoGate``: takes the robot's voice out of a microphone chunk."""

    def process(self, samples: np.ndarray, stamp_ns: int) -> EchoOutcome: ...

    def reset(self) -> None: ...


class EchoReference(Protocol):
    """``omniflow.core.echo.EchoReference``: the played audio, by stamp."""

    def __len__(self) -> int: ...

    @property
    def newest_end_ns(self) -> int: ...

    def add(self, stamp_ns: int, samples: np.ndarray) -> None: ...


class Denoiser(Protocol):
    """``omniflow.engines.denoise``: a chunk in, as many samples out, the room's noise
    attenuated (with a bounded delay)."""

    def process(self, samples: np.ndarray) -> np.ndarray: ...

    def reset(self) -> None: ...


class InputSource(Protocol):
    """Where the caller buffers its inputs between steps (each call takes what is there):
    the pipeline pulls them at the moments the stages need them, so a chunk that arrives
    during a pass still joins it."""

    def take_audio(self) -> list[tuple[int, np.ndarray]]: ...

    def take_played(self) -> list[tuple[int, np.ndarray]]: ...

    def take_frame(self) -> tuple[int, np.ndarray] | None: ...


@dataclass
class EchoStage:
    """The echo gate, its reference (fed by :meth:`FusionPipeline.push_played`) and a VAD on
    the raw microphone (it counts the speech starts the echo alone would have made)."""

    gate: EchoGate
    reference: EchoReference
    raw_vad: VoiceActivityDetector


@dataclass
class FusionEngines:
    """What the pipeline runs; ``recognizer`` None: VAD only; ``vision`` None: no frames
    encoded; ``echo`` None: no echo stage; ``words`` None: associations by time only (no
    refinement by the transcript's words); ``denoise`` None: no noise suppression."""

    vad: VoiceActivityDetector
    recognizer: Recognizer | None = None
    vision: VisionEncoder | None = None
    echo: EchoStage | None = None
    words: WordSpace | None = None
    denoise: Denoiser | None = None

    def close(self) -> None:
        """Stop the engines that run threads of their own (Whisper decodes on one), and wait
        for them: a thread still inside a native engine when the process exits aborts it."""
        for engine in (self.recognizer, self.vision, self.vad):
            close = getattr(engine, "close", None)
            if close is not None:
                close()


# The fusion node's parameters that set the pipeline (FusionConfig.from_params reads them).
PIPELINE_PARAMS = (
    ParamSpec(
        "ring.capacity",
        256,
        "Slots of the temporal token ring (all streams: 25 audio tokens/s, and frames at "
        "vision.rate_hz; 256 hold ~8 s, the look-back and a slow final)",
        minimum=16,
        maximum=4096,
        read_only=True,
    ),
    ParamSpec(
        "window.before_ms",
        80,
        "Association window before the trigger",
        unit="ms",
        minimum=0,
        maximum=2000,
        read_only=True,
    ),
    ParamSpec(
        "window.after_ms",
        120,
        "Association window after the trigger (the decision waits this long for late tokens)",
        unit="ms",
        minimum=0,
        maximum=2000,
        read_only=True,
    ),
    ParamSpec(
        "association.look_back_ms",
        3000,
        "How far before the speech onset a named object is looked for "
        '("what colour is the cat?" after the cat left the view); unnamed ones use '
        "window.before_ms",
        unit="ms",
        minimum=0,
        maximum=10000,
        read_only=True,
    ),
    ParamSpec(
        "association.max_hamming",
        10,
        "A frame's code counts as near the named object's when at most this many of its 32 "
        "bits differ (10: about cosine 0.7, cup/mug; unrelated words differ by ~16)",
        minimum=0,
        maximum=32,
        read_only=True,
    ),
    ParamSpec(
        "association.unused_limit",
        3,
        "Freshness: a vision token left out of this many rounds (newer frames, decisions) "
        "keeps a quarter-size frame; at twice this it leaves the ring unless an open "
        "utterance may still pick it",
        minimum=1,
        maximum=100,
        read_only=True,
    ),
    ParamSpec(
        "vision.onset_ring_ms",
        1000,
        "Raw frames kept so the frame nearest a speech onset is encoded even when "
        "vision.rate_hz is low (0: off)",
        unit="ms",
        minimum=0,
        maximum=5000,
        read_only=True,
    ),
    ParamSpec(
        "scheduler.slice_ms",
        40,
        "TDM slice: ingest, encode, associate and emit run once per slice",
        unit="ms",
        minimum=20,
        maximum=500,
        read_only=True,
    ),
    ParamSpec(
        "asr.lead_in_ms",
        300,
        "Audio before the speech onset the recogniser hears first (never from before the "
        "previous utterance's end): Whisper misheard words that began its input, as in the "
        "bundled session's second question, and is measured with this lead-in "
        "(benchmarks/asr.py, benchmarks/hearing.py)",
        unit="ms",
        minimum=0,
        maximum=1000,
        read_only=True,
    ),
    ParamSpec(
        "vad.max_utterance_s",
        15.0,
        "Speech longer than this is cut: the transcript is "
        "finalised and the VAD reset (a last resort: the VAD's noise-floor gate, "
        "vad.noise.margin_db, ends steady noise; this bounds the recogniser's memory)",
        unit="s",
        minimum=2.0,
        maximum=120.0,
        read_only=True,
    ),
    ParamSpec(
        "vision.rate_hz",
        5.0,
        "Frames encoded per second (the newest frame each time); "
        "the power manager changes it at run time",
        unit="frames/s",
        minimum=0.5,
        maximum=30.0,
        live=True,
    ),
    ParamSpec(
        "vision.turn_yield_ms",
        600,
        "While the recogniser decodes at a pause in the user's speech (the decode that may "
        "become the final), and after the end of the speech until the final transcript is "
        "out and then this long, at most 2 s after the speech, no frame is encoded (a speech "
        "onset's frame still is): the final transcript, the end-of-turn wait, the model's "
        "first words and the first phrase have the cores; 0: never",
        unit="ms",
        minimum=0,
        maximum=5000,
        read_only=True,
    ),
    ParamSpec(
        "audio.prompt",
        True,
        "Run the echo stage, VAD and recogniser as soon as a "
        "chunk arrives (false: once per slice, up to a slice later; the baseline of "
        "benchmarks/barge_in.py)",
        read_only=True,
    ),
    ParamSpec(
        "echo.wait_ms",
        60,
        "While the robot speaks, a microphone chunk waits for the played audio that covers "
        "it, which can arrive late under load (an echo without its reference would pass as "
        "speech); it goes on without it once this long has passed after its end and after "
        "the last played block came (at most 500 ms after the chunk came). While it is "
        "silent, chunks that came this much later than usual, in a burst (a stalled intake), "
        "wait this long after the burst for an answer's first block queued behind them",
        unit="ms",
        minimum=0,
        maximum=500,
        read_only=True,
    ),
    ParamSpec(
        "max_future_ms",
        1000,
        "Inputs stamped further ahead of the node clock are rejected",
        unit="ms",
        minimum=0,
        maximum=60000,
        read_only=True,
    ),
    *BIAS_PARAMS,
)


@dataclass
class FusionConfig:
    """The pipeline's settings (the fusion node's parameters of the same meaning)."""

    ring_capacity: int
    window_before_ns: int
    window_after_ns: int
    slice_ns: int
    max_utterance_ns: int
    vision_rate_hz: float
    echo_wait_ns: int
    max_future_ns: int
    look_back_ns: int = 3 * NS_PER_S
    max_hamming: int = 10
    unused_limit: int = 3
    onset_ring_ns: int = NS_PER_S
    turn_yield_ns: int = 0
    lead_in_ns: int = 0
    bias: SceneBias | None = None  # None: the recogniser is never primed

    @classmethod
    def from_params(cls, params: Mapping[str, object]) -> FusionConfig:
        """From the fusion node's parameter values (dotted names, ms and s units)."""
        return cls(
            ring_capacity=int(params["ring.capacity"]),
            window_before_ns=int(params["window.before_ms"]) * NS_PER_MS,
            window_after_ns=int(params["window.after_ms"]) * NS_PER_MS,
            slice_ns=int(params["scheduler.slice_ms"]) * NS_PER_MS,
            max_utterance_ns=round(float(params["vad.max_utterance_s"]) * NS_PER_S),
            vision_rate_hz=float(params["vision.rate_hz"]),
            echo_wait_ns=int(params["echo.wait_ms"]) * NS_PER_MS,
            max_future_ns=int(params["max_future_ms"]) * NS_PER_MS,
            look_back_ns=int(params["association.look_back_ms"]) * NS_PER_MS,
            max_hamming=int(params["association.max_hamming"]),
            unused_limit=int(params["association.unused_limit"]),
            onset_ring_ns=int(params["vision.onset_ring_ms"]) * NS_PER_MS,
            turn_yield_ns=int(params["vision.turn_yield_ms"]) * NS_PER_MS,
            lead_in_ns=int(params["asr.lead_in_ms"]) * NS_PER_MS,
            bias=SceneBias.from_params(params),
        )


def audio_features(samples: np.ndarray) -> np.ndarray:
    """Log band energies of a chunk (``AUDIO_BANDS`` values), centred: the audio token's
    embedding, cheap enough for every chunk."""
    spectrum = np.abs(np.fft.rfft(samples.astype(np.float32) / 32768.0)) ** 2
    bands = np.array_split(spectrum, AUDIO_BANDS)
    energy = np.log10(np.array([b.sum() for b in bands], dtype=np.float64) + 1e-10)
    return energy - energy.mean()


def _end_ns(stamp_ns: int, samples: np.ndarray) -> int:
    return stamp_ns + len(samples) * NS_PER_SAMPLE


# ----------------------------------------------------------------------------- pipeline
class FusionPipeline:
    """The fusion stages on plain values (see the module docstring for the path of a chunk).

    Inputs come through the ``push_*`` methods (or :meth:`step`'s arguments), or from a
    ``source`` the pipeline pulls: played blocks and audio at each audio pass (audio again
    after each chunk), the newest frame at each slice's ingest stage.
    ``stats`` may be shared with the caller (it counts the inputs it rejects there);
    ``first_utterance_id`` lets ids go on increasing across pipelines; ``clock`` (monotonic
    ns) times the prompt audio pass and the slices.
    """

    def __init__(
        self,
        config: FusionConfig,
        engines: FusionEngines,
        *,
        stats: FusionStats | None = None,
        first_utterance_id: int = 1,
        source: InputSource | None = None,
        clock: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        self.config = config
        self.source = source
        self.engines = engines
        self.stats = stats if stats is not None else FusionStats()
        self._clock = clock
        # The frame nearest an onset comes from the onset ring, up to onset_ring_ns behind
        # the newest frame: its token may be that late. The stream going back by more than
        # RESTART_NS resets the ring here (_restart) before the ring would see it.
        tolerance_ns = max(REORDER_NS, config.onset_ring_ns)
        self.ring = TokenRing(
            config.ring_capacity,
            reorder_tolerance_ns=tolerance_ns,
            reset_jump_ns=tolerance_ns + RESTART_NS,
            max_future_ns=config.max_future_ns,
        )
        # Speech and sight meet in the word space: a START asks by time only, the final
        # transcript by its words (the audio token's code hashes band energies, a space of
        # its own, so it is never compared with vision codes).
        self.associator = Associator(
            self.ring,
            config.window_before_ns,
            config.window_after_ns,
            gate=Gate(max_hamming=min(config.max_hamming, CODE_BITS)),
            modalities=(Modality.VISION,),
            freshness=Freshness(config.unused_limit, quarter_frame),
        )
        self.scheduler = TdmScheduler(
            config.slice_ns,
            ingest=self._ingest,
            encode=self._encode,
            associate=self._associate,
            emit=self._emit,
            clock=clock,
            on_error=self._stage_error,
        )
        self._audio_lsh = LshEncoder(AUDIO_BANDS, seed=1)
        # (stamp, samples, the stream time it reached the pipeline)
        self._pending_audio: deque[tuple[int, np.ndarray, int]] = deque()
        # how long after its end each recent chunk arrived (ns), and when the last one that
        # came later than usual arrived
        self._lateness: deque[int] = deque(maxlen=LATENESS_CHUNKS)
        self._late_arrival_ns: int | None = None
        self._last_arrival_ns = 0
        self._last_late = False
        self._played: list[tuple[int, np.ndarray]] = []
        self._played_seen_ns: int | None = None  # when played blocks last came in
        self._frame: tuple[int, np.ndarray] | None = None
        self._raw_frames: deque[tuple[int, np.ndarray]] = deque()  # the onset ring
        self._last_frame_ns: int | None = None  # the stamp of the last frame received
        self._onsets_due: list[int] = []  # speech onsets whose nearest frame is to encode
        self._encoded: deque[int] = deque(maxlen=64)  # stamps of the frames encoded
        self._open: dict[int, int] = {}  # utterance id -> onset, until its words decided
        self._finals_held: list[TranscriptEvent] = []  # finals waiting for their decision
        self._preroll: deque[tuple[int, np.ndarray]] = deque()
        self._utterance = first_utterance_id - 1
        self._speech_start_ns = 0
        self._bias_prompt: str | None = None  # what the current utterance was primed with
        # utterances ended whose final the recogniser has not handed over: (id, start, end)
        self._finals_due: deque[tuple[int, int, int]] = deque()
        self._last_audio_end_ns = 0
        self._silence_heard_ns = 0  # the stream time the last SILENCE reported
        self._last_vision_ns = 0
        self._speech_end_ns: int | None = None  # the end of the user's last speech
        self._final_out_ns: int | None = None  # when the last final was handed over
        self._held_ns = -1  # the last frame held back while the turn ended
        # The raw VAD's current speech run: [the robot was playing, the user VAD heard speech]
        self._raw_run: list[bool] | None = None
        self._echo_score = math.nan
        self._now_ns = 0
        self._activity: list[VoiceActivityEvent] = []  # handed out after each audio pass
        self._slice_out: list[FusionEvent] = []  # handed out at the emit stage
        self._events: list[FusionEvent] = []

    # ----------------------------------------------------------------- state
    @property
    def utterance_id(self) -> int:
        """The id of the current (or last) utterance; 0 before the first."""
        return self._utterance

    @property
    def speaking(self) -> bool:
        """Whether the VAD is inside an utterance."""
        return self.engines.vad.is_speech

    @property
    def finals_due(self) -> int:
        """Utterances ended whose final the recogniser has not handed over yet."""
        return len(self._finals_due)

    @property
    def pending_audio(self) -> int:
        """Chunks waiting (for their reference, or for the slice with ``prompt`` off)."""
        return len(self._pending_audio)

    def diagnostics(self) -> dict[str, object]:
        """The ring's, associator's and scheduler's counters, flattened by dotted name."""
        values: dict[str, object] = {f"ring.{k}": v for k, v in self.ring.stats.as_dict().items()}
        values.update({f"ring.occupancy.{k}": v for k, v in self.ring.occupancy().items()})
        values["ring.capacity"] = self.ring.capacity
        values.update({f"association.{k}": v for k, v in asdict(self.associator.stats).items()})
        values.update({f"scheduler.{k}": v for k, v in self.scheduler.stats.as_dict().items()})
        vision_report = getattr(self.engines.vision, "diagnostics", None)
        if vision_report is not None:  # where the vision models run, and why
            values.update({f"vision.{k}": v for k, v in vision_report().items()})
        return values

    def set_vision_rate(self, rate_hz: float) -> None:
        """Frames encoded per second from the next frame on (a live setting)."""
        self.config.vision_rate_hz = float(rate_hz)

    # ----------------------------------------------------------------- inputs
    def push_audio(self, stamp_ns: int, samples: np.ndarray) -> None:
        """A 16 kHz int16 mono microphone chunk whose first sample is at ``stamp_ns``; the
        oldest waiting chunk is dropped (and counted) beyond ``MAX_PENDING_AUDIO``."""
        if len(self._pending_audio) >= MAX_PENDING_AUDIO:
            self._pending_audio.popleft()
            self.stats.buffer_overflows += 1
        self._pending_audio.append((stamp_ns, samples, self._now_ns))
        lateness = self._now_ns - _end_ns(stamp_ns, samples)
        late = lateness > self._usual_lateness() + self.config.echo_wait_ns
        # A backlog comes in a burst, faster than the stream's pace; a link that got slower
        # brings late chunks at the usual pace, with nothing queued behind them.
        burst = self._now_ns - self._last_arrival_ns < len(samples) * NS_PER_SAMPLE // 2
        if late and (burst or not self._last_late):
            self._late_arrival_ns = self._now_ns
        self._last_arrival_ns, self._last_late = self._now_ns, late
        self._lateness.append(lateness)

    def push_played(self, stamp_ns: int, samples: np.ndarray) -> None:
        """A 16 kHz int16 block the robot played (first sample out at ``stamp_ns``)."""
        self._played.append((stamp_ns, samples))

    def push_frame(self, stamp_ns: int, rgb: np.ndarray) -> None:
        """An RGB frame; only the newest one offered before an encode is encoded (and the
        one nearest a speech onset, from the onset ring)."""
        ring = self._raw_frames
        last = self._last_frame_ns
        if last is not None and stamp_ns < last:  # a loop: the old frames are another timeline
            ring.clear()
            self._encoded.clear()  # the same stamps again are new frames, to be encoded
        self._frame = (stamp_ns, rgb)
        self._last_frame_ns = stamp_ns
        if self.config.onset_ring_ns <= 0:
            return
        ring.append((stamp_ns, rgb))
        while ring[0][0] < stamp_ns - self.config.onset_ring_ns:
            ring.popleft()

    # ----------------------------------------------------------------- driving
    def step(
        self,
        now_ns: int,
        *,
        prompt: bool = True,
        audio: Iterable[tuple[int, np.ndarray]] = (),
        played: Iterable[tuple[int, np.ndarray]] = (),
        frame: tuple[int, np.ndarray] | None = None,
    ) -> list[FusionEvent]:
        """Take the new inputs (as the ``push_*`` methods), run the audio at once
        (``prompt``) and the slice due at ``now_ns``; return the events made meanwhile, in
        order. Errors of a stage are counted and returned as :class:`StageError` events; the
        other stages still run."""
        self._now_ns = now_ns
        for stamp_ns, samples in played:
            self.push_played(stamp_ns, samples)
        for stamp_ns, samples in audio:
            self.push_audio(stamp_ns, samples)
        if frame is not None:
            self.push_frame(*frame)
        if prompt:
            began = self._clock()
            try:
                self.process_audio(now_ns)
            except Exception as err:  # counted and reported like a stage error
                self._stage_error("audio", err)
            spent_ms = (self._clock() - began) / 1e6
            self.stats.audio_ingest_ms_max = max(self.stats.audio_ingest_ms_max, spent_ms)
        self._now_ns = now_ns
        self.scheduler.run_due(now_ns)
        return self.take_events()

    def take_events(self) -> list[FusionEvent]:
        """The events made since the last call."""
        events, self._events = self._events, []
        return events

    def process_audio(self, now_ns: int) -> None:
        """Echo stage, VAD and recogniser on every chunk that may go (the played blocks
        first, so the reference covers the chunks), then the finals that are ready."""
        self._now_ns = now_ns
        echo = self.engines.echo
        if self.source is not None:
            self._played.extend(self.source.take_played())
        played, self._played = self._played, []
        if played:
            self._played_seen_ns = now_ns
        if echo is not None:
            for stamp_ns, samples in played:
                echo.reference.add(stamp_ns, samples)
            self.stats.played_blocks += len(played)
        try:
            while True:
                if self.source is not None:
                    for stamp_ns, samples in self.source.take_audio():
                        self.push_audio(stamp_ns, samples)
                if not self._pending_audio or self.awaits_reference(
                    *self._pending_audio[0], now_ns
                ):
                    break
                stamp_ns, samples, _ = self._pending_audio.popleft()
                self._ingest_chunk(stamp_ns, samples)
            if self.engines.recognizer is not None and self._collect_finals():
                self._hand_out_finals()
        finally:
            self._hand_out_activity()

    def awaits_reference(
        self, stamp_ns: int, samples: np.ndarray, arrived_ns: int, now_ns: int
    ) -> bool:
        """True while the played audio covering this chunk has not arrived, the chunk may
        still wait (less than ``MAX_REFERENCE_WAIT_NS`` after its arrival, ``arrived_ns``),
        and either the robot speaks (played audio up to ``SPEAKING_NS`` before this chunk,
        or played blocks coming in that recently) and it is less than ``echo_wait_ns`` after
        the chunk's end and arrival, or after the last played block came; or the robot is
        silent, the chunk came more than ``echo_wait_ns`` later than the stream's chunks
        usually do (a stalled intake: an answer's first block may be queued behind it) and
        it is less than ``echo_wait_ns`` after the last late chunk of a burst came (the
        intake is still catching up)."""
        echo = self.engines.echo
        if echo is None:
            return False
        end_ns = _end_ns(stamp_ns, samples)
        newest = echo.reference.newest_end_ns if len(echo.reference) else None
        if newest is not None and newest >= end_ns:
            return False
        if not 0 <= now_ns - arrived_ns < MAX_REFERENCE_WAIT_NS:
            return False
        wait = self.config.echo_wait_ns
        since_played = math.inf if self._played_seen_ns is None else now_ns - self._played_seen_ns
        if (newest is not None and newest >= stamp_ns - SPEAKING_NS) or since_played < SPEAKING_NS:
            return now_ns - max(end_ns, arrived_ns) < wait or 0 <= since_played < wait
        if self._late_arrival_ns is None:  # no chunk came late yet
            return False
        late = arrived_ns - end_ns > self._usual_lateness() + wait
        return late and now_ns - self._late_arrival_ns < wait

    def _usual_lateness(self) -> int:
        """How long after their end the recent chunks arrived, at least (ns)."""
        return min(self._lateness, default=0)

    # ----------------------------------------------------------------- one chunk
    def _ingest_chunk(self, stamp_ns: int, samples: np.ndarray) -> None:
        vad, asr = self.engines.vad, self.engines.recognizer
        end_ns = _end_ns(stamp_ns, samples)
        if stamp_ns < self._last_audio_end_ns - RESTART_NS:
            self._restart(self._last_audio_end_ns - stamp_ns)
        self._last_audio_end_ns = end_ns
        samples, heard = self._remove_echo(samples, stamp_ns)
        if self.engines.denoise is not None:  # one stream through it: both hear its output
            samples = heard = self.engines.denoise.process(samples)
        self._preroll.append((stamp_ns, heard))
        while self._preroll and self._preroll[0][0] < end_ns - PREROLL_NS - self.config.lead_in_ns:
            self._preroll.popleft()
        code = self._audio_lsh.encode(audio_features(samples))
        self._insert(Token(stamp_ns, Modality.AUDIO, code))
        fed = False
        for event in vad.process(samples, stamp_ns):
            if event.kind == "start":
                self._start_utterance(event.stamp_ns, end_ns)
                fed = asr is not None
                self.associator.request(
                    Token(event.stamp_ns, Modality.AUDIO, code), Ask(self._utterance)
                )
            else:
                if asr is not None and asr.active and not fed:
                    self._feed(heard, end_ns)
                    fed = True
                self.stats.speech_ends += 1
                self._activity_event(Activity.END, event.stamp_ns)
                if asr is not None and asr.active:
                    self._end_utterance(event.stamp_ns)
        if asr is not None and asr.active and not fed:
            self._feed(heard, end_ns)
        if self._raw_run is not None and vad.is_speech:
            self._raw_run[1] = True
        if vad.is_speech and end_ns - self._speech_start_ns > self.config.max_utterance_ns:
            self._cut_utterance(end_ns)

    def _restart(self, back_ns: int) -> None:
        """The stream went back ``back_ns`` in time (a loop, a restarted source): end the
        speech (its final comes as for any other utterance), start the token ring afresh and
        forget the detector, preroll, echo state and the onsets still waiting for a frame."""
        self.ring.reset(f"clock jumped back {back_ns / NS_PER_MS:.1f} ms (the audio stream)")
        self._onsets_due.clear()
        if self.engines.vad.is_speech:
            self.stats.speech_ends += 1
            self._activity_event(Activity.END, self._last_audio_end_ns)
        asr = self.engines.recognizer
        if asr is not None and asr.active:
            self._end_utterance(self._last_audio_end_ns)
        self.engines.vad.reset()
        self._preroll.clear()
        if self.engines.denoise is not None:
            self.engines.denoise.reset()
        if self.engines.echo is not None:
            self.engines.echo.gate.reset()
            self.engines.echo.raw_vad.reset()
            self._raw_run = None

    def _start_utterance(self, start_ns: int, heard_until_ns: int) -> None:
        """A new utterance: START, and the recogniser fed from the preroll, its lead-in first."""
        self.stats.speech_starts += 1
        self._speech_start_ns = start_ns
        self._utterance += 1
        self._activity_event(Activity.START, start_ns, heard_until_ns)
        if self.engines.vision is not None:
            self._onsets_due.append(start_ns)
            if self._refines:
                self._open[self._utterance] = start_ns
                while len(self._open) > MAX_OPEN_UTTERANCES:
                    del self._open[next(iter(self._open))]
        asr = self.engines.recognizer
        if asr is None:
            return
        lead_from_ns = start_ns - self.config.lead_in_ns
        if self._speech_end_ns is not None and self._speech_end_ns <= start_ns:
            lead_from_ns = max(lead_from_ns, self._speech_end_ns)  # not the last one's words
        first = [(s, x) for s, x in self._preroll if _end_ns(s, x) > lead_from_ns]
        asr.start(first[0][0])
        self._bias_prompt = None
        self._prime_recognizer()
        for _, x in first:
            self._feed(x, heard_until_ns)

    def _prime_recognizer(self) -> None:
        """Prime the recogniser with the labels of the frames in view around the current
        utterance's start (``config.bias``): those encoded from ``look_back_ns`` before it
        to ``window_after_ns`` after it, newest first; again when such a frame is encoded
        later (the frame nearest the onset is), only when the words change."""
        bias, asr = self.config.bias, self.engines.recognizer
        if bias is None or asr is None or not asr.active:
            return
        start = self._speech_start_ns
        tokens = self.ring.query(
            start - bias.look_back_ns, start + self.config.window_after_ns, Modality.VISION
        )
        sights = [t.payload.sight for t in reversed(tokens) if isinstance(t.payload, VisionPayload)]
        frames = [(s.pointed, *s.labels) if s.pointed else s.labels for s in sights]
        prompt = bias_prompt(bias.words(frames))
        if prompt != self._bias_prompt:
            if self._bias_prompt is None:
                self.stats.primed_utterances += 1
            self._bias_prompt = prompt
            self.stats.last_bias = prompt or ""
            asr.set_prompt(prompt)

    def _remove_echo(self, samples: np.ndarray, stamp_ns: int) -> tuple[np.ndarray, np.ndarray]:
        """The chunk with the robot's voice taken out, for the VAD, and what the recogniser
        hears of it (both unchanged without an echo stage); counts the speech starts that
        only the echo made."""
        echo = self.engines.echo
        if echo is None:
            return samples, samples
        result = echo.gate.process(samples, stamp_ns)
        self._echo_score = result.echo_score
        if result.echo:
            self.stats.echo_chunks += 1
        if not math.isnan(result.delay_ms):
            self.stats.echo_delay_ms = result.delay_ms
        for event in echo.raw_vad.process(samples, stamp_ns):
            if event.kind == "start":
                self._raw_run = [not math.isnan(result.echo_score), False]
            elif self._raw_run is not None:
                played, heard = self._raw_run
                if played and not heard:
                    self.stats.echo_suppressed_starts += 1
                self._raw_run = None
        return result.samples, result.samples if result.heard is None else result.heard

    def _cut_utterance(self, end_ns: int) -> None:
        """End an utterance that lasted too long: final transcript now, VAD from scratch."""
        self.stats.forced_ends += 1
        self._activity_event(Activity.END, end_ns, cut=True)
        asr = self.engines.recognizer
        if asr is not None and asr.active:
            self._end_utterance(end_ns)
        self.engines.vad.reset()

    def _feed(self, samples: np.ndarray, end_ns: int) -> None:
        text = self.engines.recognizer.feed(samples)
        if text:
            self.stats.partials += 1
            self._slice_out.append(
                TranscriptEvent(
                    self._utterance, self._now_ns, self._speech_start_ns, end_ns, text, False
                )
            )

    def _end_utterance(self, end_ns: int) -> None:
        """End the recogniser's utterance without waiting for its final (Whisper decodes on
        its own thread); :meth:`_collect_finals` hands it over in a later pass."""
        self.engines.recognizer.end()
        self._finals_due.append((self._utterance, self._speech_start_ns, end_ns))

    def _collect_finals(self) -> int:
        """Take the finals the recogniser has ready, oldest first; return how many. When
        the recogniser fails on one, that utterance still ends with a final: the abandoned
        marker (empty text, confidence 0), so whoever waits for its words stops waiting;
        the error propagates, to be counted."""
        collected = 0
        while self._finals_due:
            try:
                result = self.engines.recognizer.poll_final()
            except EngineError:
                utterance, start_ns, end_ns = self._finals_due.popleft()
                self._open.pop(utterance, None)  # no words will come
                self.stats.finals_abandoned += 1
                self._slice_out.append(
                    TranscriptEvent(utterance, self._now_ns, start_ns, end_ns, "", True, 0.0)
                )
                raise
            if result is None:
                break
            utterance, start_ns, end_ns = self._finals_due.popleft()
            collected += 1
            self.stats.finals += 1
            self._final_out_ns = self._now_ns
            out = self._finals_held if utterance in self._open else self._slice_out
            out.append(
                TranscriptEvent(
                    utterance,
                    self._now_ns,
                    start_ns,
                    end_ns,
                    result.text,
                    True,
                    float(result.confidence),
                    tuple(result.words),
                )
            )
        return collected

    def _hand_out_finals(self) -> None:
        """Finals taken between two slices go out now, not with the next slice (up to
        ``slice_ns`` later, while the turn waits for them): each after the decision by its
        words, made now with the frames the last slice had, and after what the slice had
        gathered before it (partials)."""
        due_ns = self.scheduler.next_due_ns
        if due_ns is None:  # no slice ran yet: the first one hands them out
            return
        self._decide(due_ns - 2 * self.scheduler.slice_ns)
        out, self._slice_out = self._slice_out, []
        self._count_out(out)
        self._events.extend(out)

    def _activity_event(
        self, kind: Activity, stamp_ns: int, heard_until_ns: int | None = None, *, cut: bool = False
    ) -> None:
        until = stamp_ns if heard_until_ns is None else heard_until_ns
        if kind is Activity.END:
            self._speech_end_ns = stamp_ns
        self._activity.append(
            VoiceActivityEvent(
                kind,
                stamp_ns,
                self._utterance,
                self._speech_start_ns,
                max(until - self._speech_start_ns, 0) / NS_PER_S,
                self._echo_score,
                cut,
            )
        )

    def _hand_out_activity(self) -> None:
        activity, self._activity = self._activity, []
        self.stats.voice_activity += len(activity)
        self._events.extend(activity)

    @property
    def _refines(self) -> bool:
        """Whether finals refine their utterance's association by their words."""
        engines = self.engines
        return engines.words is not None and engines.recognizer is not None

    def _insert(self, token: Token) -> int | None:
        try:
            return self.ring.insert(token, now_ns=self._now_ns)
        except ValueError as err:  # counted by the ring
            self._events.append(RingWarning(str(err)))
            return None

    # ----------------------------------------------------------------- slice stages
    def _stage_error(self, stage: str, err: Exception) -> None:
        self.stats.engine_errors += 1
        self._events.append(StageError(stage, err))

    def _ingest(self, current: Slice) -> None:
        """The newest frame; audio left over (the prompt pass usually took it)."""
        if self.source is not None:
            frame = self.source.take_frame()
            if frame is not None:
                self.push_frame(*frame)
        self.process_audio(self._now_ns)

    def _encode(self, current: Slice) -> None:
        """Encode the frame nearest each new speech onset, then the newest frame when the
        vision rate allows."""
        vision = self.engines.vision
        if vision is None:
            return
        onsets, self._onsets_due = self._onsets_due, []
        for onset_ns in onsets:
            last = self._last_frame_ns
            if (last is None or last < onset_ns) and self._now_ns - onset_ns <= MAX_FRAME_LAG_NS:
                self._onsets_due.append(onset_ns)  # the camera is behind: its frame is to come
                continue
            near = min(self._raw_frames, default=None, key=lambda f: abs(f[0] - onset_ns))
            if near is not None and near[0] not in self._encoded:
                self._encode_frame(vision, *near)
        frame = self._frame
        if frame is None:
            return
        stamp_ns, rgb = frame
        since = stamp_ns - self._last_vision_ns
        if 0 <= since < NS_PER_S / self.config.vision_rate_hz * 0.9:  # < 0: a loop
            return
        if self._turn_ending():
            if stamp_ns != self._held_ns:  # a frame due that waits: counted once
                self._held_ns = stamp_ns
                self.stats.vision_yielded += 1
            return
        self._frame = None
        self._last_vision_ns = stamp_ns
        if stamp_ns not in self._encoded:
            self._encode_frame(vision, stamp_ns, rgb)

    def _turn_ending(self) -> bool:
        """Whether the user's turn may be ending: their speech paused and the recogniser
        decodes what may become the final (the VAD ends the speech only after its closing
        silence); or their speech ended and its final transcript is still due, or came out
        less than ``turn_yield_ns`` ago (the end-of-turn wait, the model's first words and
        the first phrase follow it), at most ``MAX_TURN_YIELD_NS`` after the end of the
        speech."""
        if not self.config.turn_yield_ns:
            return False
        if self.engines.vad.is_speech:
            asr = self.engines.recognizer
            return asr is not None and asr.pausing
        end_ns = self._speech_end_ns
        if end_ns is None:
            return False
        since = self._now_ns - end_ns
        if not 0 <= since < MAX_TURN_YIELD_NS:  # < 0: the stream went back in time
            return False
        if self._finals_due:
            return True
        final_ns = self._final_out_ns
        after = self._now_ns - final_ns if final_ns is not None and final_ns >= end_ns else since
        return after < self.config.turn_yield_ns

    def _encode_frame(self, vision: VisionEncoder, stamp_ns: int, rgb: np.ndarray) -> None:
        """One frame -> a vision token (its labels' code and Bloom filter, the frame) and a
        scene; a freshness round for the older vision tokens."""
        result = vision.encode(rgb, stamp_ns)
        self._encoded.append(stamp_ns)
        self.stats.vision_encoded += 1
        summary = tuple(result.summary)
        labels = tuple(getattr(result, "labels", ()) or ())
        pointed = getattr(result, "pointed", None)
        words = self.engines.words
        sight = words.sight(labels, pointed) if words is not None else Sight(labels, pointed)
        bloom = None
        if words is not None:
            bloom = BloomFilter(bits=BLOOM_BITS, hashes=3)
            for word in sight.words:
                bloom.add_word(word)
        code = sight.code if sight.main is not None and words is not None else int(result.code)
        token_id = self._insert(
            Token(stamp_ns, Modality.VISION, code, VisionPayload(summary, sight, bloom, rgb))
        )
        if token_id is not None:
            self.associator.age(token_id)
            self._prime_recognizer()
        phrases, sentence = describe(summary)
        self._slice_out.append(
            SceneEvent(stamp_ns, code, tuple(phrases), sentence, person_present(summary))
        )

    def _associate(self, current: Slice) -> None:
        """Decide the triggers whose window has closed (one slice of slack for late frames);
        ask again, by their words, for the utterances whose final is in, and hand the final
        out after that decision."""
        self._decide(current.end_ns - self.scheduler.slice_ns)

    def _decide(self, slice_start_ns: int) -> None:
        """:meth:`_associate` for the slice that starts at ``slice_start_ns``."""
        look_back = self.config.look_back_ns
        held, self._finals_held = self._finals_held, []
        for final in held:
            onset_ns = self._open.pop(final.utterance_id, final.start_ns)
            try:
                query = self.engines.words.query(final.text)
            except Exception as err:  # the embedder failed: decide by time, keep the final
                self._stage_error("associate", err)
                query = None
            code = query.code if query is not None and query.code is not None else 0
            trigger = Token(onset_ns, Modality.TEXT, code)
            self.associator.request(trigger, Ask(final.utterance_id, query, look_back))
        # What an utterance, open or to come, may still look back to is never retired.
        self.associator.keep_from_ns = min(self._open.values(), default=self._now_ns) - look_back
        self._slice_out.extend(self.associator.poll(self._frames_in_by(slice_start_ns)))
        self._slice_out.extend(held)

    def _frames_in_by(self, now_ns: int) -> int:
        """Stream time up to which windows are complete: the slice's start, ``now_ns`` (one
        slice of slack), or the last frame received when the camera is behind the microphone
        by at most ``MAX_FRAME_LAG_NS`` (its frames in the window are still to come)."""
        last = self._last_frame_ns
        if (
            self.engines.vision is None
            or last is None
            or not 0 <= now_ns - last <= MAX_FRAME_LAG_NS
        ):
            return now_ns
        return last

    def _emit(self, current: Slice) -> None:
        out, self._slice_out = self._slice_out, []
        self._count_out(out)
        self._events.extend(out)
        if self.engines.vad.is_speech:
            self._activity_event(Activity.ONGOING, self._last_audio_end_ns)
        elif self._silence_due():
            self._silence_heard_ns = self._last_audio_end_ns
            self._activity.append(
                VoiceActivityEvent(
                    Activity.SILENCE, self._silence_heard_ns, 0, 0, 0.0, self._echo_score
                )
            )
        self._hand_out_activity()

    def _count_out(self, out: list[FusionEvent]) -> None:
        for event in out:
            if isinstance(event, SceneEvent):
                self.stats.scenes += 1
            elif isinstance(event, Decision):
                self.stats.associations += 1

    def _silence_due(self) -> bool:
        """Whether the stream heard without speech has gone far enough on (or back: a new
        stream) since the last SILENCE to say so again."""
        heard_ns, last_ns = self._last_audio_end_ns, self._silence_heard_ns
        if heard_ns < last_ns:
            return True
        pause = (
            self._speech_end_ns is not None and heard_ns - self._speech_end_ns < SILENCE_PAUSE_NS
        )
        every = SILENCE_EVERY_NS if pause else SILENCE_IDLE_EVERY_NS
        return heard_ns - last_ns >= every
