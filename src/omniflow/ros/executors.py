"""The executor of a node whose callbacks run on several threads (the dialogue node)."""

from __future__ import annotations

from rclpy.executors import (
    ConditionReachedException,
    ExternalShutdownException,
    MultiThreadedExecutor,
    ShutdownException,
    TimeoutException,
)
from rclpy.task import Task

__all__ = ["QueuedOnceExecutor"]

_NOTHING_READY = (
    ConditionReachedException,
    ExternalShutdownException,
    ShutdownException,
    TimeoutException,
)


class QueuedOnceExecutor(MultiThreadedExecutor):
    """A :class:`MultiThreadedExecutor` that queues each ready callback on its threads once,
    and waits while a message is queued to be taken instead of spinning.

    Jazzy's multithreaded executor (rclpy 7.1) hands a ready callback to its thread pool and
    waits again before a thread has started it, and two things then keep its spinning thread
    busy, holding the GIL, until one does:

    - it offers again every task that has not started, so the callback is queued again and
      again (ros2/rclpy#1452, fixed upstream after Jazzy's release): in the dialogue node the
      queue held 1,300-2,300 copies at a time, and none of the node's subscriptions or timers
      ran for 0.3-0.8 s, a few times a second;
    - the subscription's QoS event handlers (incompatible QoS, incompatible type) stay in the
      wait set, and Fast DDS wakes them on the message not taken yet: the wait returns at
      once, with nothing to do, thousands of times a second (a core, at 30 frames/s).

    Here a task leaves the executor's list while it is queued and comes back only when it has
    run and is not finished (a coroutine waiting on a future), and a subscription's event
    handlers are not waited on while its message is queued to be taken. A callback's
    exception still reaches the spinning thread, as upstream. ``benchmarks/executor.py``
    measures both against rclpy's executor. It uses the executor's internals (its task list,
    thread pool and futures) as rclpy 7.1 has them; ``test/integration/test_executors.py``
    checks it against the pinned rclpy.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._owners: dict = {}  # a subscription's event handler -> the subscription

    def can_execute(self, entity) -> bool:
        owner = self._owners.get(entity)
        if owner is not None and owner._executor_event:  # its message is queued, not taken
            return False
        return super().can_execute(entity)

    def _spin_once_impl(self, timeout_sec=None, wait_condition=lambda: False) -> None:
        self._owners = {
            handler: sub
            for node in self.get_nodes()
            for sub in node.subscriptions
            for handler in sub.event_handlers
        }
        try:
            task, entity, node = self.wait_for_ready_callbacks(timeout_sec, None, wait_condition)
        except _NOTHING_READY:
            return
        with self._tasks_lock:
            self._tasks = [t for t in self._tasks if t[0] is not task]
        self._executor.submit(self._run, task, entity, node)
        self._futures.append(task)
        for done in [f for f in self._futures if f.done()]:
            self._futures.remove(done)
            done.result()  # raises the callback's exception

    def _run(self, task: Task, entity, node) -> None:
        task()
        if not task.done():  # waiting on something: offer it again
            with self._tasks_lock:
                self._tasks.append((task, entity, node))
            self.wake()
