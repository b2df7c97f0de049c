"""Tier 1 tests of omniflow.core.image_codec (no ROS): layouts, round trips, errors."""

from __future__ import annotations

import array
import sys

import cv2
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from omniflow.core.image_codec import (
    COLOR_ENCODINGS,
    ENCODINGS,
    PixelFormat,
    convert,
    decode,
    encode,
    pixel_format,
)
from omniflow.errors import ImageFormatError

NATIVE_BIG = sys.byteorder == "big"
ALL_ENCODINGS = sorted(ENCODINGS)
MULTI_BYTE = [name for name in ALL_ENCODINGS if ENCODINGS[name].dtype.itemsize > 1]


def random_image(rng: np.random.Generator, fmt: PixelFormat, height: int, width: int):
    """An image in ``fmt`` spanning its whole value range (floats: no NaN, so == works)."""
    shape = (height, width) if fmt.channels == 1 else (height, width, fmt.channels)
    if fmt.dtype.kind == "f":
        return (rng.standard_normal(shape) * 1e3).astype(fmt.dtype)
    info = np.iinfo(fmt.dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=fmt.dtype, endpoint=True)


def message_bytes(image: np.ndarray, step: int, bigendian: bool) -> bytes:
    """Lay out ``image`` like a foreign producer: chosen byte order, rows padded to ``step``."""
    height = image.shape[0]
    ordered = image.astype(image.dtype.newbyteorder(">" if bigendian else "<"))
    rows = np.ascontiguousarray(ordered).reshape(height, -1).view(np.uint8)
    padded = np.full((height, step), 0xAB, dtype=np.uint8)  # junk in the padding
    padded[:, : rows.shape[1]] = rows
    return padded.tobytes()


# --- the table ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("encoding", "channels", "dtype"),
    [
        ("rgb8", 3, np.uint8),
        ("bgr8", 3, np.uint8),
        ("rgba8", 4, np.uint8),
        ("bgra8", 4, np.uint8),
        ("mono8", 1, np.uint8),
        ("mono16", 1, np.uint16),
        ("8UC1", 1, np.uint8),
        ("8UC3", 3, np.uint8),
        ("8UC4", 4, np.uint8),
        ("16UC1", 1, np.uint16),
        ("16SC1", 1, np.int16),
        ("32FC1", 1, np.float32),
        ("64FC1", 1, np.float64),
        ("bayer_rggb8", 1, np.uint8),
    ],
)
def test_table_has_the_required_encodings(encoding, channels, dtype):
    assert pixel_format(encoding) == PixelFormat(channels, np.dtype(dtype))


def test_table_dtypes_are_native_byte_order():
    assert all(fmt.dtype.isnative for fmt in ENCODINGS.values())


# --- encode ----------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ALL_ENCODINGS)
def test_round_trip_every_encoding(encoding):
    fmt = ENCODINGS[encoding]
    image = random_image(np.random.default_rng(7), fmt, 5, 7)

    encoded = encode(image, encoding)

    assert (encoded.height, encoded.width, encoded.encoding) == (5, 7, encoding)
    assert encoded.step == 7 * fmt.channels * fmt.dtype.itemsize
    assert encoded.is_bigendian is NATIVE_BIG
    assert encoded.data.dtype == np.uint8 and encoded.data.ndim == 1
    assert encoded.data.flags.c_contiguous and encoded.data.size == encoded.step * 5
    as_message = array.array("B")
    as_message.frombytes(encoded.data)  # what a node does to fill sensor_msgs/Image.data
    decoded = decode(5, 7, encoding, encoded.is_bigendian, encoded.step, as_message)
    assert decoded.dtype == fmt.dtype
    np.testing.assert_array_equal(decoded, image)


def test_encode_accepts_trailing_single_channel_axis():
    image = np.arange(12, dtype=np.uint16).reshape(3, 4, 1)
    encoded = encode(image, "mono16")
    np.testing.assert_array_equal(decode(3, 4, "mono16", False, 8, encoded.data), image[..., 0])


def test_encode_shares_memory_with_contiguous_native_input():
    image = np.zeros((4, 6, 3), dtype=np.uint8)
    encoded = encode(image, "bgr8")
    assert np.shares_memory(encoded.data, image)
    assert not encoded.data.flags.writeable
    assert image.flags.writeable  # the caller's array is left alone


def test_encode_packs_a_strided_view():
    full = np.arange(6 * 8 * 3, dtype=np.uint8).reshape(6, 8, 3)
    crop = full[1:5, 2:7]  # not contiguous
    encoded = encode(crop, "rgb8")
    assert encoded.step == 5 * 3
    np.testing.assert_array_equal(decode(4, 5, "rgb8", False, 15, encoded.data), crop)


def test_encode_writes_non_native_input_in_native_order():
    foreign = np.array([[1, 258], [4097, 65535]], dtype=np.dtype(np.uint16).newbyteorder("S"))
    encoded = encode(foreign, "16UC1")
    assert encoded.is_bigendian is NATIVE_BIG
    np.testing.assert_array_equal(encoded.data.view(np.uint16).reshape(2, 2), foreign)


@pytest.mark.parametrize(
    ("image", "encoding", "fragments"),
    [
        (np.zeros((4, 5), np.uint8), "rgb8", ["'rgb8'", "(H, W, 3)", "got shape (4, 5)"]),
        (np.zeros((4, 5, 4), np.uint8), "bgr8", ["(H, W, 3)", "got shape (4, 5, 4)"]),
        (np.zeros((4, 5, 3), np.uint8), "mono8", ["(H, W) or (H, W, 1)", "(4, 5, 3)"]),
        (np.zeros(20, np.uint8), "mono8", ["got shape (20,)"]),
        (np.zeros((4, 5), np.uint8), "mono16", ["'mono16' needs dtype uint16", "got uint8"]),
        (np.zeros((4, 5), np.float64), "32FC1", ["needs dtype float32", "got float64"]),
        (np.zeros((0, 5, 3), np.uint8), "rgb8", ["must not be empty", "(0, 5, 3)"]),
        (np.zeros((4, 5), np.uint8), "yuv9", ["unsupported image encoding 'yuv9'", "mono8"]),
        ([[1, 2], [3, 4]], "mono8", ["needs a numpy array", "list"]),
    ],
)
def test_encode_rejects_with_a_precise_message(image, encoding, fragments):
    with pytest.raises(ImageFormatError) as info:
        encode(image, encoding)
    for fragment in fragments:
        assert fragment in str(info.value)


# --- decode ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("encoding", "height", "width", "padding"),
    [
        ("rgb8", 4, 5, 1),  # 15-byte rows padded to 16, the usual 4-byte alignment
        ("bgr8", 3, 3, 7),
        ("mono8", 6, 3, 5),
        ("rgba8", 2, 3, 4),
        ("mono16", 4, 3, 2),
        ("16SC1", 3, 5, 6),
        ("32FC1", 3, 3, 4),
        ("32FC3", 2, 2, 12),
        ("64FC1", 2, 5, 8),
    ],
)
def test_decode_skips_row_padding_without_copying(encoding, height, width, padding):
    fmt = ENCODINGS[encoding]
    image = random_image(np.random.default_rng(3), fmt, height, width)
    step = width * fmt.pixel_bytes + padding
    buffer = np.frombuffer(message_bytes(image, step, NATIVE_BIG), dtype=np.uint8)

    decoded = decode(height, width, encoding, NATIVE_BIG, step, buffer)

    assert decoded.shape == image.shape
    np.testing.assert_array_equal(decoded, image)
    assert np.shares_memory(decoded, buffer)


@pytest.mark.parametrize(
    ("encoding", "values"),
    [
        ("mono16", [[0x0102, 0xA0B0], [0xFFFF, 0]]),
        ("16UC1", [[1, 256], [4096, 65280]]),
        ("16SC1", [[-1, -32768], [32767, 2]]),
        ("32SC1", [[-70000, 1], [2**31 - 1, -(2**31)]]),
        ("32FC1", [[1.5, -0.25], [3.0e38, 1.0e-7]]),
        ("64FC1", [[np.pi, -np.e], [1.0e300, -0.0]]),
        ("rgb16", [[[1, 2, 3], [256, 512, 65535]]]),
    ],
)
def test_decode_big_endian_data(encoding, values):
    expected = np.array(values, dtype=ENCODINGS[encoding].dtype)
    height, width = expected.shape[:2]
    step = width * ENCODINGS[encoding].pixel_bytes
    data = expected.astype(expected.dtype.newbyteorder(">")).tobytes()

    decoded = decode(height, width, encoding, True, step, data)

    assert decoded.dtype == ENCODINGS[encoding].dtype and decoded.dtype.isnative
    np.testing.assert_array_equal(decoded, expected)


def test_decode_big_endian_with_padding():
    expected = np.array([[1, 2, 3], [400, 500, 600]], dtype=np.uint16)
    decoded = decode(2, 3, "mono16", True, 10, message_bytes(expected, 10, bigendian=True))
    np.testing.assert_array_equal(decoded, expected)
    assert decoded.flags.c_contiguous


def test_decode_ignores_byte_order_for_8_bit_data():
    data = bytes(range(12))
    little = decode(2, 2, "rgb8", False, 6, data)
    big = decode(2, 2, "rgb8", True, 6, data)
    np.testing.assert_array_equal(little, big)


@pytest.mark.parametrize(
    "make_buffer",
    [
        bytes,
        bytearray,
        memoryview,
        lambda raw: array.array("B", raw),
        lambda raw: np.frombuffer(raw, dtype=np.uint8),
    ],
    ids=["bytes", "bytearray", "memoryview", "array.array", "ndarray"],
)
def test_decode_accepts_any_byte_buffer(make_buffer):
    raw = bytes(range(24))
    decoded = decode(2, 4, "rgb8", False, 12, make_buffer(raw))
    np.testing.assert_array_equal(decoded.reshape(-1), np.arange(24, dtype=np.uint8))


def test_decode_result_is_read_only_view_unless_copied():
    message = array.array("B", bytes(range(12)))
    view = decode(2, 2, "bgr8", False, 6, message)
    assert not view.flags.writeable  # writing would alter the message
    owned = decode(2, 2, "bgr8", False, 6, message, copy=True)
    assert owned.flags.writeable and owned.flags.owndata and owned.flags.c_contiguous
    owned[:] = 0
    assert message[5] == 5


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (
            (2, 2, "yuv9", False, 6, bytes(12)),
            ["unsupported image encoding 'yuv9'", "rgb8", "mono16", "32FC1"],
        ),
        ((2, 0, "rgb8", False, 6, b""), ["must be positive", "width=0, height=2"]),
        ((0, 2, "rgb8", False, 6, b""), ["must be positive", "height=0"]),
        ((2, 2, "rgb8", False, 5, bytes(10)), ["step 5 is smaller than one row", "= 6 B"]),
        ((2, 3, "mono16", False, 5, bytes(10)), ["step 5 is smaller", "= 6 B"]),
        ((2, 2, "rgb8", False, 6, bytes(10)), ["has 10 bytes", "6 x 2 = 12"]),
        ((2, 2, "rgb8", False, 6, bytes(13)), ["has 13 bytes", "= 12"]),
        (
            (2, 2, "mono16", False, 5, bytes(10)),
            ["step 5 is not a multiple of the 2-byte", "'mono16'"],
        ),
        ((2, 2, "32FC1", False, 10, bytes(20)), ["not a multiple of the 4-byte"]),
        ((2, 2, "mono8", False, 2, [0, 1, 2, 3]), ["bytes-like", "list"]),
        ((1, 1, "mono8", False, 1, np.zeros(1, np.float32)), ["float32 array"]),
    ],
)
def test_decode_rejects_with_a_precise_message(args, fragments):
    with pytest.raises(ImageFormatError) as info:
        decode(*args)
    for fragment in fragments:
        assert fragment in str(info.value)


def test_decode_allows_odd_step_for_a_single_row():
    # With one row the step never positions a value, so it is not a layout error.
    decoded = decode(1, 2, "mono16", False, 5, bytes([1, 0, 2, 0, 0xFF]))
    np.testing.assert_array_equal(decoded, [[1, 2]])


@settings(max_examples=150, deadline=None)
@given(
    encoding=st.sampled_from(ALL_ENCODINGS),
    height=st.integers(1, 12),
    width=st.integers(1, 12),
    padding_values=st.integers(0, 9),
    bigendian=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_decode_recovers_any_padded_layout(
    encoding, height, width, padding_values, bigendian, seed
):
    fmt = ENCODINGS[encoding]
    image = random_image(np.random.default_rng(seed), fmt, height, width)
    step = width * fmt.pixel_bytes + padding_values * fmt.dtype.itemsize
    data = message_bytes(image, step, bigendian)

    decoded = decode(height, width, encoding, bigendian, step, data)

    assert decoded.dtype == fmt.dtype and decoded.shape == image.shape
    np.testing.assert_array_equal(decoded, image)
    np.testing.assert_array_equal(decode(**vars(encode(decoded, encoding))), image)


# --- convert ---------------------------------------------------------------------------

RED_RGB = np.array([[[255, 0, 0], [10, 20, 30]]], dtype=np.uint8)


@pytest.mark.parametrize(
    ("source", "target", "expected"),
    [
        ("rgb8", "bgr8", [[[0, 0, 255], [30, 20, 10]]]),
        ("rgb8", "rgba8", [[[255, 0, 0, 255], [10, 20, 30, 255]]]),
        ("rgb8", "bgra8", [[[0, 0, 255, 255], [30, 20, 10, 255]]]),
        ("rgb8", "mono8", [[76, 18]]),  # 0.299*255 = 76.2; 0.299*10+0.587*20+0.114*30 = 18.2
    ],
)
def test_convert_from_rgb(source, target, expected):
    np.testing.assert_array_equal(convert(RED_RGB, source, target), expected)


@pytest.mark.parametrize(
    ("source", "image", "target", "expected"),
    [
        ("bgra8", [[[1, 2, 3, 4]]], "rgb8", [[[3, 2, 1]]]),
        ("bgra8", [[[1, 2, 3, 4]]], "rgba8", [[[3, 2, 1, 4]]]),
        ("rgba8", [[[1, 2, 3, 0]]], "bgr8", [[[3, 2, 1]]]),
        ("bgr8", [[[255, 255, 255]]], "mono8", [[255]]),
        ("bgr8", [[[255, 0, 0]]], "mono8", [[29]]),  # blue only: 0.114*255 = 29.1
        ("bgr8", [[[0, 255, 0]]], "mono8", [[150]]),  # green only: 0.587*255 = 149.7
        ("mono8", [[7, 200]], "bgr8", [[[7, 7, 7], [200, 200, 200]]]),
        ("mono8", [[[7]]], "rgba8", [[[7, 7, 7, 255]]]),
    ],
)
def test_convert_table(source, image, target, expected):
    result = convert(np.array(image, dtype=np.uint8), source, target)
    np.testing.assert_array_equal(result, expected)
    assert result.flags.c_contiguous


@pytest.mark.parametrize(
    ("source", "code"),
    [
        ("rgb8", cv2.COLOR_RGB2GRAY),
        ("bgr8", cv2.COLOR_BGR2GRAY),
        ("rgba8", cv2.COLOR_RGBA2GRAY),
        ("bgra8", cv2.COLOR_BGRA2GRAY),
    ],
)
def test_convert_luma_agrees_with_opencv(source, code):
    # Same BT.601 weights; OpenCV builds with IPP may round differently by one level.
    image = random_image(np.random.default_rng(11), ENCODINGS[source], 31, 17)
    difference = convert(image, source, "mono8").astype(int) - cv2.cvtColor(image, code)
    assert np.abs(difference).max() <= 1


@pytest.mark.parametrize("source", COLOR_ENCODINGS)
@pytest.mark.parametrize("target", COLOR_ENCODINGS)
def test_convert_every_pair_has_the_target_layout(source, target):
    image = random_image(np.random.default_rng(5), ENCODINGS[source], 3, 4)
    result = convert(image, source, target)
    expected_shape = (3, 4) if target == "mono8" else (3, 4, ENCODINGS[target].channels)
    assert result.shape == expected_shape and result.dtype == np.uint8


def test_convert_same_encoding_returns_the_input():
    image = np.zeros((2, 2, 3), np.uint8)
    assert convert(image, "bgr8", "bgr8") is image


@pytest.mark.parametrize(
    ("image", "source", "target", "fragments"),
    [
        (np.zeros((2, 2), np.uint16), "mono16", "rgb8", ["colour family", "'mono16' is not"]),
        (np.zeros((2, 2, 3), np.uint8), "rgb8", "8UC3", ["rgb8, bgr8", "'8UC3' is not"]),
        (np.zeros((2, 2, 3), np.uint8), "rgba8", "rgb8", ["'rgba8' needs", "(H, W, 4)"]),
        (np.zeros((2, 2, 3), np.float32), "rgb8", "bgr8", ["needs dtype uint8", "float32"]),
    ],
)
def test_convert_rejects_with_a_precise_message(image, source, target, fragments):
    with pytest.raises(ImageFormatError) as info:
        convert(image, source, target)
    for fragment in fragments:
        assert fragment in str(info.value)
