"""Tier 1 tests of omniflow.core.clock.ClockMapper (pure Python, no ROS)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from omniflow.core.clock import ClockMapper

TRUE_OFFSET = -1.7e9 + 123.456  # host monotonic minus a wall-clock-like device clock


def feed(mapper: ClockMapper, delays: list[float], period: float = 0.04) -> list[float]:
    """Observe one reading per period; each host reading is late by its delay. Returns hosts."""
    hosts = []
    for i, delay in enumerate(delays):
        device_now = 1.7e9 + i * period
        host_now = device_now + TRUE_OFFSET + delay
        mapper.observe(device_now, host_now)
        hosts.append(host_now)
    return hosts


@pytest.mark.parametrize(
    ("delays", "expected_error"),
    [
        ([0.0], 0.0),
        ([0.005], 0.005),
        ([0.004, 0.001, 0.003], 0.001),
        ([0.010, 0.020, 0.0002, 0.030], 0.0002),
        ([0.002] * 10, 0.002),
    ],
)
def test_offset_is_minimum_of_observed_differences(
    delays: list[float], expected_error: float
) -> None:
    mapper = ClockMapper()
    feed(mapper, delays)
    assert mapper.offset == pytest.approx(TRUE_OFFSET + expected_error, abs=1e-6)
    device_t = 1.7e9 + 0.5
    expected = pytest.approx(device_t + TRUE_OFFSET, abs=expected_error + 1e-6)
    assert mapper.to_host(device_t) == expected


def test_to_host_before_any_observation_is_an_error() -> None:
    mapper = ClockMapper()
    assert mapper.offset is None
    assert not mapper.device_clock_ok
    with pytest.raises(RuntimeError, match="before any valid observe"):
        mapper.to_host(1.0)


def test_old_minimum_expires_with_window() -> None:
    mapper = ClockMapper(window_s=1.0)
    # One very good reading, then 2 s of readings 3 ms late: the good one must expire.
    feed(mapper, [0.0] + [0.003] * 50, period=0.04)
    assert mapper.offset == pytest.approx(TRUE_OFFSET + 0.003, abs=1e-6)


@pytest.mark.parametrize("ppm", [-100.0, -20.0, 0.0, 20.0, 100.0])
def test_follows_slow_drift(ppm: float) -> None:
    """Device clock runs (1 + ppm) fast; the estimate stays within drift*window + delay."""
    window_s = 5.0
    mapper = ClockMapper(window_s=window_s)
    rate = 1.0 + ppm * 1e-6
    period = 0.04
    worst = 0.0
    for i in range(int(120.0 / period)):  # two minutes of callbacks
        host_true = i * period
        device_now = 50.0 + host_true * rate
        delay = 0.0005 + 0.002 * ((i * 7919) % 13) / 13.0  # deterministic jitter
        mapper.observe(device_now, host_true + delay)
        if host_true > window_s:
            probe_device = device_now
            error = mapper.to_host(probe_device) - host_true
            worst = max(worst, abs(error))
    bound = abs(ppm) * 1e-6 * window_s + 0.0005 + 1e-6
    assert worst <= bound


def test_clock_step_back_is_followed_after_confirmation() -> None:
    mapper = ClockMapper(step_threshold_s=0.25, step_confirm=5)
    feed(mapper, [0.001] * 20)
    before = mapper.offset
    assert before is not None
    # Device clock steps 1 s back: offset rises by 1 s. One stall alone is ignored...
    mapper.observe(1.7e9 + 20 * 0.04 - 1.0, 1.7e9 + 20 * 0.04 + TRUE_OFFSET + 0.001)
    assert mapper.offset == before
    # ...a confirmed run restarts the window.
    for i in range(21, 26):
        mapper.observe(1.7e9 + i * 0.04 - 1.0, 1.7e9 + i * 0.04 + TRUE_OFFSET + 0.001)
    assert mapper.offset == pytest.approx(before + 1.0, abs=1e-6)


def test_single_stall_does_not_move_estimate() -> None:
    mapper = ClockMapper()
    feed(mapper, [0.001] * 10 + [0.8] + [0.001] * 10)
    assert mapper.offset == pytest.approx(TRUE_OFFSET + 0.001, abs=1e-6)


@pytest.mark.parametrize("bad", [0.0, math.nan, math.inf])
def test_zero_device_clock_is_detected_and_falls_back(bad: float) -> None:
    mapper = ClockMapper(zero_after=3)
    for i in range(5):
        mapper.observe(bad, 100.0 + i * 0.04)
    assert not mapper.device_clock_ok
    assert mapper.offset is None
    assert mapper.valid_observations == 0
    assert mapper.observations == 5
    t = mapper.capture_time(0.0, host_now=100.0, block_duration=0.04, input_latency=0.02)
    assert t == pytest.approx(100.0 - 0.04 - 0.02)


def test_clock_going_dead_after_valid_readings_switches_to_fallback() -> None:
    mapper = ClockMapper(zero_after=3)
    feed(mapper, [0.001] * 5)
    assert mapper.device_clock_ok
    mapper.observe(0.0, 10.0)
    mapper.observe(0.0, 10.04)
    assert mapper.device_clock_ok  # two zeros: still tolerated
    mapper.observe(0.0, 10.08)
    assert not mapper.device_clock_ok
    assert mapper.capture_time(1.7e9, 10.08, 0.04, 0.01) == pytest.approx(10.08 - 0.05)
    feed(mapper, [0.001])  # the clock comes back
    assert mapper.device_clock_ok


def test_capture_time_uses_adc_time_when_clock_works() -> None:
    mapper = ClockMapper()
    feed(mapper, [0.0])
    adc = 1.7e9 - 0.03
    assert mapper.capture_time(adc, host_now=0.0, block_duration=0.04, input_latency=0.5) == (
        pytest.approx(adc + TRUE_OFFSET, abs=1e-6)
    )
    # A zero ADC time alone (currentTime fine) also falls back.
    assert mapper.capture_time(0.0, host_now=7.0, block_duration=0.04, input_latency=0.01) == (
        pytest.approx(6.95)
    )


def test_reset_forgets_everything() -> None:
    mapper = ClockMapper()
    feed(mapper, [0.001] * 3)
    mapper.reset()
    assert mapper.offset is None
    assert mapper.observations == 0


@pytest.mark.parametrize(
    "kwargs",
    [{"window_s": 0.0}, {"zero_after": 0}, {"step_threshold_s": -1.0}, {"step_confirm": 0}],
)
def test_invalid_arguments_rejected(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        ClockMapper(**kwargs)


@settings(max_examples=200, deadline=None)
@given(
    delays=st.lists(
        st.floats(min_value=1e-6, max_value=0.2, allow_nan=False), min_size=1, max_size=200
    ),
    period=st.floats(min_value=0.005, max_value=0.1),
)
def test_mapped_error_never_exceeds_smallest_delay(delays: list[float], period: float) -> None:
    """With only positive delivery delays, the mapping error is in [0, min delay seen]."""
    mapper = ClockMapper(window_s=1e6, step_threshold_s=10.0)
    feed(mapper, delays, period=period)
    device_t = 1.7e9 + 3.21
    error = mapper.to_host(device_t) - (device_t + TRUE_OFFSET)
    # 1e-6 absorbs float rounding at 1.7e9 magnitudes (ulp ~2.4e-7).
    assert -1e-6 <= error <= min(delays) + 1e-6
