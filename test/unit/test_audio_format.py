"""Tier 1 tests of omniflow.core.audio_format: wire codes, round trips, error messages."""

from __future__ import annotations

import array

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from omniflow.core.audio_format import FORMAT_F32LE, FORMAT_S16LE, decode, encode, format_of
from omniflow.errors import AudioFormatError
from omniflow.msg import AudioChunk


def test_codes_equal_the_message_constants() -> None:
    assert FORMAT_S16LE == AudioChunk.FORMAT_S16LE
    assert FORMAT_F32LE == AudioChunk.FORMAT_F32LE


@pytest.mark.parametrize(("dtype", "code"), [(np.int16, FORMAT_S16LE), (np.float32, FORMAT_F32LE)])
def test_format_of_knows_int16_and_float32(dtype: type, code: int) -> None:
    assert format_of(np.zeros(4, dtype=dtype)) == code


@pytest.mark.parametrize("dtype", [np.int32, np.float64, np.uint8, np.uint16])
def test_other_sample_types_are_refused_naming_the_type(dtype: type) -> None:
    samples = np.zeros(4, dtype=dtype)
    with pytest.raises(AudioFormatError, match="must be int16 or float32") as excinfo:
        encode(samples)
    assert str(np.dtype(dtype)) in str(excinfo.value)


def test_encoded_bytes_are_little_endian_and_interleaved() -> None:
    stereo = np.array([[1, -1], [256, 2]], dtype=np.int16)  # frames x channels
    fmt, data = encode(stereo)
    assert fmt == FORMAT_S16LE
    assert data.dtype == np.uint8
    assert data.ndim == 1
    assert data.tobytes() == b"\x01\x00\xff\xff\x00\x01\x02\x00"


def test_float32_is_written_as_ieee_little_endian() -> None:
    fmt, data = encode(np.array([1.0, -0.5], dtype=np.float32))
    assert fmt == FORMAT_F32LE
    assert data.tobytes() == b"\x00\x00\x80\x3f\x00\x00\x00\xbf"


@pytest.mark.parametrize("dtype", [np.int16, np.float32])
@pytest.mark.parametrize("channels", [1, 2])
def test_round_trip_gives_frames_by_channels(dtype: type, channels: int) -> None:
    rng = np.random.default_rng(channels)
    samples = (rng.standard_normal((160, channels)) * 1000).astype(dtype)
    fmt, data = encode(samples)
    decoded = decode(data, fmt, channels, 16000)
    assert decoded.shape == (160, channels)
    assert decoded.dtype == dtype
    np.testing.assert_array_equal(decoded, samples)


def test_mono_one_dimensional_samples_come_back_as_one_column() -> None:
    samples = np.arange(-5, 5, dtype=np.int16)
    fmt, data = encode(samples)
    np.testing.assert_array_equal(decode(data, fmt, 1, 8000), samples.reshape(-1, 1))


def test_non_contiguous_samples_are_encoded_in_frame_order() -> None:
    channels_first = np.array([[1, 2, 3], [10, 20, 30]], dtype=np.int16)
    frames = channels_first.T  # a transposed view: (3 frames, 2 channels)
    fmt, data = encode(frames)
    np.testing.assert_array_equal(decode(data, fmt, 2, 16000), frames)


@given(hnp.arrays(np.int16, hnp.array_shapes(min_dims=2, max_dims=2, max_side=16)))
def test_int16_round_trip_property(samples: np.ndarray) -> None:
    fmt, data = encode(samples)
    np.testing.assert_array_equal(decode(data, fmt, samples.shape[1], 16000), samples)


@given(hnp.arrays(np.float32, st.integers(0, 64), elements=st.floats(width=32)))
def test_float32_round_trip_keeps_every_bit(samples: np.ndarray) -> None:
    fmt, data = encode(samples)
    decoded = decode(data, fmt, 1, 48000)
    assert decoded.reshape(-1).tobytes() == samples.tobytes()  # NaN payloads and -0.0 too


def _as_bytes(data: np.ndarray) -> bytes:
    return data.tobytes()


def _as_array(data: np.ndarray) -> array.array:
    return array.array("B", data.tobytes())


def _as_memoryview(data: np.ndarray) -> memoryview:
    return memoryview(data.tobytes())


def _as_bytearray(data: np.ndarray) -> bytearray:
    return bytearray(data.tobytes())


@pytest.mark.parametrize("wrap", [_as_bytes, _as_array, _as_memoryview, _as_bytearray])
def test_decode_accepts_any_byte_buffer(wrap) -> None:
    samples = np.array([[0, 1], [-32768, 32767]], dtype=np.int16)
    fmt, data = encode(samples)
    np.testing.assert_array_equal(decode(wrap(data), fmt, 2, 16000), samples)


def test_decode_accepts_a_typed_array_by_its_bytes() -> None:
    data = array.array("h", [1, 2, 3, 4])  # native int16 (little-endian hosts)
    if data.itemsize != 2 or not np.little_endian:
        pytest.skip("needs a little-endian host with 2-byte shorts")
    np.testing.assert_array_equal(decode(data, FORMAT_S16LE, 2, 16000), [[1, 2], [3, 4]])


def test_empty_chunk_decodes_to_no_frames() -> None:
    assert decode(b"", FORMAT_F32LE, 2, 16000).shape == (0, 2)


# --- errors --------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", [0, 3, 255])
def test_unknown_format_lists_the_supported_ones(fmt: int) -> None:
    with pytest.raises(AudioFormatError) as excinfo:
        decode(b"\x00\x00", fmt, 1, 16000)
    message = str(excinfo.value)
    assert f"unknown audio format {fmt}" in message
    assert "1 (S16LE)" in message
    assert "2 (F32LE)" in message


def test_zero_channels_is_an_error() -> None:
    with pytest.raises(AudioFormatError, match="0 channels; expected 1 or more"):
        decode(b"\x00\x00", FORMAT_S16LE, 0, 16000)


def test_zero_sample_rate_is_an_error() -> None:
    with pytest.raises(AudioFormatError, match="sample_rate 0; expected a positive rate in Hz"):
        decode(b"\x00\x00", FORMAT_S16LE, 1, 0)


@pytest.mark.parametrize(
    ("size", "fmt", "channels", "numbers"),
    [
        (3, FORMAT_S16LE, 1, ("3 bytes", "S16LE", "1 channel(s)", "2 bytes each")),
        (6, FORMAT_S16LE, 2, ("6 bytes", "S16LE", "2 channel(s)", "4 bytes each")),
        (10, FORMAT_F32LE, 1, ("10 bytes", "F32LE", "1 channel(s)", "4 bytes each")),
        (16, FORMAT_F32LE, 3, ("16 bytes", "F32LE", "3 channel(s)", "12 bytes each")),
    ],
)
def test_byte_count_not_whole_frames_states_the_numbers(
    size: int, fmt: int, channels: int, numbers: tuple[str, ...]
) -> None:
    with pytest.raises(AudioFormatError, match="not a whole number of") as excinfo:
        decode(bytes(size), fmt, channels, 16000)
    for number in numbers:
        assert number in str(excinfo.value)


def test_audio_format_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        decode(b"", 9, 1, 16000)


def test_negative_sample_rate_message_states_the_value() -> None:
    with pytest.raises(AudioFormatError, match="sample_rate -8000"):
        decode(b"\x00\x00", FORMAT_S16LE, 1, -8000)
