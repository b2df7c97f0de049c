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

from omniflow.core.denoise import DelayLine
from omniflow.errors import AudioFormatError, ConfigError

__all__ = [
    "ChunkResampler",
    "SourceRate",
    "StreamResampler",
    "float_to_int16",
    "int16_to_float",
    "resample_int16",
]


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


class ChunkResampler:
    """Mono int16 chunks at ``rate_in`` -> chunks at ``rate_out``, each exactly as long as the
    input chunk's duration (``len * rate_out / rate_in``, rounded over the stream so the
    totals never drift), with a fixed delay (``delay_ns``: the filter's look-ahead, ~1.4 ms
    for 8 -> 16 kHz) instead of the variable lengths of :class:`StreamResampler`.

    For a stream whose chunks are stamped: an 8 kHz microphone's 40 ms chunks of 320 samples
    become 40 ms chunks of 640 samples that keep their stamps and their sequence, so stream
    time and the continuity checks stay as they were (the fusion node's intake).
    """

    def __init__(self, rate_in: int, rate_out: int) -> None:
        self._resampler = StreamResampler(rate_in, rate_out, 1)
        self.rate_in, self.rate_out = rate_in, rate_out
        up, down = self._resampler.up, self._resampler.down
        # Output the resampler holds back at most: its look-ahead and a partial step.
        self._out = DelayLine(math.ceil((self._resampler.pad + down) * up / down))
        self._in_total = 0
        self._out_total = 0

    @property
    def delay_ns(self) -> int:
        return self._out.delay * 1_000_000_000 // self.rate_out

    def process(self, samples: np.ndarray) -> np.ndarray:
        if samples.dtype != np.int16 or samples.ndim != 1:
            raise AudioFormatError(
                f"ChunkResampler takes mono int16 chunks, got {samples.dtype} {samples.shape}"
            )
        self._in_total += len(samples)
        self._out.add(self._resampler.process(int16_to_float(samples)[:, None])[:, 0])
        n = self._in_total * self.rate_out // self.rate_in - self._out_total
        self._out_total += n
        return float_to_int16(self._out.take(n))


class SourceRate:
    """A microphone stream at whatever rate its source runs, as chunks at ``rate_out``.

    A telephone-band source (8 kHz) or a device that cannot do 16 kHz still publishes stamped
    chunks; :meth:`convert` resamples each (:class:`ChunkResampler`: every chunk keeps its
    duration, so its stamp and sequence stay true) and remembers the rate it came at.
    ``band_hz`` is the highest frequency the source can carry (half its rate): below
    ``rate_out / 2`` the speech is band-limited (no fricatives above 4 kHz from an 8 kHz
    source), which the consumer reports. A new rate starts a new resampler.
    """

    def __init__(self, rate_out: int, lowest: int = 8000, highest: int = 48_000) -> None:
        _check_rate("rate_out", rate_out)
        self.rate_out, self.lowest, self.highest = rate_out, lowest, highest
        self.source_rate: int | None = None
        self._resampler: ChunkResampler | None = None

    @property
    def band_hz(self) -> int | None:
        """Half the source's rate, at most half of ``rate_out`` (None before any chunk)."""
        return None if self.source_rate is None else min(self.source_rate, self.rate_out) // 2

    @property
    def band_limited(self) -> bool:
        return self.source_rate is not None and self.source_rate < self.rate_out

    def problem(self, rate: int) -> str | None:
        """Why chunks at ``rate`` cannot be taken, or None."""
        if not self.lowest <= rate <= self.highest:
            return (
                f"sample_rate {rate} Hz; expected {self.lowest}-{self.highest} Hz "
                f"({self.rate_out} Hz best: other rates are resampled)"
            )
        return None

    def convert(self, rate: int, samples: np.ndarray) -> np.ndarray:
        """``samples`` (mono int16 at ``rate``) at ``rate_out``; AudioFormatError for a rate
        outside ``[lowest, highest]``."""
        problem = self.problem(rate)
        if problem is not None:
            raise AudioFormatError(problem)
        if rate != self.source_rate:
            self.source_rate = rate
            self._resampler = None if rate == self.rate_out else ChunkResampler(rate, self.rate_out)
        if self._resampler is None:
            return samples
        return self._resampler.process(samples)

    def reset(self) -> None:
        """Forget the stream (a new one starts with a fresh filter)."""
        self.source_rate = None
        self._resampler = None


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
