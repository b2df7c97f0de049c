"""``QueuedOnceExecutor`` over real DDS: each ready callback is queued once, a message waiting
for a thread does not make the executor spin, and what upstream's executor guarantees still
holds (a callback's exception stops the spin, a coroutine waiting on a future finishes).

The two spin checks count what the executor does rather than timing it: how often a task is
handed out, and how many wait sets are built (``can_execute`` is asked once per entity per
wait set). rclpy 7.1's own MultiThreadedExecutor hands the same task out hundreds of times
and builds thousands of wait sets a second while a message waits for a thread.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import rclpy
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.task import Future
from std_msgs.msg import String

from omniflow.ros.executors import QueuedOnceExecutor
from omniflow.ros.qos import EVENTS, SENSOR_DATA

TIMEOUT_S = 20.0


class CountingExecutor(QueuedOnceExecutor):
    """The executor, counting the tasks it hands out and the questions it asks per entity."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.handed_out: Counter = Counter()
        self.asked: Counter = Counter()

    def wait_for_ready_callbacks(self, *args, **kwargs):
        task, entity, node = super().wait_for_ready_callbacks(*args, **kwargs)
        self.handed_out[task] += 1
        return task, entity, node

    def can_execute(self, entity) -> bool:
        self.asked[entity] += 1
        return super().can_execute(entity)


@contextmanager
def spun(threads: int) -> Iterator[tuple[rclpy.node.Node, CountingExecutor, list]]:
    """A node on a CountingExecutor of ``threads`` threads, spun as omniflow.ros.run spins
    it; the exceptions the spin raised are in the list."""
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node(f"executor_{uuid.uuid4().hex[:8]}", context=context)
    executor = CountingExecutor(threads, context=context)
    executor.add_node(node)
    halt, raised = threading.Event(), []

    def spin() -> None:
        while not halt.is_set():
            try:
                executor.spin_once(timeout_sec=0.1)
            except Exception as err:  # noqa: BLE001 - the test reads it
                raised.append(err)

    spinner = threading.Thread(target=spin, daemon=True)
    spinner.start()
    try:
        yield node, executor, raised
    finally:
        halt.set()
        spinner.join(5)
        executor.shutdown()
        node.destroy_node()
        rclpy.shutdown(context=context)


@contextmanager
def publisher_of(topic: str, qos) -> Iterator:
    """A publisher in a context (a DDS participant) of its own, as another process has."""
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node(f"camera_{uuid.uuid4().hex[:8]}", context=context)
    try:
        yield node.create_publisher(String, topic, qos)
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {TIMEOUT_S} s"
        time.sleep(0.01)


def matched(publisher) -> None:
    wait_for(lambda: publisher.get_subscription_count() >= 1, "the subscription matched")


def test_a_callback_waiting_for_a_thread_is_handed_out_once():
    with spun(threads=2) as (node, executor, raised):
        busy, release = threading.Semaphore(0), threading.Event()

        def hold_a_thread() -> None:
            busy.release()
            release.wait(TIMEOUT_S)

        timers = [
            node.create_timer(0.01, hold_a_thread, MutuallyExclusiveCallbackGroup())
            for _ in range(2)
        ]
        got = []
        topic = f"t{uuid.uuid4().hex[:8]}"
        node.create_subscription(
            String, topic, got.append, EVENTS, callback_group=MutuallyExclusiveCallbackGroup()
        )
        with publisher_of(topic, EVENTS) as publisher:
            matched(publisher)
            for timer in timers:
                wait_for(lambda: busy.acquire(blocking=False), "both threads held")
                timer.cancel()
            publisher.publish(String(data="hello"))
            time.sleep(0.5)  # the message's callback waits for the thread all along
            release.set()
            wait_for(lambda: got, "the message's callback")
        time.sleep(0.2)
        assert [m.data for m in got] == ["hello"]
        assert max(executor.handed_out.values()) == 1, executor.handed_out.most_common(3)
        assert not raised


@pytest.mark.parametrize("qos", [SENSOR_DATA, EVENTS], ids=["sensor_data", "events"])
def test_messages_waiting_for_a_thread_do_not_make_the_executor_spin(qos):
    with spun(threads=4) as (node, executor, raised):
        group = MutuallyExclusiveCallbackGroup()
        got = []
        topic = f"t{uuid.uuid4().hex[:8]}"
        subscription = node.create_subscription(
            String, topic, got.append, qos, callback_group=group
        )
        node.create_timer(0.05, lambda: None, callback_group=group)
        with publisher_of(topic, qos) as publisher:
            matched(publisher)
            before = executor.asked[subscription]
            for i in range(60):  # 2 s at 30 messages/s
                publisher.publish(String(data=str(i)))
                time.sleep(1 / 30)
            wait_for(lambda: len(got) >= 55, "the messages")
        wait_sets = executor.asked[subscription] - before
        # A message or a tick wakes the wait a few times (its arrival, its take, its end);
        # a spinning executor builds hundreds of wait sets per message.
        assert wait_sets < 20 * (len(got) + 40), (wait_sets, len(got))
        assert not raised


def test_a_callbacks_exception_reaches_the_spinning_thread():
    with spun(threads=2) as (node, _, raised):

        def fails() -> None:
            raise ValueError("a broken callback")

        node.create_timer(0.05, fails)
        wait_for(lambda: raised, "the exception")
        assert isinstance(raised[0], ValueError)


def test_a_coroutine_callback_waiting_on_a_future_finishes():
    with spun(threads=2) as (node, _, raised):
        future, finished = Future(), []

        async def waits() -> None:
            finished.append(await future)

        once = node.create_timer(0.05, waits, MutuallyExclusiveCallbackGroup())
        time.sleep(0.2)
        once.cancel()
        future.set_result("done")
        wait_for(lambda: finished, "the coroutine's end")
        assert set(finished) == {"done"}
        assert not raised
