"""Pacing and stream time for capture sources, and detection of gaps in a stream.

File sources have no clock of their own: the node paces them in real time (or at a rate
factor) with :class:`Pacer`, and stamps them in *stream time* with :class:`StreamClock`,
so consecutive chunks are exactly one period apart whatever the scheduling jitter.
Live devices carry capture times, with scheduling jitter: :class:`DeviceStreamStamper`
stamps their blocks as one stream that follows those times. :class:`GapDetector` turns
sequence numbers into counted gaps, so a lost block is reported instead of silently stitched
over.
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


@dataclass(frozen=True)
class Stamped:
    """One block of a live device stream: its stamp (ns), its index in the stream, and
    whether the stream stepped at it (``skipped`` blocks ahead, or back in time)."""

    stamp_ns: int
    sequence: int
    skipped: int = 0
    stepped_back: bool = False


class DeviceStreamStamper:
    """Stamps and numbers a live device's blocks as one unbroken stream.

    A device's capture times jitter: without a device clock a block is stamped when its
    callback runs, and the device-to-host offset is re-estimated when callbacks come late, so
    two blocks in a row may be stamped 10 ms or 70 ms apart. Taken as they come, such stamps
    repeat a block index and start a block inside the one before it, and a consumer that
    refuses audio it already holds (the fusion node) drops the overlap: audio lost. Here
    block *n* is stamped ``anchor + n * period``; ``n`` counts the blocks and the ones the
    device reports dropped, and the anchor follows the capture times by a ``gain`` of each
    block's error (clock drift, an offset re-estimated: PulseAudio's settles 0.2 s later
    in its first half second), back by at most ``back_ns`` a block and ahead by at most a
    period: a block starts at most ``back_ns`` inside the one before it, which consumers
    take as stamping jitter (the fusion node up to 20 ms), and PortAudio's blocks stamped
    40 ms early for two blocks in a row (seen through PulseAudio, every few seconds) move
    the stream 10 ms, not 40. A capture time further than ``step_ns`` from the stream moves
    it at once: ahead by whole blocks (lost without the device saying so: a gap in the
    sequence), or back (a clock that stepped: at least ``step_ns``, which a consumer takes as
    a new stream rather than as overlap).

    A stream resumed after a pause passes the first stream's ``origin_ns``: its first block
    is then numbered by the time since (:func:`sequence_at`), so the pause is a gap.
    """

    def __init__(
        self,
        period_ns: int,
        gain: float = 1 / 4,
        back_ns: int | None = None,
        step_ns: int = NS_PER_S,
        origin_ns: int | None = None,
    ) -> None:
        if period_ns <= 0 or not 0 < gain <= 1 or step_ns <= period_ns:
            raise ValueError("need period_ns > 0, 0 < gain <= 1 and step_ns > period_ns")
        self.period_ns = period_ns
        self.gain = gain
        self.back_ns = period_ns // 8 if back_ns is None else back_ns
        self.step_ns = step_ns
        self.origin_ns = origin_ns  # the stamp of block 0; the first block's when None
        self._anchor_ns: int | None = None
        self._sequence = -1

    def stamp(self, capture_ns: int, dropped: int = 0) -> Stamped:
        """The next block, captured at ``capture_ns``, after ``dropped`` blocks the device
        reported lost since the previous one."""
        if self._anchor_ns is None:
            if self.origin_ns is None:
                self.origin_ns = capture_ns
            self._sequence = max(0, sequence_at(capture_ns, self.origin_ns, self.period_ns))
            self._anchor_ns = capture_ns - self._sequence * self.period_ns
            return Stamped(capture_ns, self._sequence)
        sequence = self._sequence + 1 + dropped
        error = capture_ns - (self._anchor_ns + sequence * self.period_ns)
        skipped, back = 0, False
        if error > self.step_ns:
            skipped = error // self.period_ns
            sequence += skipped
            self._anchor_ns = capture_ns - sequence * self.period_ns
        elif error < -self.step_ns:
            back = True
            self._anchor_ns = capture_ns - sequence * self.period_ns
        else:
            slew = round(error * self.gain)
            self._anchor_ns += max(-self.back_ns, min(self.period_ns, slew))
        self._sequence = sequence
        return Stamped(self._anchor_ns + sequence * self.period_ns, sequence, skipped, back)
