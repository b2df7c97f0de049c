"""The audio front end's framing and band checks (omniflow.core.denoise; tier 1, no engines)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.signal import resample_poly

from omniflow.core.denoise import DelayLine, Reframer, band_edge_hz, snr_gain_db
from omniflow.errors import AudioFormatError, ConfigError

RATE = 16_000


@pytest.mark.parametrize("frame", [0, -1, 1.5, True])
def test_reframer_refuses_a_frame_that_is_not_a_positive_count(frame):
    with pytest.raises(ConfigError, match="positive number of samples"):
        Reframer(frame)


@pytest.mark.parametrize("chunk", [640, 100, 333, 1000])
def test_reframer_cuts_any_chunks_into_whole_frames_in_order(chunk):
    reframer = Reframer(320)
    stream = np.arange(5000, dtype=np.int16)
    frames = []
    for i in range(0, len(stream), chunk):
        frames += reframer.push(stream[i : i + chunk])
    assert all(len(f) == 320 for f in frames)
    joined = np.concatenate(frames)
    assert np.array_equal(joined, stream[: len(joined)].astype(np.float32))
    assert reframer.pending == len(stream) - len(joined) < 320


def test_reframer_refuses_stereo_and_forgets_on_reset():
    reframer = Reframer(4)
    with pytest.raises(AudioFormatError, match="mono"):
        reframer.push(np.zeros((4, 2), dtype=np.int16))
    reframer.push(np.ones(3, dtype=np.int16))
    reframer.reset()
    assert reframer.pending == 0


def test_delay_line_adds_no_delay_while_chunks_are_whole_frames():
    line = DelayLine(319)
    for k in range(3):
        line.add(np.full(640, k, dtype=np.float32))
        assert np.all(line.take(640) == k)
    assert line.delay == 0


def test_delay_line_puts_missing_samples_in_front_once_and_keeps_the_stream_whole():
    line, reframer = DelayLine(319), Reframer(320)
    stream = np.arange(1, 3001, dtype=np.float32)
    out = []
    for i in range(0, len(stream), 500):  # 500-sample chunks in 320-sample frames
        for frame in reframer.push(stream[i : i + 500]):
            line.add(frame)
        out.append(line.take(len(stream[i : i + 500])))
    out = np.concatenate(out)
    assert len(out) == len(stream)  # as many samples out as in
    assert line.delay == 319  # set once, at the first shortfall: one frame less a sample
    assert np.all(out[: line.delay] == 0)
    assert np.array_equal(out[line.delay :], stream[: len(stream) - line.delay])
    line.reset()
    assert line.delay == 0
    with pytest.raises(ConfigError, match="reserve"):
        DelayLine(-1)


def _tone(freq: float, seconds: float = 1.0) -> np.ndarray:
    t = np.arange(int(RATE * seconds)) / RATE
    return (8000 * np.sin(2 * np.pi * freq * t)).astype(np.int16)


def test_band_edge_tells_a_telephone_band_source_from_a_full_band_one():
    rng = np.random.default_rng(3)
    full = np.clip(rng.normal(0, 3000, RATE), -32768, 32767).astype(np.int16)
    phone = resample_poly(resample_poly(full.astype(np.float64), 1, 2), 2, 1)
    assert band_edge_hz(full, RATE) > 7000
    assert band_edge_hz(phone.astype(np.int16), RATE) < 4200
    assert band_edge_hz(_tone(1000), RATE) == pytest.approx(1000, abs=5)


def test_band_edge_of_silence_is_nan_and_bad_input_is_named():
    assert np.isnan(band_edge_hz(np.zeros(100, dtype=np.int16), RATE))
    with pytest.raises(AudioFormatError, match="non-empty 1-D"):
        band_edge_hz(np.zeros(0, dtype=np.int16), RATE)
    with pytest.raises(ConfigError, match="share"):
        band_edge_hz(_tone(500), RATE, share=1.0)


def test_snr_gain_rewards_removing_noise_not_scaling_and_finds_the_lag():
    rng = np.random.default_rng(4)
    clean = rng.normal(0, 4000, RATE)  # broadband, as speech: one lag correlates best
    clean[:400] = clean[-400:] = 0  # silence around it, as around an utterance
    noise = rng.normal(0, 2000, len(clean))
    noisy = clean + noise
    assert snr_gain_db(clean, noisy, noisy * 0.1) == pytest.approx(0.0, abs=1e-6)
    better = clean + noise / 10  # 20 dB less noise
    assert snr_gain_db(clean, noisy, better) == pytest.approx(20.0, abs=0.5)
    late = np.concatenate([np.zeros(160), better[:-160]])  # 10 ms late
    assert snr_gain_db(clean, noisy, late, max_lag=400) == pytest.approx(20.0, abs=1.0)


def test_snr_gain_refuses_signals_it_cannot_compare():
    with pytest.raises(AudioFormatError, match="one length"):
        snr_gain_db(np.ones(3), np.ones(4), np.ones(3))
    with pytest.raises(AudioFormatError, match="silent"):
        snr_gain_db(np.zeros(3), np.ones(3), np.ones(3))
