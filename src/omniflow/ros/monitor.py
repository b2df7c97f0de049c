"""Watch topics from a test, the demo or a tool: record what arrives and wait for it.

Every wait takes a timeout and raises ``TimeoutError`` saying what did not arrive.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Generic, TypeVar

from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import QoSProfile

Msg = TypeVar("Msg")
T = TypeVar("T")


def _brief(msg: object, limit: int = 400) -> str:
    """A message's repr for an error line, cut at ``limit`` characters."""
    text = repr(msg)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class Received(Generic[Msg]):
    """A message and when it arrived (time.monotonic_ns and the wall clock, both in ns)."""

    msg: Msg
    monotonic_ns: int
    wall_ns: int


class TopicRecorder(Generic[Msg]):
    """Keeps the last ``keep`` messages of one topic, thread-safely."""

    def __init__(
        self, node: Node, msg_type: type, topic: str, qos: QoSProfile | int, keep: int = 10_000
    ) -> None:
        self.topic = topic
        self._items: deque[Received[Msg]] = deque(maxlen=keep)
        self._cond = threading.Condition()
        self._subscription = node.create_subscription(msg_type, topic, self._on_msg, qos)

    def _on_msg(self, msg: Msg) -> None:
        item = Received(msg, time.monotonic_ns(), time.time_ns())
        with self._cond:
            self._items.append(item)
            self._cond.notify_all()

    @property
    def received(self) -> list[Received[Msg]]:
        with self._cond:
            return list(self._items)

    @property
    def messages(self) -> list[Msg]:
        return [item.msg for item in self.received]

    def clear(self) -> None:
        with self._cond:
            self._items.clear()

    def wait_for(self, count: int, timeout: float) -> list[Msg]:
        """Wait until ``count`` messages were received; raise TimeoutError otherwise."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self._items) >= count, timeout):
                raise TimeoutError(
                    f"received {len(self._items)} of {count} messages on "
                    f"'{self.topic}' within {timeout} s"
                )
            return [item.msg for item in self._items]

    def wait_until(
        self, predicate: Callable[[list[Msg]], bool], timeout: float, what: str
    ) -> list[Msg]:
        """Wait until ``predicate(messages)`` holds; raise TimeoutError naming ``what``."""
        with self._cond:
            if not self._cond.wait_for(
                lambda: predicate([item.msg for item in self._items]), timeout
            ):
                last = f"; the last: {_brief(self._items[-1].msg)}" if self._items else ""
                raise TimeoutError(
                    f"'{self.topic}': {what} did not happen within {timeout} s "
                    f"({len(self._items)} messages received{last})"
                )
            return [item.msg for item in self._items]


def wait_for_publishers(node: Node, topic: str, count: int, timeout: float) -> None:
    """Wait until ``topic`` has ``count`` publishers matched in the graph."""
    deadline = time.monotonic() + timeout
    while node.count_publishers(topic) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{node.count_publishers(topic)} of {count} publishers on "
                f"'{topic}' after {timeout} s"
            )
        time.sleep(0.05)


@contextmanager
def spinning(node: Node) -> Iterator[SingleThreadedExecutor]:
    """Spin ``node`` on a background thread for the duration of the block.

    The thread is stopped and joined before the executor shuts down: rclpy 7.1's
    ``Executor.shutdown`` destroys the guard condition a spinning thread waits on."""
    executor = SingleThreadedExecutor(context=node.context)
    executor.add_node(node)
    halt = threading.Event()

    def spin() -> None:
        while not halt.is_set() and executor.context.ok():
            executor.spin_once(timeout_sec=0.1)

    thread = threading.Thread(target=spin, name=f"{node.get_name()}-spin", daemon=True)
    thread.start()
    try:
        yield executor
    finally:
        halt.set()
        thread.join(5.0)
        executor.shutdown(timeout_sec=5.0)


def on_executor(node: Node, call: Callable[[], T], timeout_s: float = 10.0) -> T:
    """``call()`` run on the thread that spins ``node`` (a :func:`spinning` block, or any
    executor spinning elsewhere), and its result.

    Send action goals, result and cancel requests this way from another thread: rclpy 7.1's
    ``ActionClient`` records a request after it sends it and without a lock (ros2/rclpy#1123),
    so an answer the spinning thread takes in between is dropped as unexpected ("Ignoring
    unexpected goal response") and the request's future never completes. On the spinning
    thread the answer can only be taken after the request is recorded.

    An exception ``call`` raises reaches the caller (the spinning thread goes on). Never call
    it on the spinning thread itself (from a callback): it would wait for itself."""
    executor = node.executor
    if executor is None:
        raise RuntimeError(f"node '{node.get_name()}' is not spinning in an executor")
    outcome: dict[str, object] = {}
    ran = threading.Event()

    def run() -> None:
        try:
            outcome["value"] = call()
        except Exception as err:  # raised again on the caller's thread
            outcome["error"] = err
        finally:
            ran.set()

    executor.create_task(run)
    if not ran.wait(timeout_s):
        raise TimeoutError(
            f"the executor of '{node.get_name()}' did not run the call within {timeout_s} s"
        )
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
