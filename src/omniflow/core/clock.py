"""Map a capture device's clock onto the host's monotonic clock.

PortAudio stamps every callback with times on *its own* clock (``time_info``:
``currentTime`` and ``inputBufferAdcTime``). What that clock is depends on the
host API and the build: measured here, the ALSA host API (including its
``pulse`` plugin) reports ``CLOCK_REALTIME`` seconds, i.e. wall-clock time
that NTP may step; other back ends use their own stream clock. omniflow
stamps audio on ``time.monotonic()`` (and nodes convert that to ROS time), so
device times need a mapping.

How the offset is estimated
---------------------------
Inside a callback we read ``currentTime`` (device clock, "now") and
``time.monotonic()`` (host clock) one after the other. Were both read at the
very same instant, ``host_now - device_now`` would be the exact clock offset.
In reality the host reading comes a little *later*: scheduling, the callback
being run after a burst, the GIL. Those delays only ever add, never subtract,
so every observation is ``true_offset + delay`` with ``delay >= 0`` and the
*minimum* observed difference is the best estimate of the true offset (its
error is the smallest delay seen). This is the same lower-envelope reasoning
NTP-style clock filters use.

Two clocks never tick at exactly the same rate (crystals differ by tens of
ppm, and a wall clock is slewed by NTP), so the offset drifts slowly. The
minimum is therefore taken over a *sliding window* of recent observations
(``window_s`` seconds of host time): an old minimum expires and the estimate
follows the drift, lagging by at most ``drift_rate * window_s`` (50 ppm over
10 s is 0.5 ms). A monotonic deque keeps the window minimum in O(1)
amortised time per observation.

A wall clock can also *step* (NTP correction). A step that lowers the offset
is taken at once by the minimum; one that raises it would be hidden by the
old minimum until it expired, so when ``step_confirm`` consecutive
observations all lie more than ``step_threshold_s`` above the estimate, the
window is restarted from them. One late callback (a stall) is not enough to
trigger that.

Devices without a usable clock
------------------------------
Some ALSA/PulseAudio configurations report ``currentTime == 0`` and
``inputBufferAdcTime == 0`` on every callback. Zero (or non-finite) readings
are never fed to the estimate; :attr:`ClockMapper.device_clock_ok` turns
false when there has been no valid reading yet or the last ``zero_after``
readings were all unusable. :meth:`ClockMapper.capture_time` then falls back
to ``host_now - block_duration - input_latency``: the callback runs once the
last sample of the block has gone through the input latency, so the first
sample was captured one block duration earlier still. The fallback carries
the callback's scheduling jitter (typically a millisecond or two) but never
jumps by seconds.

This module is pure Python (no ROS) so it can be unit tested without rclpy.
"""

from __future__ import annotations

import math
from collections import deque

__all__ = ["ClockMapper"]


def _usable(device_time: float) -> bool:
    """Whether a device clock reading carries information (zero means 'not provided')."""
    return math.isfinite(device_time) and device_time != 0.0


class ClockMapper:
    """Estimate ``host - device`` clock offset and convert device times to host times.

    Args:
        window_s: Span of host time over which the minimum offset is taken.
            Longer windows find a smaller delay; shorter ones follow drift
            more closely. 10 s suits audio callbacks every 10-40 ms.
        zero_after: Consecutive unusable readings (0 or non-finite) after
            which the device clock is considered dead.
        step_threshold_s: An offset rise larger than this is a clock step
            candidate rather than a delivery delay.
        step_confirm: Consecutive step candidates needed to restart the window.

    Not thread-safe by itself: call :meth:`observe` from one thread (the
    audio callback); reading :attr:`offset` from another thread sees either
    the old or the new float, which is fine for stamping.
    """

    def __init__(
        self,
        window_s: float = 10.0,
        zero_after: int = 3,
        step_threshold_s: float = 0.25,
        step_confirm: int = 5,
    ) -> None:
        if not window_s > 0.0:
            raise ValueError(f"window_s must be > 0, got {window_s}")
        if zero_after < 1:
            raise ValueError(f"zero_after must be >= 1, got {zero_after}")
        if not step_threshold_s > 0.0:
            raise ValueError(f"step_threshold_s must be > 0, got {step_threshold_s}")
        if step_confirm < 1:
            raise ValueError(f"step_confirm must be >= 1, got {step_confirm}")
        self._window_s = window_s
        self._zero_after = zero_after
        self._step_threshold_s = step_threshold_s
        self._step_confirm = step_confirm
        # (host_now, offset) pairs with strictly increasing offsets: the front is the minimum.
        self._window: deque[tuple[float, float]] = deque()
        self._step_candidates: list[tuple[float, float]] = []
        self._unusable_run = 0
        self._observations = 0
        self._valid_observations = 0

    @property
    def offset(self) -> float | None:
        """Current estimate of ``host - device`` in seconds, or None before any valid reading."""
        return self._window[0][1] if self._window else None

    @property
    def device_clock_ok(self) -> bool:
        """True when device times can be mapped: a valid reading exists and none went dead since."""
        return bool(self._window) and self._unusable_run < self._zero_after

    @property
    def observations(self) -> int:
        """Number of :meth:`observe` calls, valid or not."""
        return self._observations

    @property
    def valid_observations(self) -> int:
        """Number of observations that carried a usable device time."""
        return self._valid_observations

    def reset(self) -> None:
        """Forget every observation (e.g. when a stream is reopened and its clock restarts)."""
        self._window.clear()
        self._step_candidates.clear()
        self._unusable_run = 0
        self._observations = 0
        self._valid_observations = 0

    def observe(self, device_now: float, host_now: float) -> None:
        """Record one pair of clock readings taken at (nearly) the same moment.

        ``device_now`` is the device clock (PortAudio ``time_info.currentTime``),
        ``host_now`` is ``time.monotonic()`` read right after it. A zero or
        non-finite ``device_now`` counts as "no device clock" and is not used.
        """
        self._observations += 1
        if not _usable(device_now):
            self._unusable_run += 1
            return
        self._unusable_run = 0
        self._valid_observations += 1
        offset = host_now - device_now

        current = self.offset
        if current is not None and offset > current + self._step_threshold_s:
            # Either a long stall or the device clock stepped back; only a run of
            # such readings is trusted to be a step.
            self._step_candidates.append((host_now, offset))
            if len(self._step_candidates) < self._step_confirm:
                return
            candidates = self._step_candidates
            self._window.clear()
            self._step_candidates = []
            for cand_host, cand_offset in candidates:
                self._push(cand_host, cand_offset)
            return
        self._step_candidates.clear()
        self._push(host_now, offset)

    def _push(self, host_now: float, offset: float) -> None:
        """Add to the monotonic deque and expire entries older than the window."""
        window = self._window
        while window and window[-1][1] >= offset:
            window.pop()
        window.append((host_now, offset))
        horizon = host_now - self._window_s
        while len(window) > 1 and window[0][0] < horizon:
            window.popleft()

    def to_host(self, device_time: float) -> float:
        """Convert a device-clock time to ``time.monotonic()`` seconds.

        Raises:
            RuntimeError: no valid observation has been made yet (a caller bug:
                check :attr:`device_clock_ok` or use :meth:`capture_time`).
        """
        offset = self.offset
        if offset is None:
            raise RuntimeError("ClockMapper.to_host() called before any valid observe()")
        return device_time + offset

    def capture_time(
        self,
        adc_time: float,
        host_now: float,
        block_duration: float,
        input_latency: float,
    ) -> float:
        """Host time of a block's first sample, with the fallback for clockless devices.

        Args:
            adc_time: PortAudio ``inputBufferAdcTime`` (device clock) of the first sample.
            host_now: ``time.monotonic()`` read in the same callback.
            block_duration: Frames in the block divided by the sample rate.
            input_latency: The stream's reported input latency in seconds.

        Uses :meth:`to_host` when the device clock works and ``adc_time`` is
        usable; otherwise ``host_now - block_duration - input_latency``.
        """
        if self.device_clock_ok and _usable(adc_time):
            return self.to_host(adc_time)
        return host_now - block_duration - input_latency
