"""Voice-activity detection on the 40 ms capture chunks, stamped in stream time.

The fusion core needs to know *when* the user started and stopped speaking, in the same
time base as the camera frames, so that "what is this?" pairs with the frame the user was
pointing at. Every detector here therefore works on the capture stamps, never on the wall
clock: a chunk stamped ``t`` whose sample ``k`` starts a speech run gives a start event at
``t + k / 16 kHz``, whether the stream is live, replayed from a bag, or decoded faster than
real time in a test.

Capture delivers 40 ms chunks (or any other length); each engine has its own window
(webrtcvad: 10, 20 or 30 ms frames; silero: 512 samples), so :class:`VoiceActivityDetector`
re-chunks internally and keeps the remainder for the next call. The per-window decisions go
through one small state machine shared by the engines:

- ``min_speech_ms``: a run of speech windows at least this long starts speech (shorter
  clicks and blips are ignored); the start is stamped at the first window of the run.
- ``min_silence_ms``: a pause at least this long ends speech (shorter pauses between words
  stay inside the utterance); the end event is emitted only then.
- ``hangover_ms``: the end is stamped this long after the last speech window (at most
  ``min_silence_ms``), so soft word tails the engine misses stay inside the utterance.

With ``noise_margin_db`` > 0 the room's noise floor gates the engine
(:class:`~omniflow.core.noise_floor.NoiseFloor`, tracked over ``noise_history_s``): a run of
speech windows starts speech only once one of its windows is that far above the floor, and
reaches back at most ``min_speech_ms`` before it (so a soft first syllable keeps the engine's
timing, and noise before the voice is not taken in); while speaking, a window that is not that
loud counts as silence. webrtcvad alone takes steady pink or fan noise at 10 dB SNR for speech
that never ends; with the gate the noise ends within ``noise_history_s`` and the question
inside it is still found (``benchmarks/vad_noise.py``).

Engines:

- :class:`WebRtcVad` (``"webrtc"``, the default): ``webrtcvad-wheels``, the GMM detector of
  the WebRTC project; about 0.01 ms a 40 ms chunk, no model file.
- :class:`SileroVad` (``"silero"``): the silero-vad ONNX model through onnxruntime, more
  robust to noise, about 0.1 ms a 512-sample window here. The silero-vad package imports
  torch, so it is installed with ``--no-deps`` only for its bundled .onnx file and never
  imported; it is an optional engine, not a runtime requirement.

Choosing one: see ``benchmarks/audio_encoders.py`` and the "Audio encoders" section of
``benchmarks/README.md``.
"""

from __future__ import annotations

import abc
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from omniflow.core.noise_floor import NoiseFloor
from omniflow.core.timing import NS_PER_SAMPLE, SAMPLE_RATE
from omniflow.errors import AudioFormatError, ConfigError, EngineError

__all__ = [
    "VAD_ENGINES",
    "SileroVad",
    "VadEvent",
    "VoiceActivityDetector",
    "WebRtcVad",
    "check_pcm16k",
    "make_vad",
]


#: Values accepted by :func:`make_vad` for ``engine``.
VAD_ENGINES: tuple[str, ...] = ("webrtc", "silero")


@dataclass(frozen=True)
class VadEvent:
    """Speech started or ended at ``stamp_ns``, in the stream time of the chunk stamps."""

    kind: Literal["start", "end"]
    stamp_ns: int


def check_pcm16k(samples: Any, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """Return ``samples`` as a 1-D int16 array, or raise AudioFormatError naming the problem.

    Accepts shape ``(n,)`` or ``(n, 1)``. Refuses another rate, another dtype (float audio
    is refused too, with NaN named when present, because a silent conversion would hide a
    pipeline bug), several channels and empty chunks. Shared by the VAD and the recogniser.
    """
    if sample_rate != SAMPLE_RATE:
        raise AudioFormatError(
            f"sample rate {sample_rate} Hz; the speech engines need {SAMPLE_RATE} Hz "
            "(resample at capture)"
        )
    if not isinstance(samples, np.ndarray):
        raise AudioFormatError(f"samples must be a numpy int16 array, not {type(samples).__name__}")
    if samples.dtype.kind == "f" and samples.size and np.isnan(samples).any():
        raise AudioFormatError(f"samples contain NaN ({samples.dtype}); expected int16 PCM")
    if samples.dtype != np.int16:
        raise AudioFormatError(f"samples must be int16 PCM, not {samples.dtype}")
    if samples.ndim == 2 and samples.shape[1] == 1:
        samples = samples[:, 0]
    if samples.ndim != 1:
        raise AudioFormatError(f"samples must be mono, shape (n,) or (n, 1); got {samples.shape}")
    if samples.size == 0:
        raise AudioFormatError("empty audio chunk")
    return samples


def _ms_to_samples(name: str, ms: float) -> int:
    if not np.isfinite(ms) or ms < 0:
        raise ConfigError(f"{name} must be a finite number of milliseconds >= 0, not {ms}")
    return int(round(ms * SAMPLE_RATE / 1000))


class VoiceActivityDetector(abc.ABC):
    """Speech start/end events from 16 kHz int16 chunks of any length, in stream time.

    Subclasses give the engine's window length and a per-window decision
    (:meth:`_window_is_speech`); this class re-chunks, stamps and debounces, and with
    ``noise_margin_db`` > 0 gates the engine by the room's noise floor (see the module). Not
    thread-safe: one detector per audio stream, called from one thread.
    """

    def __init__(
        self,
        window_samples: int,
        *,
        min_speech_ms: float = 90.0,
        min_silence_ms: float = 300.0,
        hangover_ms: float = 60.0,
        noise_margin_db: float = 0.0,
        noise_history_s: float = 1.5,
    ) -> None:
        self._window = int(window_samples)
        try:
            self._floor = (
                NoiseFloor(
                    self._window / SAMPLE_RATE,
                    history_s=noise_history_s,
                    margin_db=noise_margin_db,
                )
                if noise_margin_db != 0
                else None
            )
        except ValueError as err:
            raise ConfigError(f"noise floor of the VAD: {err}") from err
        self._min_speech = _ms_to_samples("min_speech_ms", min_speech_ms)
        self._min_silence = _ms_to_samples("min_silence_ms", min_silence_ms)
        self._hangover = _ms_to_samples("hangover_ms", hangover_ms)
        if self._hangover > self._min_silence:
            raise ConfigError(
                f"hangover_ms ({hangover_ms}) must not exceed min_silence_ms ({min_silence_ms})"
            )
        self._buf = np.zeros(0, dtype=np.int16)
        self._buf_stamp_ns = 0
        self._speaking = False
        self._run_start_ns: int | None = None  # first window of the current speech run
        self._run_samples = 0
        self._run_loud = False
        self._last_speech_end_ns = 0
        self._silence_samples = 0

    @property
    def window_samples(self) -> int:
        """Samples the engine decides on at a time (its frame or window)."""
        return self._window

    @property
    def is_speech(self) -> bool:
        """True between a start event and the matching end event."""
        return self._speaking

    def reset(self) -> None:
        """Forget buffered samples and state (a new stream, or a clock jump in a looping bag)."""
        self._buf = np.zeros(0, dtype=np.int16)
        self._speaking = False
        self._run_start_ns = None
        self._run_samples = 0
        self._run_loud = False
        self._silence_samples = 0
        if self._floor is not None:
            self._floor.reset()
        self._reset_engine()

    @property
    def noise_floor_dbfs(self) -> float | None:
        """The room's noise floor the detector tracks (None: no floor gate, or no audio yet)."""
        return self._floor.floor_dbfs if self._floor is not None else None

    def _judge(self, window: np.ndarray) -> tuple[bool, bool]:
        """The engine's decision, and whether the window is loud enough over the noise floor
        (always, when no floor is tracked)."""
        speech = self._window_is_speech(window)
        return speech, self._floor is None or self._floor.admits(window)

    def process(
        self, samples: np.ndarray, stamp_ns: int, *, sample_rate: int = SAMPLE_RATE
    ) -> list[VadEvent]:
        """Feed one chunk whose first sample was captured at ``stamp_ns``; return new events.

        Samples left over from the previous chunk keep their own stamp; samples of this chunk
        are stamped from ``stamp_ns`` and their offset, so a stream with gaps or jitter in its
        chunk stamps is followed rather than integrated. Raises AudioFormatError for a chunk
        that is not 16 kHz mono int16, empty, or whose stamp is not a non-negative integer;
        the detector's state is untouched then.
        """
        chunk = check_pcm16k(samples, sample_rate)
        if (
            isinstance(stamp_ns, bool)
            or not isinstance(stamp_ns, (int, np.integer))
            or stamp_ns < 0
        ):
            raise AudioFormatError(f"stamp_ns must be a non-negative integer, not {stamp_ns!r}")
        stamp_ns = int(stamp_ns)
        old = len(self._buf)
        if old == 0:
            self._buf_stamp_ns = stamp_ns
        buf = np.concatenate([self._buf, chunk]) if old else chunk

        def stamp_of(index: int) -> int:
            if index < old:
                return self._buf_stamp_ns + index * NS_PER_SAMPLE
            return stamp_ns + (index - old) * NS_PER_SAMPLE

        events: list[VadEvent] = []
        start = 0
        while start + self._window <= len(buf):
            window = buf[start : start + self._window]
            t0 = stamp_of(start)
            event = self._step(*self._judge(window), t0, t0 + self._window * NS_PER_SAMPLE)
            if event is not None:
                events.append(event)
            start += self._window
        self._buf_stamp_ns = stamp_of(start)
        self._buf = buf[start:].copy()
        return events

    def _step(self, speech: bool, loud: bool, t0: int, t1: int) -> VadEvent | None:
        """Advance the debounce state machine by one window [t0, t1): the engine's ``speech``
        and whether the window is ``loud`` enough over the noise floor. A run of speech
        windows starts speech once it is ``min_speech_ms`` long and one of its windows was
        loud (a voice's first syllable may be soft, so the start keeps the engine's timing);
        while speaking, a window that is not loud counts as silence (so noise ends)."""
        n = self._window
        if not self._speaking:
            if not speech:
                self._run_start_ns, self._run_samples, self._run_loud = None, 0, False
                return None
            if self._run_start_ns is None:
                self._run_start_ns = t0
            self._run_samples += n
            self._run_loud = self._run_loud or loud
            if not self._run_loud:
                # Not loud yet (the engine may be hearing noise): the run that a loud window
                # confirms reaches back at most min_speech_ms, not into the noise before it.
                if self._run_samples > max(self._min_speech, n):
                    self._run_start_ns += n * NS_PER_SAMPLE
                    self._run_samples -= n
                return None
            if self._run_samples < max(self._min_speech, 1):
                return None
            self._speaking = True
            self._last_speech_end_ns, self._silence_samples = t1, 0
            return VadEvent("start", self._run_start_ns)
        if speech and loud:
            self._last_speech_end_ns, self._silence_samples = t1, 0
            return None
        self._silence_samples += n
        if self._silence_samples < max(self._min_silence, 1):
            return None
        self._speaking = False
        self._run_start_ns, self._run_samples, self._run_loud = None, 0, False
        return VadEvent("end", self._last_speech_end_ns + self._hangover * NS_PER_SAMPLE)

    @abc.abstractmethod
    def _window_is_speech(self, window: np.ndarray) -> bool:
        """The engine's decision for exactly :attr:`window_samples` int16 samples."""

    def _reset_engine(self) -> None:
        """Clear the engine's own recurrent state; engines without one keep this no-op."""
        return None


class WebRtcVad(VoiceActivityDetector):
    """The WebRTC GMM detector (``webrtcvad-wheels``): tiny, fast, no model file.

    ``aggressiveness`` 0-3 trades misses for false alarms (3 rejects the most non-speech);
    ``frame_ms`` is 10, 20 or 30, the only frames the library takes. Its noise model starts
    from a default and flags the first ~100 ms of any stream as speech, even digital silence
    or quiet white noise (measured: 3-4 frames of 30 ms); the first ``warmup_ms`` after a
    reset are therefore taken as non-speech while it adapts.
    """

    def __init__(
        self,
        *,
        aggressiveness: int = 2,
        frame_ms: int = 30,
        warmup_ms: float = 150.0,
        **timing: float,
    ) -> None:
        if aggressiveness not in (0, 1, 2, 3):
            raise ConfigError(f"webrtc aggressiveness must be 0, 1, 2 or 3, not {aggressiveness}")
        if frame_ms not in (10, 20, 30):
            raise ConfigError(f"webrtc frame_ms must be 10, 20 or 30, not {frame_ms}")
        try:
            import webrtcvad
        except ImportError as err:
            raise EngineError(
                "the webrtc VAD needs the webrtcvad-wheels package: "
                "pip install webrtcvad-wheels (listed in requirements/runtime.txt)"
            ) from err
        super().__init__(SAMPLE_RATE * frame_ms // 1000, **timing)
        self._aggressiveness = aggressiveness
        self._warmup = _ms_to_samples("warmup_ms", warmup_ms)
        self._module = webrtcvad
        self._reset_engine()

    def _reset_engine(self) -> None:
        self._vad = self._module.Vad(self._aggressiveness)
        self._seen = 0

    def _window_is_speech(self, window: np.ndarray) -> bool:
        speech = bool(self._vad.is_speech(window.tobytes(), SAMPLE_RATE))
        self._seen += len(window)
        return speech and self._seen > self._warmup


def _silero_model_path() -> Path | None:
    """The .onnx bundled in the silero-vad package, found without importing it (torch)."""
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / "silero_vad.onnx"
    return path if path.is_file() else None


class SileroVad(VoiceActivityDetector):
    """The silero-vad v5 ONNX model through onnxruntime: 512-sample windows, one thread.

    The model is recurrent: its state and the last 64 samples (its context) are carried from
    window to window and cleared by :meth:`reset`. A window is speech when the model's
    probability reaches ``threshold``. ``model_path`` defaults to the .onnx shipped in the
    silero-vad package (``pip install --no-deps silero-vad``; its Python code needs torch and
    is never imported).
    """

    _CONTEXT = 64

    def __init__(
        self,
        *,
        threshold: float = 0.5,
        model_path: str | Path | None = None,
        threads: int = 1,
        **timing: float,
    ) -> None:
        if not 0.0 < threshold < 1.0:
            raise ConfigError(f"silero threshold must be in (0, 1), not {threshold}")
        try:
            import onnxruntime
        except ImportError as err:
            raise EngineError("the silero VAD needs onnxruntime: pip install onnxruntime") from err
        path = Path(model_path) if model_path is not None else _silero_model_path()
        if path is None or not path.is_file():
            raise EngineError(
                f"silero VAD model not found ({model_path or 'silero-vad package'}): "
                "pip install --no-deps silero-vad, or give model_path"
            )
        super().__init__(512, **timing)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        try:
            self._session = onnxruntime.InferenceSession(
                str(path), sess_options=options, providers=["CPUExecutionProvider"]
            )
        except Exception as err:  # onnxruntime raises its own untyped errors
            raise EngineError(f"cannot load the silero VAD model {path}: {err}") from err
        self._threshold = float(threshold)
        self._sr = np.array(SAMPLE_RATE, dtype=np.int64)
        self._reset_engine()

    def _reset_engine(self) -> None:
        self._state = np.zeros((2, 1, 128), dtype=np.float32)
        self._context = np.zeros((1, self._CONTEXT), dtype=np.float32)

    def _window_is_speech(self, window: np.ndarray) -> bool:
        x = np.concatenate([self._context, window[None, :].astype(np.float32) / 32768.0], axis=1)
        prob, self._state = self._session.run(
            None, {"input": x, "state": self._state, "sr": self._sr}
        )
        self._context = x[:, -self._CONTEXT :]
        return float(prob[0, 0]) >= self._threshold


def make_vad(engine: str = "webrtc", **options: Any) -> VoiceActivityDetector:
    """Build the detector named ``engine`` (one of :data:`VAD_ENGINES`) with its options.

    ConfigError for an unknown name or option (the message lists the allowed names);
    EngineError when the engine's package is missing.
    """
    classes: dict[str, type[VoiceActivityDetector]] = {"webrtc": WebRtcVad, "silero": SileroVad}
    if engine not in classes:
        raise ConfigError(f"unknown VAD engine {engine!r}; allowed: {', '.join(VAD_ENGINES)}")
    try:
        return classes[engine](**options)
    except TypeError as err:
        raise ConfigError(f"bad option for the {engine} VAD: {err}") from err
