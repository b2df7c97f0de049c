"""Pacing and stream time for capture sources, and detection of gaps in a stream.

File sources have no clock of their own: the node paces them in real time (or at a rate
factor) with :class:`Pacer`, and stamps them in *stream time* with :class:`StreamClock`,
so consecutive chunks are exactly one period apart whatever the scheduling jitter.
Live devices carry capture times; :class:`GapDetector` turns those (or sequence numbers)
into counted gaps, so a lost block is reported instead of silently stitched over.
No ROS imports: stamps are integer nanoseconds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

# Units and the stream format, defined once for the whole package.
NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000
#: The one sample rate the detectors and recognisers accept; capture resamples to it.
SAMPLE_RATE = 16_000
#: Nanoseconds per sample at :data:`SAMPLE_RATE`: exact (62 500), so stamps never drift.
NS_PER_SAMPLE = NS_PER_S // SAMPLE_RATE
#: One audio chunk: 40 ms, 640 samples at 16 kHz.
CHUNK_MS = 40
CHUNK_SAMPLES = SAMPLE_RATE * CHUNK_MS // 1000


class StreamClock:
    """Stream time of a paced source: a start stamp plus the sum of the periods so far.

    The period may change between ticks (a camera's fps is a live parameter); each tick
    advances by the period in force when it is taken.
    """

    def __init__(self, start_ns: int) -> None:
        self._next_ns = start_ns
        self._count = 0

    @property
    def count(self) -> int:
        """How many ticks were taken."""
        return self._count

    def tick(self, period_ns: int) -> int:
        """Return the stamp of the next item and advance by ``period_ns``."""
        stamp = self._next_ns
        self._next_ns += period_ns
        self._count += 1
        return stamp


class Pacer:
    """Releases items at a steady period on the monotonic clock, sped up by a rate factor.

    Deadlines are absolute (start + n * period / rate), so jitter does not accumulate. When
    the caller falls more than ``max_lag`` periods behind (a stall, a slow consumer), the
    schedule is reset to now instead of bursting out the backlog; ``resyncs`` counts those.
    Waiting is interruptible through a ``threading.Event``.
    """

    def __init__(
        self,
        period_s: float,
        rate: float = 1.0,
        max_lag: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not (period_s > 0 and rate > 0 and max_lag > 0):
            raise ValueError("period, rate and max_lag must be positive")
        self._period = period_s
        self._rate = rate
        self._max_lag = max_lag
        self._clock = clock
        self._deadline: float | None = None
        self.resyncs = 0

    @property
    def interval_s(self) -> float:
        """Wall time between two releases."""
        return self._period / self._rate

    def set_period(self, period_s: float) -> None:
        """Change the period; the pending release is re-timed to the new interval, so going
        from 1 to 30 frames/s does not wait out the old second."""
        if not period_s > 0:
            raise ValueError("period must be positive")
        if self._deadline is not None:
            self._deadline += (period_s - self._period) / self._rate
        self._period = period_s

    def next_delay(self) -> float:
        """Seconds to wait before the next release (0 when it is due), advancing the schedule."""
        now = self._clock()
        if self._deadline is None:
            self._deadline = now
        elif now - self._deadline > self._max_lag * self.interval_s:
            self._deadline = now
            self.resyncs += 1
        delay = max(0.0, self._deadline - now)
        self._deadline += self.interval_s
        return delay

    def wait(self, stop: threading.Event) -> bool:
        """Sleep until the next release; False when ``stop`` was set meanwhile."""
        delay = self.next_delay()
        if delay > 0:
            return not stop.wait(delay)
        return not stop.is_set()


@dataclass
class GapReport:
    """What one observation told about continuity: how many items were missing before it,
    whether it repeated the previous index, or went back in time."""

    missing: int = 0
    repeated: bool = False
    backwards: bool = False


class GapDetector:
    """Counts gaps in a stream from the sequence numbers of the items that arrived.

    Sequence numbers are block indices in stream time, so a jump of k > 1 means k - 1 blocks
    are missing. A sequence that goes backwards (a restarted source, a looping bag) is counted
    and restarts the tracking; a repeated number (capture-time jitter of half a period) is
    counted apart, as neither a gap nor a restart.
    """

    def __init__(self) -> None:
        self._last: int | None = None
        self.received = 0
        self.gaps = 0
        self.missing = 0
        self.restarts = 0
        self.repeats = 0

    def observe(self, sequence: int) -> GapReport:
        """Account for one arrived item."""
        self.received += 1
        report = GapReport()
        if self._last is not None:
            step = sequence - self._last
            if step > 1:
                report.missing = step - 1
                self.gaps += 1
                self.missing += report.missing
            elif step == 0:
                report.repeated = True
                self.repeats += 1
            elif step < 0:
                report.backwards = True
                self.restarts += 1
        self._last = sequence
        return report


def sequence_at(capture_s: float, origin_s: float, period_s: float) -> int:
    """The block index of a capture time in a stream that started at ``origin_s``."""
    return round((capture_s - origin_s) / period_s)
