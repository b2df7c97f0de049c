"""The audio front end's framing and band checks, on plain values (no ROS, no engines, no I/O).

Noise suppressors work on fixed frames (Speex's preprocessor 20 ms at 16 kHz, RNNoise 10 ms
at 48 kHz) while the microphone's chunks are 40 ms, or whatever a source sends.
:class:`Reframer` cuts the stream into the engine's frames and :class:`DelayLine` hands the
engine's output back chunk for chunk, each chunk as long as the one that went in, with a
fixed delay: none while the chunks are whole numbers of frames (640 samples in 20 ms
frames), one frame (plus the engine's resampling look-ahead) otherwise. So a suppressor is a
drop-in stage: it never changes how many samples flow, and its latency is bounded and known.

:func:`band_edge_hz` tells a band-limited source (a telephone-band 8 kHz microphone upsampled
to 16 kHz) from a full-band one by where its spectrum ends, so the fusion node can say which
it hears.
"""

from __future__ import annotations

import numpy as np
from scipy.signal import correlate

from omniflow.errors import AudioFormatError, ConfigError

__all__ = ["DENOISERS", "DelayLine", "Reframer", "band_edge_hz", "snr_gain_db"]

#: The ``audio.denoise`` choices (``omniflow.engines.denoise`` makes them).
DENOISERS = ("none", "speex", "rnnoise")


class Reframer:
    """Cuts a stream of 1-D chunks into frames of ``frame`` samples; a partial frame waits
    for the next chunk."""

    def __init__(self, frame: int) -> None:
        if isinstance(frame, bool) or not isinstance(frame, int) or frame <= 0:
            raise ConfigError(f"frame must be a positive number of samples, got {frame!r}")
        self.frame = frame
        self._rest = np.zeros(0, dtype=np.float32)

    @property
    def pending(self) -> int:
        """Samples waiting for a whole frame."""
        return len(self._rest)

    def push(self, chunk: np.ndarray) -> list[np.ndarray]:
        """The whole frames now available (float32 copies), oldest first."""
        if chunk.ndim != 1:
            raise AudioFormatError(f"chunks must be mono (1-D), got shape {chunk.shape}")
        data = np.concatenate([self._rest, chunk.astype(np.float32, copy=False)])
        n = len(data) // self.frame * self.frame
        self._rest = data[n:].copy()
        return [data[i : i + self.frame] for i in range(0, n, self.frame)]

    def reset(self) -> None:
        self._rest = np.zeros(0, dtype=np.float32)


class DelayLine:
    """Output samples queued until the caller takes a chunk of them.

    :meth:`take` returns exactly ``n`` samples. The first time fewer are queued (the engine
    still holds part of the chunk, in a partial frame or a resampler's look-ahead),
    ``reserve`` samples of silence (at least the missing ones) are put *in front*: from then
    on the whole stream runs that much later and never runs short again as long as the
    engine holds back at most ``reserve`` samples (one frame less one sample for a plain
    :class:`Reframer`). ``delay`` is the added latency: 0 while every chunk is a whole
    number of frames.
    """

    def __init__(self, reserve: int) -> None:
        if isinstance(reserve, bool) or not isinstance(reserve, int) or reserve < 0:
            raise ConfigError(f"reserve must be a number of samples >= 0, got {reserve!r}")
        self.reserve = reserve
        self.delay = 0
        self._queue = np.zeros(0, dtype=np.float32)

    def add(self, samples: np.ndarray) -> None:
        self._queue = np.concatenate([self._queue, samples.astype(np.float32, copy=False)])

    def take(self, n: int) -> np.ndarray:
        if len(self._queue) < n:
            missing = n - len(self._queue)
            pad = max(missing, self.reserve) if self.delay == 0 else missing
            self.delay += pad
            self._queue = np.concatenate([np.zeros(pad, dtype=np.float32), self._queue])
        out, self._queue = self._queue[:n], self._queue[n:]
        return out

    def reset(self) -> None:
        self.delay = 0
        self._queue = np.zeros(0, dtype=np.float32)


def band_edge_hz(samples: np.ndarray, rate: int, share: float = 0.995) -> float:
    """The frequency below which ``share`` of the signal's power lies (Hz; NaN for silence).

    A telephone-band source resampled to 16 kHz ends near 4 kHz (its anti-aliasing filter),
    a full-band microphone's speech and noise reach well beyond; the default ``share``
    ignores the little leakage above the filter's edge.
    """
    if samples.ndim != 1 or not len(samples):
        raise AudioFormatError(f"need a non-empty 1-D signal, got shape {samples.shape}")
    if not 0.0 < share < 1.0:
        raise ConfigError(f"share must be in (0, 1), got {share}")
    x = samples.astype(np.float64)
    power = np.abs(np.fft.rfft(x - x.mean())) ** 2
    total = float(power.sum())
    if total <= 0.0:
        return float("nan")
    cumulative = np.cumsum(power) / total
    k = int(np.searchsorted(cumulative, share))
    return k * rate / len(x)


def snr_gain_db(
    clean: np.ndarray, noisy: np.ndarray, processed: np.ndarray, max_lag: int = 0
) -> float:
    """How much the processing raised the signal-to-noise ratio (dB), ``clean`` being the
    speech alone aligned with ``noisy``: ``SNR(processed) - SNR(noisy)``, where a signal's
    noise is what remains after its least-squares projection on ``clean`` (so a suppressor
    is not rewarded for merely scaling the signal down). ``processed`` may run up to
    ``max_lag`` samples late (a suppressor's latency): it is aligned by its best lag."""
    if not (clean.shape == noisy.shape == processed.shape) or clean.ndim != 1:
        raise AudioFormatError(
            f"need three 1-D signals of one length, got {clean.shape}, {noisy.shape}, "
            f"{processed.shape}"
        )
    s = clean.astype(np.float64)
    energy = float(s @ s)
    if energy <= 0.0:
        raise AudioFormatError("the clean signal is silent: no SNR to measure")

    def snr(y: np.ndarray) -> float:
        y = y.astype(np.float64)
        target = (float(y @ s) / energy) * s
        residual = y - target
        return 10.0 * np.log10(float(target @ target) / max(float(residual @ residual), 1e-12))

    lag = 0
    if max_lag > 0:
        xcorr = correlate(processed.astype(np.float64), s, mode="full", method="fft")
        zero = len(s) - 1
        lag = int(np.argmax(xcorr[zero : zero + max_lag + 1]))
    aligned = np.concatenate([processed[lag:], np.zeros(lag, dtype=processed.dtype)])
    return snr(aligned) - snr(noisy)
