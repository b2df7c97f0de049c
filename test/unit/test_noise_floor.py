"""Tier 1 tests of omniflow.core.noise_floor and omniflow.core.room_sounds: the floor follows
the background, not the voice, and noise is mixed at the SNR asked for."""

from __future__ import annotations

import math

import numpy as np
import pytest

from omniflow.core.noise_floor import SILENCE_DBFS, NoiseFloor, level_dbfs
from omniflow.core.room_sounds import (
    active_rms,
    babble_noise,
    fan_noise,
    far_talker,
    mix_at_snr,
    motor_noise,
    pink_noise,
)

WINDOW_S = 0.03


def feed(floor: NoiseFloor, levels: list[float]) -> list[bool]:
    return [floor.update(level) for level in levels]


def test_level_of_a_full_scale_square_wave_is_0_dbfs_and_silence_is_the_bottom() -> None:
    square = np.tile(np.array([32767, -32767], dtype=np.int16), 240)
    assert level_dbfs(square) == pytest.approx(0.0, abs=0.01)
    assert level_dbfs(np.zeros(480, dtype=np.int16)) == SILENCE_DBFS
    assert level_dbfs(np.zeros(0, dtype=np.int16)) == SILENCE_DBFS


def test_pre_emphasis_lowers_a_low_tone_more_than_a_high_one() -> None:
    t = np.arange(480) / 16_000
    low = (np.sin(2 * np.pi * 100 * t) * 10_000).astype(np.int16)
    high = (np.sin(2 * np.pi * 3000 * t) * 10_000).astype(np.int16)
    drop_low = level_dbfs(low) - level_dbfs(low, 0.97)
    drop_high = level_dbfs(high) - level_dbfs(high, 0.97)
    assert drop_low > drop_high + 15


def test_steady_background_is_never_loud_enough_and_becomes_the_floor() -> None:
    floor = NoiseFloor(WINDOW_S, margin_db=6.0, settle_s=0.0)
    levels = [-40.0 + (1.0 if i % 2 else -1.0) for i in range(200)]
    assert not any(feed(floor, levels))
    assert -41.0 <= floor.floor_dbfs <= -40.0


def test_a_voice_above_the_margin_is_loud_enough_and_does_not_lift_the_floor() -> None:
    floor = NoiseFloor(WINDOW_S, history_s=1.5, margin_db=6.0, settle_s=0.0)
    feed(floor, [-50.0] * 50)
    # 3 s of syllables 15 dB up, with a pause of 90 ms every 300 ms.
    speech = [(-50.0 if i % 10 in (7, 8, 9) else -35.0) for i in range(100)]
    loud = feed(floor, speech)
    assert all(loud[i] for i in range(100) if i % 10 < 7)
    assert floor.floor_dbfs < -45.0


def test_a_new_louder_noise_becomes_the_floor_within_the_history() -> None:
    floor = NoiseFloor(WINDOW_S, history_s=1.5, margin_db=6.0, settle_s=0.0)
    feed(floor, [-60.0] * 100)
    loud = feed(floor, [-30.0] * 100)  # a fan starts
    last_loud = max(i for i, x in enumerate(loud) if x)
    assert last_loud * WINDOW_S <= 1.5 + 0.1  # the history and the smoothing
    assert floor.floor_dbfs == pytest.approx(-30.0, abs=0.1)


def test_nothing_is_loud_enough_while_the_floor_settles_then_reset_forgets_the_room() -> None:
    floor = NoiseFloor(WINDOW_S, margin_db=6.0, settle_s=0.3)
    assert floor.floor_dbfs is None
    assert feed(floor, [-60.0] + [-20.0] * 9) == [False] * 10  # 0.3 s
    assert floor.update(-10.0)
    floor.reset()
    assert floor.floor_dbfs is None and not floor.update(0.0)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"window_s": 0.0}, "window_s"),
        ({"window_s": math.nan}, "window_s"),
        ({"history_s": -1.0}, "history_s"),
        ({"margin_db": -3.0}, "margin_db"),
        ({"smoothing_s": math.inf}, "smoothing_s"),
        ({"settle_s": -0.1}, "settle_s"),
    ],
)
def test_bad_settings_name_the_setting(options: dict, message: str) -> None:
    options = {"window_s": WINDOW_S, **options}
    with pytest.raises(ValueError, match=message):
        NoiseFloor(**options)


@pytest.mark.parametrize("make", [pink_noise, fan_noise])
def test_noises_are_unit_rms_and_deterministic(make) -> None:
    a = make(16_000, np.random.default_rng(3))
    b = make(16_000, np.random.default_rng(3))
    assert np.array_equal(a, b)
    assert float(np.sqrt(np.mean(a**2))) == pytest.approx(1.0, rel=1e-6)


def test_pink_noise_has_equal_power_per_octave() -> None:
    x = pink_noise(160_000, np.random.default_rng(0))
    power = np.abs(np.fft.rfft(x)) ** 2
    f = np.fft.rfftfreq(len(x), 1 / 16_000)
    octave = [power[(f >= lo) & (f < 2 * lo)].sum() for lo in (250, 500, 1000, 2000)]
    assert max(octave) / min(octave) < 1.3


@pytest.mark.parametrize("snr_db", [20.0, 10.0, 5.0])
def test_mix_at_snr_measures_the_ratio_it_was_asked_for(snr_db: float) -> None:
    t = np.arange(8000) / 16_000
    speech = (np.sin(2 * np.pi * 440 * t) * 8000).astype(np.int16)
    noise = pink_noise(32_000, np.random.default_rng(1))
    mix, measured = mix_at_snr(speech, noise, snr_db, at=8000)
    assert mix.dtype == np.int16 and len(mix) == len(noise)
    assert measured == pytest.approx(snr_db, abs=0.2)
    outside = np.concatenate([mix[:8000], mix[16_000:]]).astype(np.float64)
    assert 20 * math.log10(active_rms(speech) / np.sqrt(np.mean(outside**2))) == pytest.approx(
        snr_db, abs=0.2
    )


def test_mix_refuses_speech_that_does_not_fit_or_is_silent() -> None:
    noise = pink_noise(1000, np.random.default_rng(1))
    with pytest.raises(ValueError, match="does not fit"):
        mix_at_snr(np.ones(800, dtype=np.int16) * 1000, noise, 10.0, at=500)
    with pytest.raises(ValueError, match="-60 dBFS"):
        mix_at_snr(np.zeros(100, dtype=np.int16), noise, 10.0)


def test_motor_and_babble_are_unit_rms_and_deterministic() -> None:
    a = motor_noise(16_000, np.random.default_rng(2))
    assert np.array_equal(a, motor_noise(16_000, np.random.default_rng(2)))
    assert float(np.sqrt(np.mean(a**2))) == pytest.approx(1.0, rel=1e-6)
    voices = [np.sin(np.arange(4000) * 0.05) * 5000, np.sin(np.arange(3000) * 0.11) * 8000]
    b = babble_noise(voices, 16_000, np.random.default_rng(2))
    assert float(np.sqrt(np.mean(b**2))) == pytest.approx(1.0, rel=1e-6)
    with pytest.raises(ValueError, match="voice"):
        babble_noise([], 100, np.random.default_rng(0))


def test_a_far_talker_keeps_the_level_and_rings_on_after_the_speech() -> None:
    speech = np.zeros(8000)
    speech[1000:3000] = np.sin(np.arange(2000) * 0.2) * 8000
    far = far_talker(speech, np.random.default_rng(0), rt60_s=0.5)
    assert len(far) == len(speech) + 8000 - 1
    assert active_rms(far) == pytest.approx(active_rms(speech), rel=0.01)
    after = far[3000 + 800 : 3000 + 1600]  # 50-100 ms after the speech stopped
    assert np.sqrt(np.mean(after**2)) > 10 * np.sqrt(np.mean(speech[3800:4600] ** 2) + 1)
