"""The nodes that own a device (microphone, camera, speaker), over the shared lifecycle base.

A device node opens its device (or file) on configure, runs one worker thread while active
(for capture: read, stamp, publish, so a slow subscriber or executor never delays the read),
stops the thread on deactivate and releases the device on cleanup. A device that fails is
re-opened after a pause; nothing ends the process but a shutdown. Counters of what was done
and lost go out as standard diagnostics once a second.

Subclasses supply the parameters, the device, the publishers and one worker step.
"""

from __future__ import annotations

import threading
import time

from omniflow.core.params import ParamSpec
from omniflow.core.stats import DeviceStats
from omniflow.core.timing import NS_PER_S
from omniflow.errors import EngineError, SinkError, SourceError, SourceExhausted
from omniflow.ros.lifecycle import AUTOSTART, Diagnosis, LifecycleBase

COMMON_PARAMS = (
    AUTOSTART,
    ParamSpec("frame_id", "", "frame_id written in the headers (empty: the node's default)"),
    ParamSpec(
        "diagnostics_period",
        1.0,
        "Period of the /diagnostics status",
        unit="s",
        minimum=0.1,
        maximum=60.0,
        read_only=True,
    ),
)

# Failures of a device that a re-open may cure.
DEVICE_ERRORS = (SourceError, SinkError, EngineError)
# Pause between attempts to re-open a device that failed.
_RETRY_S = 1.0


class DeviceNode(LifecycleBase):
    """Base of the nodes that own a device; see the subclasses for their ROS contract.

    ``stats`` is the subclass's :class:`DeviceStats` (or a richer one), set before calling
    this constructor.
    """

    default_frame_id = ""
    stats: DeviceStats

    def __init__(self, node_name: str, specs: tuple[ParamSpec, ...], **kwargs) -> None:
        self._device = None
        super().__init__(node_name, specs + COMMON_PARAMS, **kwargs)

    # ----------------------------------------------------------------- subclass interface
    def open_device(self) -> object:
        """Create and open the device from ``self.params`` (an object with ``open()``,
        ``close()`` and ``describe()``); raise one of DEVICE_ERRORS or ConfigError."""
        raise NotImplementedError

    def create_outputs(self) -> None:
        """Create the lifecycle publishers."""
        raise NotImplementedError

    def destroy_outputs(self) -> None:
        """Destroy what create_outputs made."""
        raise NotImplementedError

    def start_stream(self) -> None:
        """Reset per-activation state (pacing, stream clock) before the thread starts."""

    def stop_stream(self) -> None:
        """Interrupt what the worker is doing (called before it is joined on deactivate)."""

    def step(self, stop: threading.Event) -> None:
        """One unit of work: read, stamp and publish one item (called in a loop while
        active); return soon after ``stop`` is set."""
        raise NotImplementedError

    # ----------------------------------------------------------------- helpers
    @property
    def device(self):
        """The open device (None while unconfigured)."""
        return self._device

    @property
    def frame_id(self) -> str:
        return self.params["frame_id"] or self.default_frame_id

    def stamp_from_monotonic(self, capture_monotonic: float) -> int:
        """Map a capture time on time.monotonic() onto the node clock, in nanoseconds."""
        age_s = time.monotonic() - capture_monotonic
        return self.now_ns() - int(age_s * NS_PER_S)

    # ----------------------------------------------------------------- lifecycle
    def configure(self) -> str:
        try:
            self._device = self.open_device()
        except Exception as err:
            self.stats.status, self.stats.error = "not configured", str(err)
            raise
        self.create_outputs()
        self.stats.status, self.stats.error = f"configured: {self._device.describe()}", ""
        return self._device.describe()

    def activate(self) -> None:
        self.start_stream()
        self.start_worker(self._run, "capture", wake=self.stop_stream)
        self.stats.status = f"streaming: {self._device.describe()}"

    def deactivate(self) -> None:
        self.stop_workers()
        self.stats.status = f"paused: {self._device.describe()}"

    def release_resources(self) -> None:
        if self._device is not None:
            self._device.close()
            self._device = None
        if self.configured:
            self.destroy_outputs()
        self.stats.status = "not configured"

    # ----------------------------------------------------------------- worker thread
    def _run(self) -> None:
        """The worker loop: never lets an exception end the process."""
        logger = self.get_logger()
        while not self.stopping.is_set():
            try:
                self.step(self.stopping)
                if self.stats.error:
                    logger.info("device recovered")
                    self.stats.error = ""
            except SourceExhausted as err:
                self.stats.status = f"finished: {err}"
                logger.info(f"{err}; nothing more to publish (set loop to repeat)")
                return
            except DEVICE_ERRORS as err:
                self.stats.errors += 1
                self.stats.error = str(err)
                logger.error(f"{err}; re-opening in {_RETRY_S} s", throttle_duration_sec=10.0)
                self._reopen()
            except Exception as err:  # noqa: BLE001 - keep working; report what failed
                self.stats.errors += 1
                self.stats.error = f"{type(err).__name__}: {err}"
                logger.error(f"worker step failed: {self.stats.error}", throttle_duration_sec=10.0)
                self.stopping.wait(_RETRY_S)

    def _reopen(self) -> None:
        if self.stopping.wait(_RETRY_S):
            return
        try:
            self._device.close()
            self._device.open()
            self.start_stream()
        except DEVICE_ERRORS as err:
            self.stats.errors += 1
            self.stats.error = str(err)

    # ----------------------------------------------------------------- reporting
    def summary(self) -> dict[str, object]:
        return {
            "state": self.state_text,
            "status": self.stats.status,
            "error": self.stats.error,
            **dict(self.stats.values()),
        }

    def diagnosis(self) -> Diagnosis:
        return Diagnosis(
            self.stats.level, self.stats.message, self.hardware_id(), dict(self.stats.values())
        )

    def hardware_id(self) -> str:
        """What the device is, for diagnostics."""
        return self._device.describe() if self._device is not None else ""
