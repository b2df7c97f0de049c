"""Shared lifecycle plumbing of the nodes that own a device (microphone, camera, speaker).

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
from collections.abc import Callable

import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.exceptions import InvalidParameterTypeException, InvalidParameterValueException
from rclpy.executors import Executor, ExternalShutdownException, SingleThreadedExecutor
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.node import Node

from omniflow.core.params import ParamSpec
from omniflow.core.stats import DeviceStats
from omniflow.core.timing import NS_PER_S
from omniflow.errors import ConfigError, EngineError, SinkError, SourceError, SourceExhausted
from omniflow.ros.conversions import header
from omniflow.ros.params import declare_parameters, parameter_values

COMMON_PARAMS = (
    ParamSpec("autostart", True,
              "Configure and activate at start-up; false leaves the transitions to a "
              "lifecycle manager", read_only=True),
    ParamSpec("frame_id", "", "frame_id written in the headers (empty: the node's default)"),
    ParamSpec("diagnostics_period", 1.0, "Period of the /diagnostics status", unit="s",
              minimum=0.1, maximum=60.0, read_only=True),
)

# Failures of a device that a re-open may cure.
DEVICE_ERRORS = (SourceError, SinkError, EngineError)
# Time to let the worker thread finish its step when the node deactivates.
_JOIN_TIMEOUT_S = 3.0
# Pause between attempts to re-open a device that failed.
_RETRY_S = 1.0


class DeviceNode(LifecycleNode):
    """Base of the nodes that own a device; see the subclasses for their ROS contract.

    ``stats`` is the subclass's :class:`DeviceStats` (or a richer one), set before calling
    this constructor.
    """

    default_frame_id = ""
    stats: DeviceStats

    def __init__(self, node_name: str, specs: tuple[ParamSpec, ...], **kwargs) -> None:
        super().__init__(node_name, **kwargs)
        self._specs = specs + COMMON_PARAMS
        self._configured = False
        self._stop = threading.Event()
        self._worker: threading.Thread | None = None
        self._device = None
        declare_parameters(self, self._specs, apply=self._on_parameters)
        self.params = parameter_values(self, self._specs)
        self._diagnostics = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.create_timer(self.params["diagnostics_period"], self._publish_diagnostics)

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

    def apply_live(self, changes: dict[str, object]) -> None:
        """Apply live parameter changes (already validated) to the running stream."""

    # ----------------------------------------------------------------- helpers
    @property
    def device(self):
        """The open device (None while unconfigured)."""
        return self._device

    @property
    def frame_id(self) -> str:
        return self.params["frame_id"] or self.default_frame_id

    def now_ns(self) -> int:
        """The node clock (sim time under use_sim_time) in nanoseconds."""
        return self.get_clock().now().nanoseconds

    def stamp_from_monotonic(self, capture_monotonic: float) -> int:
        """Map a capture time on time.monotonic() onto the node clock, in nanoseconds."""
        age_s = time.monotonic() - capture_monotonic
        return self.now_ns() - int(age_s * NS_PER_S)

    # ----------------------------------------------------------------- parameters
    def _on_parameters(self, changes: dict[str, object]) -> str | None:
        by_name = {spec.name: spec for spec in self._specs}
        if self._configured:
            frozen = [name for name in changes if not by_name[name].live]
            if frozen:
                return (f"{', '.join(frozen)} applied on configure; the node is configured: "
                        "deactivate and clean it up first, then configure again")
        self.params.update(changes)
        if self._configured:
            self.apply_live(changes)
        return None

    # ----------------------------------------------------------------- lifecycle
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            self._device = self.open_device()
        except (*DEVICE_ERRORS, ConfigError) as err:
            self.stats.status, self.stats.error = "not configured", str(err)
            self.get_logger().error(f"cannot configure: {err}")
            return TransitionCallbackReturn.FAILURE
        self.create_outputs()
        self._configured = True
        self.stats.status, self.stats.error = f"configured: {self._device.describe()}", ""
        self.get_logger().info(f"configured: {self._device.describe()}")
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.start_stream()
        self._stop.clear()
        self._worker = threading.Thread(target=self._run, name=f"{self.get_name()}-capture",
                                        daemon=True)
        self._worker.start()
        self.stats.status = f"streaming: {self._device.describe()}"
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._stop_worker()
        self.stats.status = f"paused: {self._device.describe()}"
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._release()
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._release()
        return TransitionCallbackReturn.SUCCESS

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._release()
        return TransitionCallbackReturn.SUCCESS

    def release(self) -> None:
        """Stop the worker and free the device; safe in any state (used at process exit)."""
        self._release()

    def _release(self) -> None:
        self._stop_worker()
        if self._device is not None:
            self._device.close()
            self._device = None
        if self._configured:
            self.destroy_outputs()
            self._configured = False
        self.stats.status = "not configured"

    def _stop_worker(self) -> None:
        self._stop.set()
        if self._worker is not None:
            self.stop_stream()
            self._worker.join(_JOIN_TIMEOUT_S)
            if self._worker.is_alive():
                self.get_logger().error(
                    f"worker thread did not stop within {_JOIN_TIMEOUT_S} s")
            self._worker = None

    # ----------------------------------------------------------------- worker thread
    def _run(self) -> None:
        """The worker loop: never lets an exception end the process."""
        logger = self.get_logger()
        while not self._stop.is_set():
            try:
                self.step(self._stop)
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
                logger.error(f"{err}; re-opening in {_RETRY_S} s",
                             throttle_duration_sec=10.0)
                self._reopen()
            except Exception as err:  # noqa: BLE001 - keep working; report what failed
                self.stats.errors += 1
                self.stats.error = f"{type(err).__name__}: {err}"
                logger.error(f"worker step failed: {self.stats.error}",
                             throttle_duration_sec=10.0)
                self._stop.wait(_RETRY_S)

    def _reopen(self) -> None:
        if self._stop.wait(_RETRY_S):
            return
        try:
            self._device.close()
            self._device.open()
            self.start_stream()
        except DEVICE_ERRORS as err:
            self.stats.errors += 1
            self.stats.error = str(err)

    # ----------------------------------------------------------------- diagnostics
    def _publish_diagnostics(self) -> None:
        status = DiagnosticStatus(
            level=bytes([self.stats.level]), name=f"omniflow: {self.get_fully_qualified_name()}",
            message=self.stats.message, hardware_id=self.hardware_id(),
            values=[KeyValue(key=key, value=value) for key, value in self.stats.values()])
        self._diagnostics.publish(
            DiagnosticArray(header=header(self.now_ns(), ""), status=[status]))

    def hardware_id(self) -> str:
        """What the device is, for diagnostics."""
        return self._device.describe() if self._device is not None else ""


def run_node(node_factory: Callable[[], Node], args: list[str] | None = None, *,
             executor_factory: Callable[[], Executor] = SingleThreadedExecutor) -> int:
    """Run a node until shutdown; the entry point of the node executables.

    The node has a ``params`` dict and a ``release()`` that frees what it holds in any state
    (:class:`DeviceNode`, the fusion node, the power manager); a lifecycle node with
    ``autostart`` configures and activates itself. It spins on a single-threaded
    executor by default: its callbacks only buffer, workers do the rest on their own threads.
    A node whose callbacks wait (the dialogue node's action goals) passes a multi-threaded one.

    Returns 2 when the node cannot start (a bad parameter), with the reason logged.
    """
    rclpy.init(args=args)
    try:
        node = node_factory()
    except (InvalidParameterValueException, InvalidParameterTypeException, ConfigError) as err:
        rclpy.logging.get_logger("omniflow").fatal(f"cannot start: {err}")
        rclpy.try_shutdown()
        return 2
    executor = executor_factory()
    executor.add_node(node)
    if isinstance(node, LifecycleNode) and node.params.get("autostart", False):
        if node.trigger_configure() == TransitionCallbackReturn.SUCCESS:
            node.trigger_activate()
    try:
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        node.release()
        node.destroy_node()
        rclpy.try_shutdown()
    return 0
