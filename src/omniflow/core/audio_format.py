"""Audio sample buffers <-> numpy, for the AudioChunk message's ``format`` and ``data``.

The codes mirror the message constants (``AudioChunk.FORMAT_S16LE`` ...); a test keeps the
two in step. Samples are always little-endian on the wire. No ROS imports.
"""

from __future__ import annotations

import numpy as np

from omniflow.errors import AudioFormatError

FORMAT_S16LE = 1
FORMAT_F32LE = 2

_DTYPES = {FORMAT_S16LE: np.dtype("<i2"), FORMAT_F32LE: np.dtype("<f4")}
_NAMES = {FORMAT_S16LE: "S16LE", FORMAT_F32LE: "F32LE"}


def format_of(samples: np.ndarray) -> int:
    """The wire format code for an int16 or float32 array."""
    if samples.dtype == np.int16:
        return FORMAT_S16LE
    if samples.dtype == np.float32:
        return FORMAT_F32LE
    raise AudioFormatError(f"samples must be int16 or float32, not {samples.dtype}")


def encode(samples: np.ndarray) -> tuple[int, np.ndarray]:
    """Return ``(format, data)``: data is the interleaved little-endian bytes as a uint8 array.

    ``samples`` has shape (frames,) or (frames, channels).
    """
    fmt = format_of(samples)
    wire = np.ascontiguousarray(samples, dtype=_DTYPES[fmt])
    return fmt, wire.reshape(-1).view(np.uint8)


def decode(data: object, fmt: int, channels: int, sample_rate: int) -> np.ndarray:
    """Return the samples of a chunk as an array of shape (frames, channels), native order.

    Raises AudioFormatError saying what is inconsistent: an unknown format, no channels,
    a zero sample rate, or a byte count that is not a whole number of frames.
    """
    if fmt not in _DTYPES:
        allowed = ", ".join(f"{code} ({name})" for code, name in _NAMES.items())
        raise AudioFormatError(f"unknown audio format {fmt}; supported: {allowed}")
    if channels < 1:
        raise AudioFormatError(f"audio chunk has {channels} channels; expected 1 or more")
    if sample_rate <= 0:
        raise AudioFormatError(
            f"audio chunk has sample_rate {sample_rate}; expected a positive rate in Hz"
        )
    raw = np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8)
    frame_bytes = _DTYPES[fmt].itemsize * channels
    if raw.size % frame_bytes:
        raise AudioFormatError(
            f"audio chunk has {raw.size} bytes, not a whole number of {_NAMES[fmt]} frames of "
            f"{channels} channel(s) ({frame_bytes} bytes each)"
        )
    samples = raw.view(_DTYPES[fmt]).reshape(-1, channels)
    return samples.astype(samples.dtype.newbyteorder("="), copy=False)
