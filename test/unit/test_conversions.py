"""Tier 1 tests of omniflow.ros.conversions: messages are built and read without rclpy.init."""

from __future__ import annotations

import array
import sys

import numpy as np
import pytest
from builtin_interfaces.msg import Time
from hypothesis import given
from hypothesis import strategies as st
from sensor_msgs.msg import Image

from omniflow.core.audio_format import FORMAT_F32LE, FORMAT_S16LE
from omniflow.errors import AudioFormatError, ImageFormatError
from omniflow.msg import AudioChunk
from omniflow.ros.conversions import (
    audio_chunk,
    audio_samples,
    header,
    image,
    image_pixels,
    ns_from_time,
    time_from_ns,
)

NS = 1_000_000_000
# Every stamp builtin_interfaces/Time can carry: sec is an int32.
MIN_NS, MAX_NS = -(2**31) * NS, 2**31 * NS - 1

# --- time ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stamp_ns", "sec", "nanosec"),
    [
        (0, 0, 0),
        (1, 0, 1),
        (999_999_999, 0, 999_999_999),
        (1_000_000_000, 1, 0),
        (1_700_000_000_123_456_789, 1_700_000_000, 123_456_789),
        (MAX_NS, 2**31 - 1, 999_999_999),
        (-1, -1, 999_999_999),  # nanosec is never negative
        (MIN_NS, -(2**31), 0),
    ],
)
def test_time_from_ns_splits_into_seconds_and_nanoseconds(
    stamp_ns: int, sec: int, nanosec: int
) -> None:
    stamp = time_from_ns(stamp_ns)
    assert (stamp.sec, stamp.nanosec) == (sec, nanosec)


def test_time_from_ns_accepts_numpy_integers() -> None:
    stamp = time_from_ns(np.int64(2_500_000_000))
    assert (stamp.sec, stamp.nanosec) == (2, 500_000_000)
    assert type(stamp.sec) is int


@given(st.integers(min_value=MIN_NS, max_value=MAX_NS))
def test_ns_time_round_trip(stamp_ns: int) -> None:
    stamp = time_from_ns(stamp_ns)
    assert 0 <= stamp.nanosec < NS
    assert ns_from_time(stamp) == stamp_ns


def test_ns_from_time_reads_a_message_built_by_hand() -> None:
    assert ns_from_time(Time(sec=12, nanosec=34)) == 12_000_000_034


def test_header_carries_stamp_and_frame() -> None:
    msg = header(3_000_000_007, "mic")
    assert (msg.stamp.sec, msg.stamp.nanosec, msg.frame_id) == (3, 7, "mic")


# --- audio ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "shape", "fmt", "channels"),
    [
        (np.int16, (640,), FORMAT_S16LE, 1),
        (np.int16, (640, 2), FORMAT_S16LE, 2),
        (np.float32, (320, 1), FORMAT_F32LE, 1),
        (np.float32, (320, 4), FORMAT_F32LE, 4),
    ],
)
def test_audio_chunk_round_trip(
    dtype: type, shape: tuple[int, ...], fmt: int, channels: int
) -> None:
    rng = np.random.default_rng(0)
    samples = (rng.standard_normal(shape) * 1000).astype(dtype)
    msg = audio_chunk(samples, stamp_ns=5 * NS + 40, frame_id="mic", sample_rate=16000, sequence=42)
    assert isinstance(msg.data, array.array)
    assert msg.data.typecode == "B"
    assert len(msg.data) == samples.size * np.dtype(dtype).itemsize
    assert (msg.format, msg.channels, msg.sample_rate, msg.sequence) == (fmt, channels, 16000, 42)
    assert ns_from_time(msg.header.stamp) == 5 * NS + 40
    assert msg.header.frame_id == "mic"
    np.testing.assert_array_equal(audio_samples(msg), samples.reshape(shape[0], channels))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"format": 9}, "unknown audio format 9"),
        ({"channels": 0}, "0 channels"),
        ({"sample_rate": 0}, "sample_rate 0"),
        ({"data": array.array("B", b"\x00\x01\x02")}, "3 bytes, not a whole number"),
        ({"channels": 2, "data": array.array("B", bytes(6))}, "6 bytes, not a whole number"),
        ({"format": FORMAT_F32LE, "data": array.array("B", bytes(6))}, "F32LE"),
    ],
)
def test_malformed_audio_chunk_raises_audio_format_error(fields: dict, message: str) -> None:
    base = {
        "sample_rate": 16000,
        "channels": 1,
        "format": FORMAT_S16LE,
        "data": array.array("B", bytes(8)),
    }
    msg = AudioChunk(**{**base, **fields})
    with pytest.raises(AudioFormatError, match=message):
        audio_samples(msg)


# --- images --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("encoding", "shape", "dtype"),
    [
        ("rgb8", (4, 5, 3), np.uint8),
        ("bgr8", (3, 7, 3), np.uint8),
        ("mono8", (6, 2), np.uint8),
        ("16UC1", (2, 3), np.uint16),
    ],
)
def test_image_round_trip(encoding: str, shape: tuple[int, ...], dtype: type) -> None:
    rng = np.random.default_rng(1)
    pixels = rng.integers(0, np.iinfo(dtype).max, size=shape, dtype=dtype, endpoint=True)
    msg = image(pixels, encoding, stamp_ns=7 * NS + 1, frame_id="camera")
    assert isinstance(msg.data, array.array)
    assert msg.data.typecode == "B"
    height, width = shape[:2]
    assert (msg.height, msg.width, msg.encoding) == (height, width, encoding)
    assert msg.step == pixels[0].nbytes
    assert len(msg.data) == pixels.nbytes
    assert msg.is_bigendian == int(sys.byteorder == "big")
    assert ns_from_time(msg.header.stamp) == 7 * NS + 1
    assert msg.header.frame_id == "camera"
    np.testing.assert_array_equal(image_pixels(msg), pixels)


def test_padded_rows_of_a_hand_built_message_are_skipped() -> None:
    # 2 x 3 rgb8 (9 bytes a row) sent with step 12: 3 junk bytes end each row.
    rows = [bytes(range(0, 9)) + b"\xee\xee\xee", bytes(range(100, 109)) + b"\xee\xee\xee"]
    msg = Image(
        height=2,
        width=3,
        encoding="rgb8",
        is_bigendian=0,
        step=12,
        data=array.array("B", b"".join(rows)),
    )
    pixels = image_pixels(msg)
    assert pixels.shape == (2, 3, 3)
    np.testing.assert_array_equal(pixels[0].reshape(-1), list(range(0, 9)))
    np.testing.assert_array_equal(pixels[1].reshape(-1), list(range(100, 109)))


def test_big_endian_16_bit_message_is_read_in_native_order() -> None:
    values = np.array([[1, 258], [65535, 4096]], dtype=">u2")
    msg = Image(
        height=2,
        width=2,
        encoding="16UC1",
        is_bigendian=1,
        step=4,
        data=array.array("B", values.tobytes()),
    )
    np.testing.assert_array_equal(image_pixels(msg), [[1, 258], [65535, 4096]])


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"encoding": "yuv9"}, "unsupported image encoding 'yuv9'"),
        ({"step": 5}, "step 5 is smaller than one row"),
        ({"data": array.array("B", bytes(11))}, "11 bytes but step x height = 6 x 2 = 12"),
        ({"height": 0, "data": array.array("B")}, "size must be positive"),
        (
            {"encoding": "16UC1", "width": 3, "step": 7, "data": array.array("B", bytes(14))},
            "not a multiple",
        ),
    ],
)
def test_malformed_image_raises_image_format_error(fields: dict, message: str) -> None:
    base = {
        "height": 2,
        "width": 2,
        "encoding": "rgb8",
        "step": 6,
        "data": array.array("B", bytes(12)),
    }
    msg = Image(**{**base, **fields})
    with pytest.raises(ImageFormatError, match=message):
        image_pixels(msg)


def test_image_refuses_an_array_that_does_not_match_the_encoding() -> None:
    with pytest.raises(ImageFormatError, match="needs an array of shape"):
        image(np.zeros((2, 2), dtype=np.uint8), "rgb8", stamp_ns=0, frame_id="camera")
