"""Tier 1 tests of omniflow.core.timing: stream time, pacing on a fake clock, gap counting."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from omniflow.core.audio_continuity import AudioContinuity
from omniflow.core.timing import (
    CHUNK_SAMPLES,
    NS_PER_MS,
    NS_PER_S,
    DeviceStreamStamper,
    GapDetector,
    GapReport,
    Pacer,
    StreamClock,
    sequence_at,
)


class FakeClock:
    """A monotonic clock that moves only when the test says so."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def delays(pacer: Pacer, clock: FakeClock, times: list[float]) -> list[float]:
    """Call next_delay at each of ``times``; return the delays it gave."""
    result = []
    for now in times:
        clock.now = now
        result.append(pacer.next_delay())
    return result


# --- StreamClock ---------------------------------------------------------------------------


def test_stream_clock_ticks_start_at_the_start_stamp_one_period_apart() -> None:
    clock = StreamClock(start_ns=5 * NS_PER_S)
    assert clock.count == 0
    stamps = [clock.tick(40_000_000) for _ in range(4)]
    assert stamps == [5_000_000_000, 5_040_000_000, 5_080_000_000, 5_120_000_000]
    assert clock.count == 4


def test_stream_clock_advances_by_the_period_in_force_at_each_tick() -> None:
    clock = StreamClock(start_ns=0)
    periods = [100, 100, 50, 50, 200]
    stamps = [clock.tick(period) for period in periods]
    assert stamps == [0, 100, 200, 250, 300]
    assert clock.tick(1) == 500
    assert clock.count == 6


@given(
    st.integers(min_value=0, max_value=2**62),
    st.lists(st.integers(min_value=1, max_value=10**9), max_size=50),
)
def test_stream_clock_stamp_is_start_plus_sum_of_earlier_periods(
    start: int, periods: list[int]
) -> None:
    clock = StreamClock(start)
    for i, period in enumerate(periods):
        assert clock.tick(period) == start + sum(periods[:i])


# --- Pacer ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("period", "rate", "interval"),
    [(0.04, 1.0, 0.04), (0.04, 2.0, 0.02), (1.0, 0.5, 2.0), (0.1, 10.0, 0.01)],
)
def test_interval_is_period_divided_by_rate(period: float, rate: float, interval: float) -> None:
    assert Pacer(period, rate=rate).interval_s == pytest.approx(interval)


@pytest.mark.parametrize(("period", "rate"), [(0.0, 1.0), (-1.0, 1.0), (1.0, 0.0), (1.0, -2.0)])
def test_non_positive_period_or_rate_is_rejected(period: float, rate: float) -> None:
    with pytest.raises(ValueError, match="period, rate and max_lag must be positive"):
        Pacer(period, rate=rate)


def test_first_release_is_immediate_then_deadlines_are_one_interval_apart() -> None:
    clock = FakeClock(1000.0)
    pacer = Pacer(1.0, clock=clock)
    # Releases due at 1000, 1001, 1002, 1003: each delay is "deadline - now".
    assert delays(pacer, clock, [1000.0, 1000.0, 1001.0, 1001.5]) == pytest.approx(
        [0.0, 1.0, 1.0, 1.5]
    )


def test_deadlines_are_absolute_so_jitter_does_not_accumulate() -> None:
    clock = FakeClock(0.0)
    pacer = Pacer(1.0, clock=clock)
    # The caller wakes up late by varying amounts; each deadline is still start + n.
    woke = [0.0, 1.3, 2.1, 3.9, 4.0]
    assert delays(pacer, clock, woke) == pytest.approx([0.0, 0.0, 0.0, 0.0, 0.0])
    assert delays(pacer, clock, [4.2]) == pytest.approx([0.8])  # due at 5.0, not 5.2
    assert pacer.resyncs == 0


def test_rate_factor_shortens_the_interval() -> None:
    clock = FakeClock(0.0)
    pacer = Pacer(1.0, rate=4.0, clock=clock)
    assert delays(pacer, clock, [0.0, 0.0, 0.0]) == pytest.approx([0.0, 0.25, 0.5])


def test_falling_behind_more_than_max_lag_periods_resyncs_to_now() -> None:
    clock = FakeClock(0.0)
    pacer = Pacer(1.0, max_lag=3.0, clock=clock)
    assert delays(pacer, clock, [0.0]) == [0.0]  # next deadline 1.0
    # 3 periods behind is still within max_lag: the backlog is released at once.
    assert delays(pacer, clock, [4.0]) == [0.0]
    assert pacer.resyncs == 0
    # Next deadline 2.0; at 10.0 the caller is 8 periods behind: start again from now.
    assert delays(pacer, clock, [10.0]) == [0.0]
    assert pacer.resyncs == 1
    assert delays(pacer, clock, [10.0, 10.0]) == pytest.approx([1.0, 2.0])
    assert delays(pacer, clock, [100.0, 200.0]) == [0.0, 0.0]
    assert pacer.resyncs == 3


def test_max_lag_counts_in_intervals_at_the_rate_factor() -> None:
    clock = FakeClock(0.0)
    pacer = Pacer(1.0, rate=10.0, max_lag=5.0, clock=clock)  # interval 0.1 s, lag 0.5 s
    delays(pacer, clock, [0.0, 0.4])
    assert pacer.resyncs == 0
    delays(pacer, clock, [1.2])  # deadline 0.2: 1.0 s behind
    assert pacer.resyncs == 1


def test_set_period_re_times_the_pending_release() -> None:
    clock = FakeClock(0.0)
    pacer = Pacer(1.0, clock=clock)
    delays(pacer, clock, [0.0])  # next release was due at 1.0
    pacer.set_period(0.25)
    assert pacer.interval_s == 0.25
    assert delays(pacer, clock, [0.0, 0.0, 0.0]) == pytest.approx([0.25, 0.5, 0.75])


@pytest.mark.parametrize("period", [0.0, -0.1])
def test_set_period_rejects_non_positive(period: float) -> None:
    pacer = Pacer(1.0)
    with pytest.raises(ValueError, match="period must be positive"):
        pacer.set_period(period)
    assert pacer.interval_s == 1.0


def test_wait_returns_false_at_once_when_stop_is_set() -> None:
    clock = FakeClock(0.0)
    pacer = Pacer(3600.0, clock=clock)
    stop = threading.Event()
    stop.set()
    assert pacer.wait(stop) is False  # due now
    assert pacer.wait(stop) is False  # due in an hour: must not sleep


def test_wait_returns_true_after_the_delay_when_not_stopped() -> None:
    clock = FakeClock(0.0)
    pacer = Pacer(0.001, clock=clock)
    stop = threading.Event()
    assert pacer.wait(stop) is True
    assert pacer.wait(stop) is True  # sleeps 1 ms on the real clock


# --- GapDetector ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sequences", "reports", "gaps", "missing", "restarts"),
    [
        ([7], [(0, False)], 0, 0, 0),
        ([0, 1, 2, 3], [(0, False)] * 4, 0, 0, 0),
        ([0, 2], [(0, False), (1, False)], 1, 1, 0),
        (
            [10, 11, 15, 16, 20],
            [(0, False), (0, False), (3, False), (0, False), (3, False)],
            2,
            6,
            0,
        ),
        ([5, 3], [(0, False), (0, True)], 0, 0, 1),
        # After going backwards, tracking restarts from the new number.
        ([100, 101, 0, 1, 3], [(0, False), (0, False), (0, True), (0, False), (1, False)], 1, 1, 1),
        ([-3, -2, 0], [(0, False), (0, False), (1, False)], 1, 1, 0),
    ],
)
def test_gap_detector_counts_missing_items_and_restarts(
    sequences: list[int],
    reports: list[tuple[int, bool]],
    gaps: int,
    missing: int,
    restarts: int,
) -> None:
    detector = GapDetector()
    observed = [detector.observe(sequence) for sequence in sequences]
    assert observed == [GapReport(missing=m, backwards=b) for m, b in reports]
    assert detector.received == len(sequences)
    assert (detector.gaps, detector.missing, detector.restarts) == (gaps, missing, restarts)


def test_a_repeated_index_is_neither_a_gap_nor_a_restart() -> None:
    detector = GapDetector()
    reports = [detector.observe(sequence) for sequence in (4, 5, 5, 6)]
    assert reports[2] == GapReport(repeated=True)
    assert (detector.gaps, detector.restarts, detector.repeats) == (0, 0, 1)


@given(st.lists(st.integers(min_value=-(2**40), max_value=2**40), min_size=1, unique=True))
def test_missing_is_span_minus_received_for_increasing_sequences(values: list[int]) -> None:
    sequences = sorted(values)
    detector = GapDetector()
    for sequence in sequences:
        detector.observe(sequence)
    assert detector.restarts == 0
    assert detector.missing == sequences[-1] - sequences[0] - (detector.received - 1)


# --- sequence_at ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("capture", "origin", "period", "expected"),
    [
        (100.0, 100.0, 0.04, 0),
        (100.04, 100.0, 0.04, 1),
        (100.119, 100.0, 0.04, 3),  # captured a little early: nearest block
        (100.081, 100.0, 0.04, 2),  # a little late
        (100.0 + 1000 * 0.032, 100.0, 0.032, 1000),
        (99.96, 100.0, 0.04, -1),  # before the origin
        (1.7e9 + 3600.0, 1.7e9, 0.02, 180_000),  # wall-clock-sized times
    ],
)
def test_sequence_at_rounds_to_the_nearest_block(
    capture: float, origin: float, period: float, expected: int
) -> None:
    assert sequence_at(capture, origin, period) == expected


# --- DeviceStreamStamper -----------------------------------------------------------------

PERIOD = 40 * NS_PER_MS


def stamp_all(captures: list[int], dropped: dict[int, int] | None = None):
    """Stamp blocks captured at ``captures`` (ns); ``dropped``: block index -> blocks the
    device reported lost before it."""
    stamper = DeviceStreamStamper(PERIOD)
    return [stamper.stamp(c, (dropped or {}).get(i, 0)) for i, c in enumerate(captures)]


def test_jittered_capture_times_become_one_block_apart_and_never_overlap() -> None:
    """Callbacks late and then two at once (a loaded machine): capture times 10 to 70 ms
    apart. Each block keeps its own index, and a consumer that refuses audio it already
    holds keeps every sample."""
    rng = np.random.default_rng(3)
    jitter = rng.integers(-25 * NS_PER_MS, 25 * NS_PER_MS, 500)
    jitter[100:110] = 30 * NS_PER_MS  # a stall, then the backlog in a burst
    jitter[110] = -30 * NS_PER_MS
    captures = [5 * NS_PER_S + i * PERIOD + int(j) for i, j in enumerate(jitter)]
    stamped = stamp_all(captures)
    assert [s.sequence for s in stamped] == list(range(500))
    steps = np.diff([s.stamp_ns for s in stamped])
    assert steps.min() >= PERIOD - PERIOD // 8 and steps.max() <= 2 * PERIOD
    assert np.std(steps) < np.std(np.diff(captures)) / 2
    continuity = AudioContinuity()
    block = np.zeros(CHUNK_SAMPLES, np.int16)
    kept = [continuity.observe(s.sequence, s.stamp_ns, block).samples for s in stamped]
    assert sum(len(k) for k in kept if k is not None) == 500 * CHUNK_SAMPLES
    assert continuity.counts.overlaps == 0


def test_taken_as_they_come_the_same_times_overlapped_and_lost_audio() -> None:
    """The same jitter stamped raw: what the consumer dropped before this stamper."""
    captures = [i * PERIOD + (25 if i % 2 else -25) * NS_PER_MS for i in range(100)]
    continuity = AudioContinuity()
    block = np.zeros(CHUNK_SAMPLES, np.int16)
    for i, capture in enumerate(captures):
        continuity.observe(i, capture, block)
    assert continuity.counts.overlaps > 0 and continuity.counts.overlap_ms > 0


def test_blocks_stamped_a_block_early_twice_move_the_stream_a_quarter_block() -> None:
    """Seen through PulseAudio every few seconds: two blocks 40 ms early, then back."""
    captures = [i * PERIOD - (40 * NS_PER_MS if i in (20, 21) else 0) for i in range(40)]
    stamped = stamp_all(captures)
    assert [s.sequence for s in stamped] == list(range(40))
    errors = [s.stamp_ns - c for s, c in zip(stamped, captures, strict=True)]
    assert min(errors[20:]) >= -2 * PERIOD // 8 and abs(errors[-1]) < NS_PER_MS


def test_a_start_up_offset_settling_ahead_is_followed_within_a_second() -> None:
    """PulseAudio's first blocks: the offset settles 206 ms later after 11 blocks."""
    captures = [i * PERIOD + (206 * NS_PER_MS if i >= 11 else 0) for i in range(60)]
    stamped = stamp_all(captures)
    errors = [abs(s.stamp_ns - c) for s, c in zip(stamped, captures, strict=True)]
    assert max(errors[11 + 25 :]) < NS_PER_MS


def test_stamps_follow_a_device_clock_that_runs_fast_within_a_few_ms() -> None:
    """A null sink's blocks came 0.6 % further apart than 40 ms on a loaded machine."""
    captures = [round(i * PERIOD * 1.006) for i in range(2000)]
    stamped = stamp_all(captures)
    errors = [s.stamp_ns - c for s, c in zip(stamped, captures, strict=True)][200:]
    assert max(abs(e) for e in errors) < 5 * NS_PER_MS


def test_reported_drops_advance_the_sequence_and_the_stamp() -> None:
    captures = [i * PERIOD for i in range(10)]
    del captures[5:8]  # three blocks never reached the node; the device said so
    stamped = stamp_all(captures, dropped={5: 3})
    assert [s.sequence for s in stamped] == [0, 1, 2, 3, 4, 8, 9]
    assert [s.stamp_ns for s in stamped] == [i * PERIOD for i in (0, 1, 2, 3, 4, 8, 9)]
    detector = GapDetector()
    for s in stamped:
        detector.observe(s.sequence)
    assert (detector.gaps, detector.missing) == (1, 3)


def test_an_unreported_gap_over_a_second_skips_whole_blocks() -> None:
    captures = [i * PERIOD for i in range(5)] + [(4 + 40) * PERIOD + 7 * NS_PER_MS]
    stamped = stamp_all(captures)
    assert (stamped[-1].sequence, stamped[-1].skipped) == (44, 39)
    assert stamped[-1].stamp_ns == captures[-1]


def test_a_clock_stepping_back_restarts_the_stream_far_enough_to_be_seen_as_one() -> None:
    captures = [10 * NS_PER_S + i * PERIOD for i in range(5)] + [8 * NS_PER_S]
    stamped = stamp_all(captures)
    assert stamped[-1].stepped_back and stamped[-1].stamp_ns == 8 * NS_PER_S
    assert stamped[-1].sequence == 5  # the index still counts blocks
    continuity = AudioContinuity()
    block = np.zeros(CHUNK_SAMPLES, np.int16)
    for s in stamped:
        verdict = continuity.observe(s.sequence, s.stamp_ns, block)
    assert continuity.counts.restarts == 1 and len(verdict.samples) == CHUNK_SAMPLES


def test_a_clock_stepping_back_less_than_a_second_is_slewed_without_overlap() -> None:
    captures = [10 * NS_PER_S + i * PERIOD for i in range(5)]
    captures += [10 * NS_PER_S - 300 * NS_PER_MS + i * PERIOD for i in range(5, 400)]
    stamped = stamp_all(captures)
    assert not any(s.stepped_back for s in stamped)
    assert min(np.diff([s.stamp_ns for s in stamped])) == PERIOD - PERIOD // 8  # 5 ms
    assert abs(stamped[-1].stamp_ns - captures[-1]) < NS_PER_MS


def test_a_stream_resumed_after_a_pause_numbers_its_blocks_from_the_first_origin() -> None:
    first = DeviceStreamStamper(PERIOD)
    for i in range(5):
        first.stamp(3 * NS_PER_S + i * PERIOD)
    resumed = DeviceStreamStamper(PERIOD, origin_ns=first.origin_ns)
    stamped = [resumed.stamp(3 * NS_PER_S + 500 * NS_PER_MS + i * PERIOD) for i in range(3)]
    assert [s.sequence for s in stamped] == [12, 13, 14]  # 0.5 s paused: a gap after 4


@pytest.mark.parametrize(
    "kwargs",
    [{"period_ns": 0}, {"period_ns": PERIOD, "gain": 0}, {"period_ns": PERIOD, "step_ns": PERIOD}],
)
def test_stamper_refuses_nonsense_settings(kwargs: dict) -> None:
    with pytest.raises(ValueError, match="period_ns > 0"):
        DeviceStreamStamper(**kwargs)
