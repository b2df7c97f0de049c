"""Speex's adaptive acoustic echo canceller (libspeexdsp, Debian ``libspeexdsp1``) via ctypes.

A multidelay block frequency-domain adaptive filter (MDF) that learns the speaker-to-microphone
path from the played reference and subtracts its estimate of the echo. Its C API has not
changed since 1.2 (2008); binding the four functions directly avoids an unmaintained or
compiled Python wrapper. :class:`SpeexEchoCanceller` has the interface of
:class:`omniflow.core.echo.EchoGate` (``process(samples, stamp_ns) -> EchoResult``) and reads
the reference aligned with each chunk from the same :class:`~omniflow.core.echo.EchoReference`,
so the fusion node and ``benchmarks/echo.py`` can use either.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math

import numpy as np

from omniflow.core.echo import EchoReference, EchoResult
from omniflow.errors import AudioFormatError, ConfigError, EngineError

__all__ = ["SpeexEchoCanceller", "load_speexdsp"]

_SPEEX_ECHO_SET_SAMPLING_RATE = 24
_I16P = ctypes.POINTER(ctypes.c_int16)
_LIBRARY_NAMES = ("libspeexdsp.so.1", "speexdsp")


def load_speexdsp() -> ctypes.CDLL:
    """Open libspeexdsp and declare the echo functions; EngineError when it is missing."""
    for name in _LIBRARY_NAMES:
        path = ctypes.util.find_library(name) if "." not in name else name
        if not path:
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        if hasattr(lib, "speex_echo_state_init"):
            break
    else:
        raise EngineError(
            "libspeexdsp not found: install the Debian package libspeexdsp1 "
            "(scripts/install_system_deps.sh)"
        )
    lib.speex_echo_state_init.restype = ctypes.c_void_p
    lib.speex_echo_state_init.argtypes = [ctypes.c_int, ctypes.c_int]
    lib.speex_echo_cancellation.restype = None
    lib.speex_echo_cancellation.argtypes = [ctypes.c_void_p, _I16P, _I16P, _I16P]
    lib.speex_echo_ctl.restype = ctypes.c_int
    lib.speex_echo_ctl.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    lib.speex_echo_state_reset.restype = None
    lib.speex_echo_state_reset.argtypes = [ctypes.c_void_p]
    lib.speex_echo_state_destroy.restype = None
    lib.speex_echo_state_destroy.argtypes = [ctypes.c_void_p]
    return lib


class SpeexEchoCanceller:
    """Speex MDF echo cancellation of 16 kHz int16 chunks against an :class:`EchoReference`.

    ``frame_ms`` is Speex's block (chunks must be a multiple of it: 40 ms chunks with 20 ms
    frames); ``tail_ms`` the echo path it can model (delay plus reverberation). ``echo_score``
    is the share of the chunk's energy removed; ``echo`` is true when it reaches
    ``suppress_score`` (0 < score; > 1 turns the gate off and keeps only the cancellation).
    """

    def __init__(
        self,
        reference: EchoReference,
        *,
        frame_ms: int = 20,
        tail_ms: int = 300,
        suppress_score: float = 0.5,
    ) -> None:
        if frame_ms not in (10, 20):
            raise ConfigError(f"frame_ms must be 10 or 20, not {frame_ms}")
        if not 20 <= tail_ms <= 1000:
            raise ConfigError(f"tail_ms must be in [20, 1000] ms, not {tail_ms}")
        self.reference = reference
        self.suppress_score = float(suppress_score)
        rate = reference.sample_rate
        self._frame = rate * frame_ms // 1000
        self._lib = load_speexdsp()
        self._state = self._lib.speex_echo_state_init(self._frame, rate * tail_ms // 1000)
        if not self._state:
            raise EngineError(
                f"speex_echo_state_init failed (frame {self._frame}, tail {tail_ms} ms)"
            )
        value = ctypes.c_int(rate)
        self._lib.speex_echo_ctl(self._state, _SPEEX_ECHO_SET_SAMPLING_RATE, ctypes.byref(value))

    def __del__(self) -> None:
        state, self._state = getattr(self, "_state", None), None
        if state:
            self._lib.speex_echo_state_destroy(state)

    def reset(self) -> None:
        """Forget the learnt echo path."""
        self._lib.speex_echo_state_reset(self._state)

    def process(self, samples: np.ndarray, stamp_ns: int) -> EchoResult:
        mic = np.ascontiguousarray(samples, dtype=np.int16)
        if mic.ndim != 1 or len(mic) % self._frame:
            raise AudioFormatError(
                f"chunks must be mono multiples of {self._frame} samples, got shape {mic.shape}"
            )
        ref = self.reference.window(stamp_ns, len(mic))
        if not np.any(ref):
            return EchoResult(mic, math.nan, False, math.nan)
        ref16 = np.ascontiguousarray(np.clip(np.round(ref), -32768, 32767), dtype=np.int16)
        out = np.empty_like(mic)
        for lo in range(0, len(mic), self._frame):
            hi = lo + self._frame
            self._lib.speex_echo_cancellation(
                self._state,
                mic[lo:hi].ctypes.data_as(_I16P),
                ref16[lo:hi].ctypes.data_as(_I16P),
                out[lo:hi].ctypes.data_as(_I16P),
            )
        x = mic.astype(np.float64)
        energy = float(x @ x)
        y = out.astype(np.float64)
        score = float(np.clip(1.0 - (y @ y) / energy, 0.0, 1.0)) if energy > 0 else 1.0
        echo = score >= self.suppress_score
        return EchoResult(np.zeros_like(mic) if echo else out, score, echo, math.nan)
