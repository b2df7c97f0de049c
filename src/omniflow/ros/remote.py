"""Settings on other nodes, brought to a wanted value by asynchronous service calls: a
parameter (``set_parameters``) or a lifecycle state (``get_state``/``change_state``).

Each setting keeps at most one call in flight, each with a deadline checked by
:meth:`RemoteSetting.tick`; a failure is logged (throttled), counted and retried on the next
tick, and a confirmed value is sent again now and then in case its node restarted. Everything
runs on the owning node's executor: a target that never answers costs nothing.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from lifecycle_msgs.msg import State, Transition
from lifecycle_msgs.srv import ChangeState, GetState
from rcl_interfaces.msg import Parameter as ParameterMsg
from rcl_interfaces.srv import SetParameters
from rclpy.node import Node
from rclpy.parameter import Parameter

from omniflow.errors import RemoteCallError

# A confirmed setting is sent again after this long, in case its node restarted.
REASSERT_S = 30.0
# Failures of one target are logged at most this often (each is counted).
LOG_THROTTLE_S = 10.0
# Failures this soon after the setting is created are counted but not logged: nodes launched
# together take a moment to discover each other's services.
STARTUP_GRACE_S = 5.0

STATE_NAMES = {
    State.PRIMARY_STATE_UNCONFIGURED: "unconfigured",
    State.PRIMARY_STATE_INACTIVE: "inactive",
    State.PRIMARY_STATE_ACTIVE: "active",
    State.PRIMARY_STATE_FINALIZED: "finalized",
}
TRANSITION_NAMES = {
    Transition.TRANSITION_CONFIGURE: "configure",
    Transition.TRANSITION_ACTIVATE: "activate",
    Transition.TRANSITION_DEACTIVATE: "deactivate",
    Transition.TRANSITION_CLEANUP: "cleanup",
}
# The state each of those transitions ends in when it succeeds.
TRANSITION_RESULTS = {
    Transition.TRANSITION_CONFIGURE: State.PRIMARY_STATE_INACTIVE,
    Transition.TRANSITION_ACTIVATE: State.PRIMARY_STATE_ACTIVE,
    Transition.TRANSITION_DEACTIVATE: State.PRIMARY_STATE_INACTIVE,
    Transition.TRANSITION_CLEANUP: State.PRIMARY_STATE_UNCONFIGURED,
}

# The time a call may take, read when the call starts (so a live parameter applies at once).
Timeout = Callable[[], float]


class RemoteSetting:
    """One setting on another node; subclasses implement :meth:`start` (send the calls that
    bring it to :attr:`wanted`) with :meth:`call`, :meth:`succeed` and :meth:`fail`."""

    def __init__(self, node: Node, what: str) -> None:
        self.node = node
        self.what = what
        self.wanted: object = None
        self.confirmed: object = None
        self.confirmed_at = 0.0
        self.failures = 0
        self.error = ""
        self._clients: list = []
        self._created = time.monotonic()
        self._future = None
        self._client = None
        self._call_name = ""
        self._timeout = 0.0
        self._deadline = 0.0
        self._last_log = -math.inf

    def client(self, srv_type, name: str):
        """A service client of the owning node, destroyed by :meth:`close`."""
        client = self.node.create_client(srv_type, name)
        self._clients.append(client)
        return client

    def close(self) -> None:
        """Abandon a call in flight and destroy the clients."""
        if self._future is not None:
            self._client.remove_pending_request(self._future)
            self._future = None
        for client in self._clients:
            self.node.destroy_client(client)
        self._clients = []

    def want(self, value: object) -> None:
        if value != self.wanted:
            self.wanted = value
            self.confirmed = None

    @property
    def status(self) -> str:
        if self.error:
            return f"failing ({self.failures} failures): {self.error}"
        if self.wanted is None or self.confirmed == self.wanted:
            return f"ok: {self.confirmed}" if self.wanted is not None else "idle"
        return f"pending: {self.wanted}"

    def tick(self, now: float) -> None:
        """Check the deadline of a call in flight, or start one if the value is not (or no
        longer recently) confirmed; ``now`` on time.monotonic()."""
        if self._future is not None:
            if self._future.done() or now < self._deadline:
                return
            self._client.remove_pending_request(self._future)
            self._future = None
            self.fail(
                RemoteCallError(f"{self._call_name} did not answer within {self._timeout:g} s")
            )
            return
        if self.wanted is None:
            return
        if self.confirmed == self.wanted and now - self.confirmed_at < REASSERT_S:
            return
        self.start(now)

    def call(self, client, request, timeout: float, callback) -> None:
        """Send ``request`` if the service is there; ``callback(response)`` on the answer."""
        name = client.srv_name
        if not client.service_is_ready():
            self.fail(RemoteCallError(f"{name} is not available (is the node running?)"))
            return
        self._client, self._call_name, self._timeout = client, name, timeout
        self._deadline = time.monotonic() + timeout
        future = client.call_async(request)
        self._future = future

        def done(_future) -> None:
            if self._future is not future:
                return  # abandoned after its timeout
            self._future = None
            try:
                response = future.result()
            except Exception as err:  # noqa: BLE001 - any transport failure is a failure
                self.fail(RemoteCallError(f"{name} failed: {err}"))
                return
            callback(response)

        future.add_done_callback(done)

    def succeed(self, value: object) -> None:
        if self.error:
            self.node.get_logger().info(
                f"{self.what}: {value} (answering again after {self.failures} failures)"
            )
        elif value != self.confirmed:
            self.node.get_logger().info(f"{self.what}: {value}")
        self.confirmed, self.confirmed_at, self.error = value, time.monotonic(), ""
        if self.wanted != value:  # changed while the call was in flight: at once, not later
            self.start(self.confirmed_at)

    def fail(self, error: RemoteCallError) -> None:
        self.failures += 1
        self.error = str(error)
        now = time.monotonic()
        if now - self._created >= STARTUP_GRACE_S and now - self._last_log >= LOG_THROTTLE_S:
            self._last_log = now
            self.node.get_logger().warning(
                f"{self.what} -> {self.wanted}: {error}; retrying every period "
                f"({self.failures} failures so far)"
            )

    def start(self, now: float) -> None:
        raise NotImplementedError


class RemoteParameter(RemoteSetting):
    """A parameter of another node, through its ``set_parameters`` service."""

    def __init__(self, node: Node, target: str, parameter: str, timeout_s: Timeout) -> None:
        super().__init__(node, f"{target}.{parameter}")
        self.parameter = parameter
        self._timeout_s = timeout_s
        self._set = self.client(SetParameters, f"{target}/set_parameters")

    def start(self, now: float) -> None:
        value = self.wanted
        request = SetParameters.Request(
            parameters=[
                ParameterMsg(
                    name=self.parameter,
                    value=Parameter(self.parameter, value=value).get_parameter_value(),
                )
            ]
        )

        def answered(response) -> None:
            result = response.results[0] if response.results else None
            if result is not None and result.successful:
                self.succeed(value)
            else:
                reason = result.reason if result is not None else "no result"
                self.fail(
                    RemoteCallError(
                        f"{self._set.srv_name} refused {self.parameter}={value}: {reason}"
                    )
                )

        self.call(self._set, request, self._timeout_s(), answered)


class RemoteLifecycle(RemoteSetting):
    """The lifecycle state of another node: True = active, False = unconfigured (cleanup is
    what frees a model's memory). Reaching either may take two transitions (configure then
    activate; deactivate then cleanup), chained as answers come."""

    def __init__(
        self, node: Node, target: str, timeout_s: Timeout, transition_timeout_s: Timeout
    ) -> None:
        super().__init__(node, f"{target} lifecycle")
        self._timeout_s = timeout_s
        self._transition_timeout_s = transition_timeout_s
        self._get = self.client(GetState, f"{target}/get_state")
        self._change = self.client(ChangeState, f"{target}/change_state")

    def start(self, now: float) -> None:
        self.call(self._get, GetState.Request(), self._timeout_s(), self._on_state)

    def _on_state(self, response) -> None:
        state = response.current_state.id
        wanted = self.wanted
        goal = State.PRIMARY_STATE_ACTIVE if wanted else State.PRIMARY_STATE_UNCONFIGURED
        if state == goal:
            self.succeed(wanted)
            return
        if wanted:
            transition = {
                State.PRIMARY_STATE_UNCONFIGURED: Transition.TRANSITION_CONFIGURE,
                State.PRIMARY_STATE_INACTIVE: Transition.TRANSITION_ACTIVATE,
            }.get(state)
        else:
            transition = {
                State.PRIMARY_STATE_ACTIVE: Transition.TRANSITION_DEACTIVATE,
                State.PRIMARY_STATE_INACTIVE: Transition.TRANSITION_CLEANUP,
            }.get(state)
        if transition is None:  # e.g. finalized, or in a transition
            self.fail(
                RemoteCallError(
                    f"{self._get.srv_name}: cannot reach "
                    f"'{STATE_NAMES[goal]}' from state "
                    f"{STATE_NAMES.get(state, state)}"
                )
            )
            return

        def changed(result) -> None:
            if not result.success:
                self.fail(
                    RemoteCallError(
                        f"{self._change.srv_name}: {TRANSITION_NAMES[transition]} failed (the "
                        "node's log says why)"
                    )
                )
            elif TRANSITION_RESULTS[transition] == goal:
                self.succeed(wanted)  # there: no need to ask again
            else:
                self.start(time.monotonic())  # the next step

        self.call(
            self._change,
            ChangeState.Request(transition=Transition(id=transition)),
            self._transition_timeout_s(),
            changed,
        )
