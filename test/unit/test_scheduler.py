"""The TDM scheduler (tier 1, no ROS): slice timing, merge/skip policy, overruns, per-stage
times with a fake clock."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from omniflow.core.scheduler import STAGES, Slice, TdmScheduler, check_slice_ns
from omniflow.errors import ConfigError

MS = 1_000_000
T0 = 1_700_000_000 * 1_000_000_000


class FakeClock:
    """A work clock that only moves when a stage says it spent time."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now

    def spend(self, ns: int):
        def stage(_slice: Slice) -> None:
            self.now += ns

        return stage


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        (20 * MS, True),
        (40 * MS, True),
        (500 * MS, True),
        (20 * MS - 1, False),
        (500 * MS + 1, False),
        (0, False),
        (-40 * MS, False),
        (40e6, False),
        (True, False),
    ],
)
def test_slice_length_is_checked_against_20_to_500_ms(value, ok):
    if ok:
        assert check_slice_ns(value) == value
        assert TdmScheduler(value).slice_ns == value
    else:
        with pytest.raises(ConfigError, match="20-500 ms"):
            TdmScheduler(value)


def test_stages_run_in_order_with_the_slice():
    calls = []
    scheduler = TdmScheduler(**{name: (lambda s, n=name: calls.append((n, s))) for name in STAGES})
    assert scheduler.run_due(T0) is None  # anchors the schedule
    assert scheduler.next_due_ns == T0 + 40 * MS
    ran = scheduler.run_due(T0 + 40 * MS)
    assert ran == Slice(0, T0, T0 + 40 * MS, 1)
    assert [name for name, _ in calls] == list(STAGES)
    assert all(s is ran for _, s in calls)


# now (ms after T0) -> the slice that runs (index, start ms, end ms, periods) or None;
# with the expected (slices_run, merged, skipped) after the whole sequence.
@pytest.mark.parametrize(
    ("nows_ms", "slices", "totals"),
    [
        ([0, 39, 40, 79, 80], [None, None, (0, 0, 40, 1), None, (1, 40, 80, 1)], (2, 0, 0)),
        (
            [0, 60, 100, 119, 120],
            [None, (0, 0, 40, 1), (1, 40, 80, 1), None, (2, 80, 120, 1)],
            (3, 0, 0),
        ),
        ([0, 130], [None, (0, 0, 120, 3)], (1, 1, 2)),  # 3 due: one merged
        ([0, 40, 40, 40], [None, (0, 0, 40, 1), None, None], (1, 0, 0)),  # no repeats
        ([0, 40, 1040], [None, (0, 0, 40, 1), (1, 40, 1040, 25)], (2, 1, 24)),
        ([0, 40, 200, 240], [None, (0, 0, 40, 1), (1, 40, 200, 4), (5, 200, 240, 1)], (3, 1, 3)),
    ],
)
def test_due_slices_and_the_merge_skip_policy(nows_ms, slices, totals):
    scheduler = TdmScheduler(40 * MS, clock=FakeClock())
    for now, expected in zip(nows_ms, slices, strict=True):
        ran = scheduler.run_due(T0 + now * MS)
        if expected is None:
            assert ran is None
        else:
            index, start, end, periods = expected
            assert ran == Slice(index, T0 + start * MS, T0 + end * MS, periods)
            assert ran.merged == (periods > 1)
    stats = scheduler.stats
    assert (stats.slices_run, stats.merged, stats.skipped) == totals


# per-stage work (ms) of consecutive slices -> overruns counted, last per-stage times
@pytest.mark.parametrize(
    ("work_ms", "overruns"),
    [
        ([(1, 2, 3, 4)], 0),
        ([(10, 10, 10, 10)], 0),  # exactly the slice: not an overrun
        ([(10, 10, 10, 11)], 1),
        ([(50, 0, 0, 0), (1, 1, 1, 1), (0, 0, 41, 0)], 2),
    ],
)
def test_overruns_and_per_stage_times_with_a_fake_clock(work_ms, overruns):
    clock = FakeClock()
    per_slice = iter(work_ms)
    current: dict[str, int] = {}

    def stage(name):
        def run(_slice):
            clock.now += current[name] * MS

        return run

    scheduler = TdmScheduler(40 * MS, clock=clock, **{n: stage(n) for n in STAGES})
    scheduler.run_due(T0)
    now = T0
    totals = dict.fromkeys(STAGES, 0)
    for work in per_slice:
        current.update(zip(STAGES, work, strict=True))
        now += 40 * MS
        assert scheduler.run_due(now) is not None
        for name, ms in current.items():
            totals[name] += ms * MS
    stats = scheduler.stats
    assert stats.overruns == overruns
    assert stats.stage_ns_last == {n: ms * MS for n, ms in current.items()}
    assert stats.stage_ns_total == totals
    assert stats.work_ns_last == sum(work_ms[-1]) * MS
    assert stats.work_ns_max == max(sum(w) for w in work_ms) * MS
    assert stats.as_dict()["stage_ns_total.encode"] == totals["encode"]


def test_an_overrun_makes_the_next_call_merge_instead_of_queueing():
    """A slow slice (a stalled executor): the timer fires late once and catches up at once."""
    clock = FakeClock()
    scheduler = TdmScheduler(40 * MS, clock=clock, encode=clock.spend(130 * MS))
    scheduler.run_due(T0)
    assert scheduler.run_due(T0 + 40 * MS) == Slice(0, T0, T0 + 40 * MS)
    # the work took 130 ms: the timer's next chance is at +170 ms, 3 slices are due
    assert scheduler.run_due(T0 + 170 * MS) == Slice(1, T0 + 40 * MS, T0 + 160 * MS, 3)
    s = scheduler.stats
    assert (s.slices_run, s.merged, s.skipped, s.overruns) == (2, 1, 2, 2)


def test_missing_stages_are_skipped_and_take_no_time():
    clock = FakeClock()
    scheduler = TdmScheduler(40 * MS, clock=clock, associate=clock.spend(3 * MS))
    scheduler.run_due(T0)
    scheduler.run_due(T0 + 40 * MS)
    assert scheduler.stats.stage_ns_last == {
        "ingest": 0,
        "encode": 0,
        "associate": 3 * MS,
        "emit": 0,
    }


def test_a_clock_jump_back_reanchors_the_schedule():
    scheduler = TdmScheduler(40 * MS, clock=FakeClock())
    scheduler.run_due(T0 + 10_000 * MS)
    scheduler.run_due(T0 + 10_040 * MS)
    assert scheduler.run_due(T0 + 10_000 * MS) is None  # within a slice: just not due
    assert scheduler.stats.clock_resets == 0
    assert scheduler.run_due(T0) is None  # the bag looped
    assert scheduler.stats.clock_resets == 1
    assert scheduler.run_due(T0 + 40 * MS) == Slice(0, T0, T0 + 40 * MS)


def test_slice_length_changes_apply_from_the_next_slice():
    scheduler = TdmScheduler(40 * MS, clock=FakeClock())
    scheduler.run_due(T0)
    scheduler.set_slice_ns(100 * MS)
    assert scheduler.run_due(T0 + 40 * MS) is None
    assert scheduler.run_due(T0 + 100 * MS) == Slice(0, T0, T0 + 100 * MS)
    with pytest.raises(ConfigError):
        scheduler.set_slice_ns(10 * MS)
    assert scheduler.slice_ns == 100 * MS


def test_stage_errors_are_reported_and_the_other_stages_still_run():
    ran, errors = [], []

    def broken(_slice):
        raise RuntimeError("encoder failed")

    scheduler = TdmScheduler(
        40 * MS,
        clock=FakeClock(),
        encode=broken,
        emit=lambda s: ran.append(s),
        on_error=lambda stage, err: errors.append((stage, str(err))),
    )
    scheduler.run_due(T0)
    scheduler.run_due(T0 + 40 * MS)
    assert errors == [("encode", "encoder failed")]
    assert len(ran) == 1
    assert scheduler.stats.stage_errors == 1


def test_without_an_error_callback_a_stage_error_propagates_after_accounting():
    failures = ["boom"]

    def broken(_slice):
        if failures:
            raise RuntimeError(failures.pop())

    scheduler = TdmScheduler(40 * MS, clock=FakeClock(), ingest=broken)
    scheduler.run_due(T0)
    with pytest.raises(RuntimeError, match="boom"):
        scheduler.run_due(T0 + 40 * MS)
    assert scheduler.stats.slices_run == 1 and scheduler.stats.stage_errors == 1
    assert scheduler.run_due(T0 + 80 * MS) == Slice(1, T0 + 40 * MS, T0 + 80 * MS)


@settings(max_examples=200, deadline=None)
@given(slice_ms=st.integers(20, 500), steps=st.lists(st.integers(0, 2_000), max_size=60))
def test_slices_tile_stream_time_without_gaps_overlaps_or_a_backlog(slice_ms, steps):
    """Whatever the call pattern: the slices that ran are contiguous, every period up to now
    is covered exactly once (run or merged), and one call runs at most one slice."""
    length = slice_ms * MS
    scheduler = TdmScheduler(length, clock=FakeClock())
    scheduler.run_due(T0)
    now, covered_to = T0, T0
    for step in steps:
        now += step * MS
        ran = scheduler.run_due(now)
        if ran is not None:
            assert ran.start_ns == covered_to
            assert ran.end_ns - ran.start_ns == ran.periods * length
            covered_to = ran.end_ns
        assert covered_to == T0 + (now - T0) // length * length
    s = scheduler.stats
    assert s.slices_run + s.skipped == (covered_to - T0) // length
