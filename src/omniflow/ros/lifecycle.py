"""The base of every omniflow node: parameters, status, diagnostics, workers and release.

Every node of the graph is a lifecycle node that acquires what it owns (a device, a model)
on configure, runs its worker threads while active, stops them on deactivate and frees
everything on cleanup, shutdown, error or process exit. What they all share lives here, once:

- parameters declared from :class:`~omniflow.core.params.ParamSpec` tuples, validated on
  set; a change to a parameter that applies on configure is refused while configured, live
  ones reach :meth:`LifecycleBase.apply_live`;
- ``now_ns()`` on the node clock (sim time under ``use_sim_time``);
- parameters given at start-up that the node does not have, or a parameters file none of
  whose sections applies to it, named in a warning with the closest known name and in the
  status (``parameter_problems``);
- a latched ``~/status`` (std_msgs/String, JSON of :meth:`LifecycleBase.summary`) and a
  ``/diagnostics`` status built by :meth:`LifecycleBase.diagnosis`, once a period;
- worker threads started on activate and joined with a timeout that is logged when missed;
- with :attr:`LifecycleBase.python_heap` set (the node executables set it: the process is
  the node's), the Python heap settled at the end of each transition and CPython's free
  lists emptied on the diagnostics timer (:class:`~omniflow.engines.memory.PythonHeap`);
- :meth:`LifecycleBase.release`, safe in any state, which never publishes once the ROS
  context is gone (the node executables keep it until the node is released, see
  ``omniflow.ros.run``; a process that embeds a node may shut it down first).

Subclasses implement :meth:`configure` (raise a ``CONFIGURE_ERRORS`` error to refuse),
:meth:`activate`, :meth:`deactivate` and :meth:`release_resources`; the transitions around
them are written here.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.callback_groups import CallbackGroup
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from std_msgs.msg import String

from omniflow.core.params import ParamSpec
from omniflow.core.stats import OK, WARN
from omniflow.engines.memory import PythonHeap
from omniflow.errors import ConfigError, EngineError, SinkError, SourceError
from omniflow.ros.conversions import header
from omniflow.ros.params import declare_parameters, parameter_values
from omniflow.ros.qos import LATCHED

# Every lifecycle node's own start-up switch (a lifecycle manager sets it false).
AUTOSTART = ParamSpec(
    "autostart",
    True,
    "Configure and activate at start-up; false leaves the transitions to a lifecycle manager",
    read_only=True,
)
# What configure() may raise to refuse the transition (with the reason logged).
CONFIGURE_ERRORS = (ConfigError, EngineError, SourceError, SinkError)
# Time a worker thread gets to finish its step when the node deactivates.
JOIN_TIMEOUT_S = 3.0


@dataclass
class Diagnosis:
    """One node's ``/diagnostics`` status, as plain values."""

    level: int = OK
    message: str = ""
    hardware_id: str = ""
    values: dict[str, object] = field(default_factory=dict)


class LifecycleBase(LifecycleNode):
    """Shared lifecycle plumbing; see each subclass for its ROS contract.

    Publishes ``~/status`` (std_msgs/String, latched) and ``/diagnostics``
    (diagnostic_msgs/DiagnosticArray) every ``diagnostics_period_s``, or every
    ``diagnostics_period`` seconds where the node declares that parameter; with
    ``diagnostics_period_s=None`` (and no such parameter) there is no timer and the node
    calls :meth:`report` itself (the power manager reports with each decision).
    """

    def __init__(
        self,
        node_name: str,
        specs: tuple[ParamSpec, ...],
        *,
        diagnostics_period_s: float | None = 1.0,
        callback_group: CallbackGroup | None = None,
        **kwargs,
    ) -> None:
        super().__init__(node_name, **kwargs)
        self.specs = specs
        self._by_name = {spec.name: spec for spec in specs}
        self.state_text = "unconfigured"
        self._configured = False
        self.stopping = threading.Event()
        # Set by the process that owns the node (omniflow.ros.run): gc is process-wide.
        self.python_heap: PythonHeap | None = None
        self._workers: list[tuple[threading.Thread, Callable[[], None] | None]] = []
        # Unknown names and parameters files that miss the node: in the status until a restart.
        self.parameter_problems = declare_parameters(self, specs, apply=self._on_parameters)
        self.params = parameter_values(self, specs)
        self._status_pub = self.create_publisher(String, "~/status", LATCHED)
        self._diagnostics_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        period_s = self.params.get("diagnostics_period", diagnostics_period_s)
        if period_s is not None:
            self.create_timer(period_s, self.report, callback_group=callback_group)

    # ----------------------------------------------------------------- subclass interface
    def configure(self) -> str:
        """Acquire what the node owns and create its lifecycle publishers; return a short
        description for the log and status. Raise one of ``CONFIGURE_ERRORS`` to refuse."""
        return ""

    def activate(self) -> None:
        """Start the node's work (typically :meth:`start_worker`); the lifecycle publishers
        are already active, so what it publishes goes out."""

    def deactivate(self) -> None:
        """Stop the node's work; the default joins the workers."""
        self.stop_workers()

    def release_resources(self) -> None:
        """Free what :meth:`configure` acquired; called in any state, so check for None."""

    def apply_live(self, changes: dict[str, object]) -> str | None:
        """Apply accepted parameter changes (already in ``self.params``) to the running node;
        return a reason to refuse them instead."""
        return None

    def summary(self) -> dict[str, object]:
        """What ``~/status`` and diagnostics report (JSON-serialisable values)."""
        return {"state": self.state_text}

    def diagnosis(self) -> Diagnosis:
        """The ``/diagnostics`` status; the default: OK while active, WARN otherwise."""
        return Diagnosis(
            OK if self.state_text == "active" else WARN,
            self.state_text,
            self.get_name(),
            self.summary(),
        )

    # ----------------------------------------------------------------- helpers
    @property
    def configured(self) -> bool:
        """Whether :meth:`configure` succeeded and nothing has released it since."""
        return self._configured

    def now_ns(self) -> int:
        """The node clock (sim time under use_sim_time) in nanoseconds."""
        return self.get_clock().now().nanoseconds

    def set_state(self, text: str) -> None:
        """Change the state text and publish the status at once."""
        self.state_text = text
        self.publish_status()

    def publish_status(self) -> None:
        if self.context.ok():
            status = self.summary()
            if self.parameter_problems:
                status["parameter_problems"] = self.parameter_problems
            if self.python_heap is not None:
                status["python_heap"] = vars(self.python_heap.stats)
            self._status_pub.publish(String(data=json.dumps(status, sort_keys=True, default=str)))

    def report(self) -> None:
        """Publish diagnostics and status (the diagnostics timer's callback)."""
        if not self.context.ok():
            return
        d = self.diagnosis()
        status = DiagnosticStatus(
            level=bytes([d.level]),
            name=f"omniflow: {self.get_fully_qualified_name()}",
            message=d.message,
            hardware_id=d.hardware_id,
            values=[KeyValue(key=k, value=str(v)) for k, v in d.values.items()],
        )
        self._diagnostics_pub.publish(
            DiagnosticArray(header=header(self.now_ns(), ""), status=[status])
        )
        self.publish_status()
        if self.python_heap is not None:
            self.python_heap.tick()

    def heap_changed(self) -> None:
        """What the node holds for good changed (the end of a transition): collect what was
        dropped and settle the Python heap again. A live parameter swaps a number or a
        small configuration, never an engine, and the power manager sends its settings
        again every 30 s: it leaves the heap settled."""
        if self.python_heap is not None:
            self.python_heap.settle()

    def start_worker(
        self, target: Callable[[], None], name: str, wake: Callable[[], None] | None = None
    ) -> threading.Thread:
        """Start a daemon thread that runs until :attr:`stopping` is set; ``wake`` is called
        when it must stop (to interrupt a wait or a device read)."""
        self.stopping.clear()
        thread = threading.Thread(target=target, name=f"{self.get_name()}-{name}", daemon=True)
        self._workers.append((thread, wake))
        thread.start()
        return thread

    def stop_workers(self, timeout_s: float = JOIN_TIMEOUT_S) -> None:
        """Set :attr:`stopping`, wake every worker and join each within ``timeout_s``."""
        self.stopping.set()
        workers, self._workers = self._workers, []
        for _, wake in workers:
            if wake is not None:
                wake()
        for thread, _ in workers:
            thread.join(timeout_s)
            if thread.is_alive():
                self.get_logger().error(f"{thread.name} did not stop within {timeout_s} s")

    def release(self) -> None:
        """Stop the workers and free everything; safe in any state (used at process exit)."""
        self.stop_workers()
        self.release_resources()
        self._configured = False
        self.heap_changed()
        self.set_state("unconfigured")

    # ----------------------------------------------------------------- parameters
    def _on_parameters(self, changes: dict[str, object]) -> str | None:
        if self._configured:
            frozen = [name for name in changes if not self._by_name[name].live]
            if frozen:
                return (
                    f"{', '.join(frozen)} applied on configure; the node is configured: "
                    "deactivate and clean it up first, then configure again"
                )
        old = {name: self.params[name] for name in changes}
        self.params.update(changes)
        reason = self.apply_live(changes) if self._configured else None
        if reason:
            self.params.update(old)
        return reason

    # ----------------------------------------------------------------- transitions
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            description = self.configure()
        except CONFIGURE_ERRORS as err:
            self.get_logger().error(f"cannot configure: {err}")
            self.release_resources()
            self.set_state(f"not configured: {err}")
            return TransitionCallbackReturn.FAILURE
        self._configured = True
        self.heap_changed()
        self.get_logger().info(f"configured: {description}" if description else "configured")
        self.set_state(f"configured: {description}" if description else "configured")
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        result = super().on_activate(state)  # the lifecycle publishers, before any work
        self.activate()
        self.heap_changed()
        self.set_state("active")
        return result

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.deactivate()
        self.heap_changed()
        self.set_state("inactive")
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.release()
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.release()
        return TransitionCallbackReturn.SUCCESS

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.release()
        return TransitionCallbackReturn.SUCCESS
