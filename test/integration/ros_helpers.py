"""Service calls on node processes, each with a timeout and a typed failure; an action client
for tests that send goals from their own thread."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from lifecycle_msgs.msg import State, Transition
from lifecycle_msgs.srv import ChangeState, GetState
from rcl_interfaces.msg import Parameter as ParameterMsg
from rcl_interfaces.msg import SetParametersResult
from rclpy.action import ActionClient
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.parameter_client import AsyncParameterClient
from std_msgs.msg import String

from omniflow.launcher import NodeProcess
from omniflow.ros.monitor import TopicRecorder, on_executor
from omniflow.ros.qos import LATCHED

TIMEOUT_S = 10.0
# A node process loading its models on a busy 2-core machine.
START_TIMEOUT_S = 120.0


class SpinThreadActionClient(ActionClient):
    """An ``ActionClient`` whose goal, result and cancel requests leave from the thread that
    spins its node, whichever thread asks (:func:`omniflow.ros.monitor.on_executor`: rclpy
    7.1 drops an answer that comes back before it recorded the request, and under load a
    test's goal then waited forever). Call it from the test's thread, never from a callback."""

    def send_goal_async(self, goal, feedback_callback=None, goal_uuid=None):
        send = super().send_goal_async
        return on_executor(self._node, lambda: send(goal, feedback_callback, goal_uuid))

    def _get_result_async(self, goal_handle):
        request = super()._get_result_async
        return on_executor(self._node, lambda: request(goal_handle))

    def _cancel_goal_async(self, goal_handle):
        request = super()._cancel_goal_async
        return on_executor(self._node, lambda: request(goal_handle))


def topic(process: NodeProcess | str, name: str) -> str:
    """The full name of a node process's relative topic or service (``process``: a node
    process, or the namespace of a node started elsewhere, e.g. by ``ros2 launch``)."""
    namespace = process if isinstance(process, str) else process.spec.namespace
    return f"{namespace.rstrip('/')}/{name}"


def full_name(process: NodeProcess | str) -> str:
    """``/namespace/name`` of a node process, or the full name given as is."""
    return process if isinstance(process, str) else topic(process, process.spec.name)


def _result(future, what: str, timeout: float = TIMEOUT_S):
    done = threading.Event()
    future.add_done_callback(lambda _: done.set())
    if not done.wait(timeout):
        raise TimeoutError(f"{what} did not answer within {timeout} s")
    return future.result()


# An answer to a request sent the moment the service shows in the graph can be lost: the
# server's response writer may not have matched the client's response reader yet (the race
# ros2/rmw_cyclonedds#187 describes). Idempotent requests are sent again at this period until
# one is answered or the timeout ends.
_RESEND_S = 2.0


def _resent(send, what: str, timeout: float = TIMEOUT_S):
    """The result of the first answered of the futures ``send()`` returns, called again every
    :data:`_RESEND_S` until one is answered."""
    done = threading.Event()
    answered = []

    def on_done(future):
        answered.append(future)
        done.set()

    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        send().add_done_callback(on_done)
        if done.wait(min(_RESEND_S, left)):
            return answered[0].result()
    raise TimeoutError(f"{what} did not answer within {timeout} s")


@contextmanager
def _service(node: Node, srv_type, name: str, timeout: float) -> Iterator:
    """A client of service ``name`` once the service is there; destroyed after the block."""
    client = node.create_client(srv_type, name)
    try:
        if not client.wait_for_service(timeout_sec=timeout):
            raise TimeoutError(f"service {name} not available within {timeout} s")
        yield client
    finally:
        node.destroy_client(client)


def call(node: Node, srv_type, name: str, request, timeout: float = TIMEOUT_S, *, resend=False):
    """Call a service and return its response; ``resend``: the request is idempotent and is
    sent again until one is answered."""
    with _service(node, srv_type, name, timeout) as client:
        if resend:
            return _resent(lambda: client.call_async(request), f"service {name}", timeout)
        return _result(client.call_async(request), f"service {name}", timeout)


# The state each transition ends in when it succeeds.
_TARGET_STATE = {
    Transition.TRANSITION_CONFIGURE: State.PRIMARY_STATE_INACTIVE,
    Transition.TRANSITION_ACTIVATE: State.PRIMARY_STATE_ACTIVE,
    Transition.TRANSITION_DEACTIVATE: State.PRIMARY_STATE_INACTIVE,
    Transition.TRANSITION_CLEANUP: State.PRIMARY_STATE_UNCONFIGURED,
}


def change_state(node: Node, process: NodeProcess, transition_id: int) -> bool:
    """Trigger a lifecycle transition (lifecycle_msgs/Transition id); True on success.

    A transition is not sent twice (a second CONFIGURE fails), so its lost answer (see
    :data:`_RESEND_S`) is made up for by the node's state: every :data:`_RESEND_S` without an
    answer, a node found in the transition's end state counts as done."""
    name = f"{full_name(process)}/change_state"
    target = _TARGET_STATE.get(transition_id)
    with _service(node, ChangeState, name, TIMEOUT_S) as client:
        future = client.call_async(ChangeState.Request(transition=Transition(id=transition_id)))
        done = threading.Event()
        future.add_done_callback(lambda _: done.set())
        deadline = time.monotonic() + TIMEOUT_S
        while not done.wait(min(_RESEND_S, max(deadline - time.monotonic(), 0.0))):
            if target is not None and _in_state(node, process, target):
                return True
            if time.monotonic() >= deadline:
                raise TimeoutError(f"service {name} did not answer within {TIMEOUT_S} s")
        return future.result().success


def _in_state(node: Node, process: NodeProcess, state_id: int) -> bool:
    """Whether the node answers get_state with ``state_id`` now (False while it is busy in a
    transition and does not answer)."""
    try:
        return lifecycle_state(node, process, timeout=_RESEND_S) == state_id
    except TimeoutError:
        return False


def lifecycle_state(node: Node, process: NodeProcess | str, timeout: float = TIMEOUT_S) -> int:
    """The lifecycle state id (lifecycle_msgs/State) of a node process (or full node name)."""
    name = f"{full_name(process)}/get_state"
    return call(node, GetState, name, GetState.Request(), timeout, resend=True).current_state.id


def _parameter_client(node: Node, process: NodeProcess | str) -> AsyncParameterClient:
    client = AsyncParameterClient(node, full_name(process))
    if not client.wait_for_services(timeout_sec=TIMEOUT_S):
        raise TimeoutError(f"parameter services of {full_name(process)} not available")
    return client


def set_parameters(node: Node, process: NodeProcess, **values) -> list[SetParametersResult]:
    """Set parameters of a node process; one result per parameter."""
    client = _parameter_client(node, process)
    parameters = [Parameter(k, value=v) for k, v in values.items()]
    return _resent(lambda: client.set_parameters(parameters), "set_parameters").results


def get_parameter(node: Node, process: NodeProcess | str, name: str) -> object:
    """The current value of one parameter of a node process (or full node name)."""
    client = _parameter_client(node, process)
    value = _resent(lambda: client.get_parameters([name]), "get_parameters").values[0]
    return Parameter.from_parameter_msg(ParameterMsg(name=name, value=value)).value


def status_recorder(node: Node, process: NodeProcess) -> TopicRecorder:
    """Records a node process's latched ``~/status`` (std_msgs/String, JSON)."""
    return TopicRecorder(node, String, topic(process, f"{process.spec.name}/status"), LATCHED)


def last_status(recorder: TopicRecorder) -> dict:
    """The newest status a :func:`status_recorder` holds, decoded."""
    return json.loads(recorder.messages[-1].data)


def wait_status(
    recorder: TopicRecorder, predicate, what: str, timeout: float = START_TIMEOUT_S
) -> dict:
    """Wait until the newest status satisfies ``predicate``; return it."""
    recorder.wait_until(
        lambda msgs: bool(msgs) and predicate(json.loads(msgs[-1].data)), timeout, what
    )
    return last_status(recorder)


def wait_subscribed(recorder: TopicRecorder, count: int, what: str) -> None:
    """Wait until a capture node's status counts ``count`` subscriptions matched to its
    output (``what`` names them), then a moment for the subscriptions' side of the match."""
    wait_status(recorder, lambda status: status.get("subscribers", 0) >= count, what, timeout=15)
    time.sleep(0.2)


def wait_active(node: Node, process: NodeProcess) -> TopicRecorder:
    """Record a node process's status and wait until it says the node is active."""
    recorder = status_recorder(node, process)
    wait_status(recorder, lambda status: status["state"] == "active", f"{process.spec.name} active")
    return recorder
