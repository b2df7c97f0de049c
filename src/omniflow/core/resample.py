"""Sample-rate conversion for audio streams and whole buffers (pure, no ROS, no devices).

Two users: audio *sources* resample a file's rate to the capture rate chunk by
chunk (:class:`StreamResampler`, so hour-long files never sit in memory), and
the speech path resamples synthesised speech (espeak-ng 22.05 kHz, piper
22.05 kHz) to whatever rate the audio sink runs at (:func:`resample_int16`,
or a :class:`StreamResampler` when a phrase arrives in pieces). Both use
``scipy.signal.resample_poly`` with its default Kaiser-windowed filter, so a
streamed conversion equals the whole-buffer one sample for sample.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.signal import resample_poly

from omniflow.errors import AudioFormatError, ConfigError

__all__ = ["StreamResampler", "float_to_int16", "int16_to_float", "resample_int16"]


def _check_rate(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{name} must be a positive integer (Hz), got {value!r}")


class StreamResampler:
    """Polyphase resampling of a stream in chunks, identical to one whole-signal call.

    ``scipy.signal.resample_poly`` treats the signal as zero outside its ends.
    Each chunk is processed with ``pad`` input samples of real context on
    both sides (a multiple of ``down``, wider than the filter's reach), and
    only the outputs belonging to the chunk are kept, so chunk boundaries
    leave no trace: the result equals ``resample_poly(whole_file)`` sample for
    sample. The carry between chunks is ``pad`` samples of history plus the
    unprocessed tail.
    """

    def __init__(self, rate_in: int, rate_out: int, channels: int) -> None:
        _check_rate("rate_in", rate_in)
        _check_rate("rate_out", rate_out)
        g = math.gcd(rate_in, rate_out)
        self.up = rate_out // g
        self.down = rate_in // g
        # resample_poly's default filter has half-length 10 * max(up, down) at the
        # upsampled rate, i.e. that divided by `up` input samples.
        reach = math.ceil(10 * max(self.up, self.down) / self.up) + 1
        self.pad = math.ceil(reach / self.down) * self.down
        self._channels = channels
        self._history = np.zeros((self.pad, channels), dtype=np.float32)
        self._pending = np.zeros((0, channels), dtype=np.float32)
        self._in_total = 0
        self._out_total = 0

    def process(self, chunk: np.ndarray, final: bool = False) -> np.ndarray:
        """Feed float samples ``(n, channels)``; return the outputs now computable."""
        self._pending = np.concatenate([self._pending, chunk])
        self._in_total += len(chunk)
        if final:
            n = math.ceil(len(self._pending) / self.down) * self.down
            zeros = np.zeros((n - len(self._pending) + self.pad, self._channels), np.float32)
            tail = np.concatenate([self._pending, zeros])
            body, right = tail[:n], tail[n:]
        else:
            n = (len(self._pending) - self.pad) // self.down * self.down
            if n <= 0:
                return np.zeros((0, self._channels), dtype=np.float32)
            body, right = self._pending[:n], self._pending[n : n + self.pad]
        segment = np.concatenate([self._history, body, right])
        out = resample_poly(segment, self.up, self.down, axis=0)
        start = self.pad * self.up // self.down
        out = out[start : start + n * self.up // self.down]
        self._history = np.concatenate([self._history, body])[-self.pad :]
        self._pending = self._pending[n:]
        if final:
            out = out[: math.ceil(self._in_total * self.up / self.down) - self._out_total]
        self._out_total += len(out)
        return out.astype(np.float32, copy=False)


def int16_to_float(samples: np.ndarray) -> np.ndarray:
    """int16 samples to float32 in [-1, 1), the scale the resampler works in."""
    return samples.astype(np.float32) / 32768.0


def float_to_int16(samples: np.ndarray) -> np.ndarray:
    """Float samples in [-1, 1) to int16, rounded and clipped (libsndfile's scaling)."""
    return np.clip(np.rint(samples * 32768.0), -32768, 32767).astype(np.int16)


def resample_int16(samples: np.ndarray, rate_in: int, rate_out: int) -> np.ndarray:
    """Resample a whole int16 buffer (1-D mono, or ``(frames, channels)``) to ``rate_out``.

    For audio that is complete in memory, e.g. one synthesised phrase about to
    be written to a sink running at another rate. The output has
    ``ceil(frames * rate_out / rate_in)`` frames and the input's shape
    otherwise; values are rounded and clipped back to int16 (the polyphase
    filter can overshoot full scale slightly on clipped input). Equal rates
    return a copy, so the caller may always modify the result.

    Raises:
        AudioFormatError: ``samples`` is not int16 or has more than two dimensions.
        ConfigError: a rate is not a positive integer.
    """
    _check_rate("rate_in", rate_in)
    _check_rate("rate_out", rate_out)
    if samples.dtype != np.int16 or samples.ndim not in (1, 2):
        raise AudioFormatError(
            f"resample_int16 needs int16 samples shaped (frames,) or (frames, channels), "
            f"got {samples.dtype} {samples.shape}"
        )
    if rate_in == rate_out or len(samples) == 0:
        return samples.copy()
    g = math.gcd(rate_in, rate_out)
    out = resample_poly(samples.astype(np.float32), rate_out // g, rate_in // g, axis=0)
    return np.clip(np.rint(out), -32768, 32767).astype(np.int16)
