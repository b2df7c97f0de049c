"""The TDM scheduler: stream time cut into fixed slices, each running the fusion stages.

Every slice runs four stages in order, each a plain callable taking the :class:`Slice`:
``ingest`` (move what the callbacks buffered into the ring), ``encode`` (encode what is due),
``associate`` (request and poll associations) and ``emit`` (hand out decisions and text).
A missing stage is skipped.

Timing. Slice i covers stream time [origin + i * slice_ns, origin + (i + 1) * slice_ns) and
is due once ``now_ns`` reaches its end; the caller (the node's timer) calls
:meth:`TdmScheduler.run_due` with the current stream time (the node clock, so sim time and
bag replay work). The origin is the first ``now_ns`` seen (or :meth:`start`).

Policy when behind (a slow slice, a stalled executor, a jump forward in sim time): slices
never queue. If k > 1 slices are due at once, ONE merged slice runs, covering all k periods
([start of the first, end of the last)), ``merged`` is incremented and the k - 1 slices it
replaced are counted as ``skipped``. The stages see the whole span in the slice, so nothing
in stream time is lost, only slice boundaries. The cost of being behind is therefore one
slice, whatever k is: memory and work are bounded.

Overruns: a slice whose own work (all its stages, measured with ``clock``, a monotonic
nanosecond counter that tests replace with a fake) took longer than ``slice_ns`` is counted
in ``overruns``; the next call will then find k > 1 slices due and merge them.

Clock jumps back (a looping bag, a sim clock restarted) by more than one slice re-anchor the
schedule at the new time (``clock_resets``); nothing runs for the call that detected it.

Stage errors: with an ``on_error`` callback, an exception in a stage is counted
(``stage_errors``), passed to the callback with the stage name, and the remaining stages
still run; without one, it propagates after the slice's statistics are recorded.
No ROS imports.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from omniflow.core.timing import NS_PER_MS
from omniflow.errors import ConfigError

__all__ = [
    "DEFAULT_SLICE_NS",
    "MAX_SLICE_NS",
    "MIN_SLICE_NS",
    "STAGES",
    "SchedulerStats",
    "Slice",
    "TdmScheduler",
    "check_slice_ns",
]

DEFAULT_SLICE_NS = 40 * NS_PER_MS
MIN_SLICE_NS = 20 * NS_PER_MS
MAX_SLICE_NS = 500 * NS_PER_MS
#: The stages of a slice, in the order they run.
STAGES: tuple[str, ...] = ("ingest", "encode", "associate", "emit")


def check_slice_ns(slice_ns: object) -> int:
    """Return ``slice_ns`` as an int if it is an allowed slice length, else raise
    ConfigError naming the allowed range."""
    if (
        isinstance(slice_ns, bool)
        or not isinstance(slice_ns, int)
        or not MIN_SLICE_NS <= slice_ns <= MAX_SLICE_NS
    ):
        raise ConfigError(
            f"slice_ns must be an integer in [{MIN_SLICE_NS}, {MAX_SLICE_NS}] "
            f"({MIN_SLICE_NS // NS_PER_MS}-{MAX_SLICE_NS // NS_PER_MS} ms), "
            f"got {slice_ns!r}"
        )
    return slice_ns


@dataclass(frozen=True, slots=True)
class Slice:
    """The span of stream time one run of the stages covers.

    ``index`` is the number of the first slice period covered since the origin; ``periods``
    is 1 for a normal slice and k for a merged one.
    """

    index: int
    start_ns: int
    end_ns: int
    periods: int = 1

    @property
    def merged(self) -> bool:
        """True when this slice stands for several overdue ones."""
        return self.periods > 1


def _per_stage() -> dict[str, int]:
    return dict.fromkeys(STAGES, 0)


@dataclass
class SchedulerStats:
    """Counters and work times (ns, measured with the scheduler's clock) for diagnostics."""

    slices_run: int = 0  # runs of the stages (a merged slice counts once)
    merged: int = 0  # of those, merged slices
    skipped: int = 0  # slice periods folded into merged slices (k - 1 each)
    overruns: int = 0  # slices whose work took longer than slice_ns
    clock_resets: int = 0  # now_ns went back by more than a slice: schedule re-anchored
    stage_errors: int = 0  # exceptions raised by stages
    work_ns_last: int = 0
    work_ns_max: int = 0
    work_ns_total: int = 0
    stage_ns_last: dict[str, int] = field(default_factory=_per_stage)
    stage_ns_max: dict[str, int] = field(default_factory=_per_stage)
    stage_ns_total: dict[str, int] = field(default_factory=_per_stage)

    def as_dict(self) -> dict[str, int]:
        """Every value flattened by name (``stage_ns_total.encode`` etc.)."""
        flat: dict[str, int] = {}
        for name, value in vars(self).items():
            if isinstance(value, dict):
                flat.update({f"{name}.{stage}": ns for stage, ns in value.items()})
            else:
                flat[name] = value
        return flat


Stage = Callable[[Slice], object]


class TdmScheduler:
    """Runs the fusion stages once per due slice (see the module docstring for the policy).

    Complexity per call: O(1) besides the stages, whatever the backlog. Not thread-safe: one
    timer callback calls it.
    """

    def __init__(
        self,
        slice_ns: int = DEFAULT_SLICE_NS,
        *,
        ingest: Stage | None = None,
        encode: Stage | None = None,
        associate: Stage | None = None,
        emit: Stage | None = None,
        clock: Callable[[], int] = time.perf_counter_ns,
        on_error: Callable[[str, Exception], None] | None = None,
    ) -> None:
        self._slice_ns = check_slice_ns(slice_ns)
        self._stages: tuple[tuple[str, Stage | None], ...] = (
            ("ingest", ingest),
            ("encode", encode),
            ("associate", associate),
            ("emit", emit),
        )
        self._clock = clock
        self._on_error = on_error
        self._origin: int | None = None
        self._index = 0  # next slice period to run
        self._next_start = 0  # its start in stream time
        self.stats = SchedulerStats()

    @property
    def slice_ns(self) -> int:
        """The slice length in force."""
        return self._slice_ns

    @property
    def next_due_ns(self) -> int | None:
        """Stream time at which the next slice is due (None before the first call)."""
        return None if self._origin is None else self._next_start + self._slice_ns

    def set_slice_ns(self, slice_ns: int) -> None:
        """Change the slice length (20-500 ms); applies from the next slice on."""
        self._slice_ns = check_slice_ns(slice_ns)

    def start(self, now_ns: int) -> None:
        """Anchor the schedule: the first slice covers [now_ns, now_ns + slice_ns)."""
        self._origin = now_ns
        self._next_start = now_ns
        self._index = 0

    def run_due(self, now_ns: int) -> Slice | None:
        """Run the slice that is due at ``now_ns`` (merged if several are), or nothing.

        Returns the slice that ran, or None when none was due.
        """
        if self._origin is None:
            self.start(now_ns)
            return None
        length = self._slice_ns
        if now_ns < self._next_start - length:
            self.stats.clock_resets += 1
            self.start(now_ns)
            return None
        due = (now_ns - self._next_start) // length
        if due < 1:
            return None
        current = Slice(self._index, self._next_start, self._next_start + due * length, due)
        self._index += due
        self._next_start = current.end_ns
        stats = self.stats
        stats.slices_run += 1
        if due > 1:
            stats.merged += 1
            stats.skipped += due - 1
        self._run_stages(current)
        return current

    def _run_stages(self, current: Slice) -> None:
        stats = self.stats
        clock = self._clock
        began = clock()
        try:
            for name, stage in self._stages:
                if stage is None:
                    stats.stage_ns_last[name] = 0
                    continue
                t0 = clock()
                try:
                    stage(current)
                except Exception as err:  # counted and reported (or re-raised), never hidden
                    stats.stage_errors += 1
                    if self._on_error is None:
                        raise
                    self._on_error(name, err)
                finally:
                    spent = clock() - t0
                    stats.stage_ns_last[name] = spent
                    stats.stage_ns_total[name] += spent
                    stats.stage_ns_max[name] = max(stats.stage_ns_max[name], spent)
        finally:
            work = clock() - began
            stats.work_ns_last = work
            stats.work_ns_total += work
            stats.work_ns_max = max(stats.work_ns_max, work)
            if work > self._slice_ns:
                stats.overruns += 1
