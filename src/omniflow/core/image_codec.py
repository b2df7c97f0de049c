"""Conversion between numpy images and the fields of ``sensor_msgs/Image``.

This is omniflow's replacement for ``cv_bridge``, which is not installable from
PyPI. It is pure numpy and knows nothing about ROS: a node copies the message
fields into :func:`decode` and the fields of an :class:`EncodedImage` from
:func:`encode` back into a message, so everything here is testable without
``rclpy``.

Encoding names are those of ``sensor_msgs/image_encodings.hpp``. Decoding is
zero-copy whenever the buffer is already in native byte order (row padding is
skipped with strides rather than copied away); every malformed message is
rejected with an :class:`~omniflow.errors.ImageFormatError` that says what was
wrong and what was expected.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from omniflow.errors import ImageFormatError

__all__ = [
    "COLOR_ENCODINGS",
    "ENCODINGS",
    "EncodedImage",
    "PixelFormat",
    "convert",
    "decode",
    "encode",
    "pixel_format",
]

_NATIVE_BIG_ENDIAN = sys.byteorder == "big"


@dataclass(frozen=True)
class PixelFormat:
    """Memory layout of one encoding: interleaved channels of one numpy dtype."""

    channels: int
    dtype: np.dtype

    @property
    def pixel_bytes(self) -> int:
        """Bytes one pixel occupies (all channels)."""
        return self.channels * self.dtype.itemsize


def _build_table() -> dict[str, PixelFormat]:
    table: dict[str, PixelFormat] = {}
    u8, u16 = np.dtype(np.uint8), np.dtype(np.uint16)
    for name, channels, dtype in (
        ("rgb8", 3, u8),
        ("bgr8", 3, u8),
        ("rgba8", 4, u8),
        ("bgra8", 4, u8),
        ("rgb16", 3, u16),
        ("bgr16", 3, u16),
        ("rgba16", 4, u16),
        ("bgra16", 4, u16),
        ("mono8", 1, u8),
        ("mono16", 1, u16),
    ):
        table[name] = PixelFormat(channels, dtype)
    # Raw Bayer mosaics are single-channel images; demosaicing is not our job.
    for pattern in ("rggb", "bggr", "gbrg", "grbg"):
        table[f"bayer_{pattern}8"] = PixelFormat(1, u8)
        table[f"bayer_{pattern}16"] = PixelFormat(1, u16)
    # The OpenCV-style generic names: <depth>C<channels>.
    for depth, dtype in (
        ("8U", np.uint8),
        ("8S", np.int8),
        ("16U", np.uint16),
        ("16S", np.int16),
        ("32S", np.int32),
        ("32F", np.float32),
        ("64F", np.float64),
    ):
        for channels in (1, 2, 3, 4):
            table[f"{depth}C{channels}"] = PixelFormat(channels, np.dtype(dtype))
    return table


ENCODINGS: Mapping[str, PixelFormat] = MappingProxyType(_build_table())
"""Every supported encoding name mapped to its layout (dtypes in native byte order)."""

COLOR_ENCODINGS: tuple[str, ...] = ("rgb8", "bgr8", "rgba8", "bgra8", "mono8")
"""The 8-bit colour family :func:`convert` translates between."""

# Channel order of each colour encoding, as letters; mono8 is luma only.
_CHANNEL_ORDER: Mapping[str, str] = MappingProxyType(
    {"rgb8": "RGB", "bgr8": "BGR", "rgba8": "RGBA", "bgra8": "BGRA", "mono8": "Y"}
)

# ITU-R BT.601 luma weights in 14-bit fixed point (they sum to 2**14, so white stays
# 255): the integers OpenCV's portable code path uses for COLOR_*2GRAY.
_LUMA_SHIFT = 14
_LUMA_WEIGHTS: Mapping[str, int] = MappingProxyType({"R": 4899, "G": 9617, "B": 1868})


@dataclass(frozen=True, eq=False)
class EncodedImage:
    """The fields of a ``sensor_msgs/Image`` apart from the header.

    ``data`` is a read-only, C-contiguous, one-dimensional ``uint8`` array of
    exactly ``step * height`` bytes, ready for ``array.array('B').frombytes``.
    It may share memory with the array given to :func:`encode`, so that array
    must not be modified while the message is being built. (``eq=False``
    because comparing numpy arrays with ``==`` has no single truth value.)
    """

    height: int
    width: int
    encoding: str
    is_bigendian: bool
    step: int
    data: np.ndarray


def pixel_format(encoding: str) -> PixelFormat:
    """Return the layout of ``encoding`` or raise ImageFormatError listing the known ones."""
    try:
        return ENCODINGS[encoding]
    except (KeyError, TypeError):
        raise ImageFormatError(
            f"unsupported image encoding {encoding!r}; supported: {', '.join(sorted(ENCODINGS))}"
        ) from None


def _check_array(array: np.ndarray, encoding: str, fmt: PixelFormat) -> None:
    """Raise ImageFormatError unless ``array`` has the shape and dtype ``encoding`` needs."""
    expected_shape = "(H, W) or (H, W, 1)" if fmt.channels == 1 else f"(H, W, {fmt.channels})"
    channels = array.shape[2] if array.ndim == 3 else 1
    if array.ndim not in (2, 3) or channels != fmt.channels:
        raise ImageFormatError(
            f"encoding {encoding!r} needs an array of shape {expected_shape}; "
            f"got shape {array.shape}"
        )
    if array.dtype.newbyteorder("=") != fmt.dtype:
        raise ImageFormatError(
            f"encoding {encoding!r} needs dtype {fmt.dtype.name}; got {array.dtype.name} "
            "(convert explicitly; encode() never rescales values)"
        )
    if array.shape[0] == 0 or array.shape[1] == 0:
        raise ImageFormatError(f"image must not be empty; got shape {array.shape}")


def encode(array: np.ndarray, encoding: str) -> EncodedImage:
    """Lay ``array`` out as ``sensor_msgs/Image`` fields in ``encoding``.

    ``array`` must already be in the encoding: (H, W, C) with C the encoding's
    channel count ((H, W) is accepted for one channel) and exactly its dtype;
    nothing is rescaled or reordered (see :func:`convert` for that). Rows are
    packed without padding, so ``step = width * channels * itemsize``, and
    multi-byte values are written in the machine's byte order, which
    ``is_bigendian`` reports. At most one copy is made: none when the array is
    C-contiguous and native-endian already.
    """
    fmt = pixel_format(encoding)
    if not isinstance(array, np.ndarray):
        raise ImageFormatError(f"encode() needs a numpy array; got {type(array).__name__}")
    _check_array(array, encoding, fmt)
    height, width = int(array.shape[0]), int(array.shape[1])
    packed = np.asarray(array, dtype=fmt.dtype, order="C")  # copies only if needed
    data = packed.reshape(-1).view(np.uint8)
    data.flags.writeable = False  # guards the view, never the caller's array
    return EncodedImage(
        height=height,
        width=width,
        encoding=encoding,
        is_bigendian=_NATIVE_BIG_ENDIAN,
        step=width * fmt.pixel_bytes,
        data=data,
    )


def _as_byte_array(data: Any) -> np.ndarray:
    """View any bytes-like ``data`` as a flat uint8 array without copying."""
    if isinstance(data, np.ndarray):
        if data.dtype != np.uint8:
            raise ImageFormatError(
                f"image data must be bytes-like or a uint8 array; got a {data.dtype.name} array"
            )
        return data.reshape(-1)
    try:
        return np.frombuffer(data, dtype=np.uint8)
    except (TypeError, ValueError) as err:
        raise ImageFormatError(
            "image data must be a bytes-like buffer (bytes, array.array('B'), memoryview or a "
            f"uint8 array); got {type(data).__name__}: {err}"
        ) from err


def decode(
    height: int,
    width: int,
    encoding: str,
    is_bigendian: bool | int,
    step: int,
    data: Any,
    *,
    copy: bool = False,
) -> np.ndarray:
    """Return the pixels of a ``sensor_msgs/Image`` as an (H, W) or (H, W, C) array.

    One-channel encodings give (H, W); others (H, W, C) in the encoding's own
    channel order. ``data`` may be ``bytes``, ``array.array('B')`` (what rclpy
    gives for ``uint8[]``), a ``memoryview`` or a uint8 numpy array.

    Row padding (``step`` larger than a row) is skipped through strides and
    multi-byte values sent in the other byte order are swapped to native order.
    Without ``copy`` the result is a read-only view of ``data`` whenever no byte
    swap is needed, so decoding costs nothing and cannot alter the message by
    accident; it is read-only in the byte-swapped case too, so callers see one
    behaviour. With ``copy=True`` the result is an owned, writable,
    C-contiguous array (still at most one copy).

    Raises ImageFormatError for an unknown encoding, an empty image, a step
    shorter than a row or not a whole number of channel values, or a buffer
    whose length is not ``step * height``.
    """
    fmt = pixel_format(encoding)
    height, width, step = int(height), int(width), int(step)
    if height <= 0 or width <= 0:
        raise ImageFormatError(f"image size must be positive; got width={width}, height={height}")
    row_bytes = width * fmt.pixel_bytes
    if step < row_bytes:
        raise ImageFormatError(
            f"step {step} is smaller than one row: {width} px x {fmt.pixel_bytes} B "
            f"({encoding}) = {row_bytes} B"
        )
    itemsize = fmt.dtype.itemsize
    if height > 1 and step % itemsize != 0:
        raise ImageFormatError(
            f"step {step} is not a multiple of the {itemsize}-byte channel value of "
            f"{encoding!r}, so rows after the first would start mid-value"
        )
    buffer = _as_byte_array(data)
    expected = step * height
    if buffer.size != expected:
        raise ImageFormatError(
            f"image data has {buffer.size} bytes but step x height = {step} x {height} = "
            f"{expected} were expected"
        )

    swap = itemsize > 1 and bool(is_bigendian) != _NATIVE_BIG_ENDIAN
    dtype = fmt.dtype.newbyteorder("S") if swap else fmt.dtype
    shape: tuple[int, ...] = (height, width)
    strides: tuple[int, ...] = (step, fmt.pixel_bytes)
    if fmt.channels > 1:
        shape += (fmt.channels,)
        strides += (itemsize,)
    # A strided view over the message bytes: padding is skipped, nothing copied.
    image = np.ndarray(shape, dtype=dtype, buffer=buffer, strides=strides)
    if swap:
        image = image.astype(fmt.dtype, order="C")  # the swap is the one copy
    elif copy:
        image = np.array(image, order="C")
    if not copy:
        image.flags.writeable = False
    return image


def _channel_order(encoding: str) -> str:
    try:
        return _CHANNEL_ORDER[encoding]
    except (KeyError, TypeError):
        raise ImageFormatError(
            f"convert() handles the 8-bit colour family {', '.join(COLOR_ENCODINGS)}; "
            f"{encoding!r} is not one of them"
        ) from None


def convert(array: np.ndarray, from_encoding: str, to_encoding: str) -> np.ndarray:
    """Convert an image between the 8-bit colour encodings rgb8, bgr8, rgba8, bgra8, mono8.

    Colour to colour reorders channels; alpha is dropped, or set to 255
    (opaque) when the target has alpha and the source has none. Colour to mono8
    computes ITU-R BT.601 luma (0.299 R + 0.587 G + 0.114 B, rounded to
    nearest in 14-bit fixed point) and ignores alpha; mono8 to colour
    replicates the luma. mono8 is returned as (H, W).

    When both encodings are the same, ``array`` itself is returned (validated,
    not copied); otherwise the result is a new C-contiguous array.
    """
    source, target = _channel_order(from_encoding), _channel_order(to_encoding)
    if not isinstance(array, np.ndarray):
        raise ImageFormatError(f"convert() needs a numpy array; got {type(array).__name__}")
    _check_array(array, from_encoding, ENCODINGS[from_encoding])
    if from_encoding == to_encoding:
        return array

    if source == "Y":
        luma = array.reshape(array.shape[:2])
        planes = [luma if ch != "A" else np.full_like(luma, 255) for ch in target]
        return np.stack(planes, axis=-1)
    if target == "Y":
        acc = np.zeros(array.shape[:2], dtype=np.uint32)
        for ch, weight in _LUMA_WEIGHTS.items():
            acc += array[..., source.index(ch)].astype(np.uint32) * weight
        acc += 1 << (_LUMA_SHIFT - 1)  # round to nearest
        return (acc >> _LUMA_SHIFT).astype(np.uint8)
    # Channel by channel into a fresh C-contiguous array (fancy indexing would
    # return a non-contiguous one); alpha missing from the source becomes opaque.
    out = np.empty(array.shape[:2] + (len(target),), dtype=np.uint8)
    for i, ch in enumerate(target):
        out[..., i] = array[..., source.index(ch)] if ch in source else 255
    return out
