"""Tier 1 tests of omniflow.core.resample: streamed equals whole, frequencies survive."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.signal import resample_poly

from omniflow.core.resample import (
    ChunkResampler,
    SourceRate,
    StreamResampler,
    resample_int16,
)
from omniflow.errors import AudioFormatError, ConfigError


def peak_frequency(samples: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(samples.astype(np.float64) * np.hanning(len(samples))))
    return float(np.fft.rfftfreq(len(samples), 1.0 / rate)[np.argmax(spectrum)])


def sine_int16(freq: float, rate: int, seconds: float, amplitude: float = 0.5) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return np.rint(amplitude * 32767 * np.sin(2 * np.pi * freq * t)).astype(np.int16)


@settings(max_examples=25, deadline=None)
@given(
    rates=st.sampled_from([(22050, 16000), (16000, 48000), (44100, 16000), (16000, 22050)]),
    sizes=st.lists(st.integers(min_value=0, max_value=3000), min_size=1, max_size=8),
)
def test_chunked_stream_equals_whole_signal(rates: tuple[int, int], sizes: list[int]) -> None:
    rate_in, rate_out = rates
    rng = np.random.default_rng(len(sizes))
    signal = rng.standard_normal((sum(sizes) + 17, 1)).astype(np.float32)
    resampler = StreamResampler(rate_in, rate_out, 1)
    pieces, start = [], 0
    for size in sizes:
        pieces.append(resampler.process(signal[start : start + size]))
        start += size
    pieces.append(resampler.process(signal[start:], final=True))
    streamed = np.concatenate(pieces)
    g = np.gcd(rate_in, rate_out)
    whole = resample_poly(signal.astype(np.float64), rate_out // g, rate_in // g, axis=0)
    assert streamed.shape == whole.shape
    np.testing.assert_allclose(streamed, whole, atol=1e-5)


@pytest.mark.parametrize(
    ("rate_in", "rate_out", "freq"),
    [(22050, 16000, 440.0), (16000, 48000, 1000.0), (44100, 22050, 3000.0), (16000, 44100, 250.0)],
)
def test_resample_int16_keeps_a_sines_frequency(rate_in: int, rate_out: int, freq: float) -> None:
    tone = sine_int16(freq, rate_in, 1.0)
    out = resample_int16(tone, rate_in, rate_out)
    assert out.dtype == np.int16
    assert len(out) == -(-len(tone) * rate_out // rate_in)  # ceil
    middle = out[len(out) // 4 : 3 * len(out) // 4]  # away from the filter's edge effects
    assert peak_frequency(middle, rate_out) == pytest.approx(freq, abs=2.5)
    assert np.abs(middle).max() == pytest.approx(np.abs(tone).max(), rel=0.02)


def test_resample_int16_clips_instead_of_wrapping_and_keeps_channels() -> None:
    square = np.where(np.arange(4000) % 40 < 20, 32767, -32768).astype(np.int16)
    stereo = np.stack([square, square // 2], axis=1)
    out = resample_int16(stereo, 16000, 22050)
    assert out.shape == (-(-4000 * 22050 // 16000), 2)
    # Overshoot near full scale is clipped, so the sign of the wave is kept everywhere.
    np.testing.assert_array_equal(np.sign(out[100:-100:10, 0]), np.sign(out[100:-100:10, 1]))


def test_resample_int16_same_rate_and_empty_return_copies() -> None:
    data = np.arange(10, dtype=np.int16)
    same = resample_int16(data, 16000, 16000)
    same[0] = 99
    assert data[0] == 0
    assert resample_int16(np.zeros(0, np.int16), 22050, 16000).shape == (0,)


@pytest.mark.parametrize(
    ("samples", "rate_in", "rate_out", "error"),
    [
        (np.zeros(10, np.float32), 16000, 8000, AudioFormatError),
        (np.zeros((2, 2, 2), np.int16), 16000, 8000, AudioFormatError),
        (np.zeros(10, np.int16), 0, 8000, ConfigError),
        (np.zeros(10, np.int16), 16000, 22050.0, ConfigError),
    ],
)
def test_resample_int16_rejects_bad_input(
    samples: np.ndarray, rate_in: int, rate_out: int, error: type[Exception]
) -> None:
    with pytest.raises(error):
        resample_int16(samples, rate_in, rate_out)


@pytest.mark.parametrize(
    ("rate_in", "chunk", "most_delay_ms"), [(8000, 320, 3), (11_025, 441, 80), (48_000, 1920, 3)]
)
def test_chunk_resampler_keeps_each_chunks_duration_and_delays_the_stream_by_a_fixed_amount(
    rate_in, chunk, most_delay_ms
):
    rng = np.random.default_rng(5)
    signal = np.clip(rng.normal(0, 4000, chunk * 30), -32768, 32767).astype(np.int16)
    resampler = ChunkResampler(rate_in, 16_000)
    out = [resampler.process(signal[i : i + chunk]) for i in range(0, len(signal), chunk)]
    assert {len(c) for c in out} == {640}  # 40 ms in, 40 ms out, every chunk
    delay = round(resampler.delay_ns * 16_000 / 1e9)
    # The filter's look-ahead: a few ms for whole ratios, up to two chunks for 441/640.
    assert 0 < resampler.delay_ns <= most_delay_ms * 1_000_000
    whole = resample_int16(signal, rate_in, 16_000)
    joined = np.concatenate(out)
    assert np.all(joined[:delay] == 0)
    assert np.abs(joined[delay:].astype(int) - whole[: len(joined) - delay]).max() <= 1


def test_chunk_resampler_refuses_what_is_not_mono_int16():
    with pytest.raises(AudioFormatError, match="mono int16"):
        ChunkResampler(8000, 16_000).process(np.zeros(320, dtype=np.float32))


def test_source_rate_passes_16k_through_and_resamples_8k_keeping_each_chunk_40_ms():
    rate = SourceRate(16_000)
    assert rate.band_hz is None and not rate.band_limited
    chunk = np.arange(640, dtype=np.int16)
    assert rate.convert(16_000, chunk) is chunk
    assert rate.band_hz == 8000 and not rate.band_limited
    tone = sine_int16(1000.0, 8000, 1.0)
    out = np.concatenate([rate.convert(8000, tone[i : i + 320]) for i in range(0, 8000, 320)])
    assert len(out) == 16_000 and rate.source_rate == 8000
    assert rate.band_limited and rate.band_hz == 4000
    assert peak_frequency(out[1600:], 16_000) == pytest.approx(1000.0, abs=2.0)
    rate.reset()
    assert rate.source_rate is None


@pytest.mark.parametrize("bad", [4000, 96_000])
def test_source_rate_names_a_rate_it_cannot_take(bad):
    rate = SourceRate(16_000)
    with pytest.raises(AudioFormatError, match=f"sample_rate {bad} Hz; expected 8000-48000"):
        rate.convert(bad, np.zeros(100, dtype=np.int16))
    assert rate.source_rate is None
