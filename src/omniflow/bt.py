"""Behaviour-tree blocks for omniflow conversations (py_trees), and an example tree.

:class:`Converse` is a py_trees behaviour that sends one ``omniflow/action/Converse`` goal
to the dialogue node and reports RUNNING while the answer streams, SUCCESS with the answer
(written to the blackboard when a key is given), or FAILURE with the reason in its
``feedback_message`` (rejected while busy, timed out, cancelled, the model failed). When the
tree stops it early (a higher-priority branch takes over), the goal is cancelled, which
stops generation and speech.

The behaviours only send goals and read futures; something must spin the rclpy node
between ticks: ``rclpy.spin_once`` in the tick loop, or an executor on a thread, as
:func:`main` does. With an executor on another thread, tick on that thread
(``run_tree(..., node=node)``): Jazzy's action client can lose the answer to a goal sent
from one thread while another spins (:func:`omniflow.ros.monitor.on_executor`)::

    python -m omniflow.bt [--namespace /robot] [--prompt "Say hello"] [--ticks-hz 10]
"""

from __future__ import annotations

import argparse
import threading
import time

import py_trees
import rclpy
from rclpy.action import ActionClient
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node

from omniflow.action import Converse as ConverseAction
from omniflow.ros.monitor import on_executor

__all__ = ["Converse", "example_tree", "main"]


class Converse(py_trees.behaviour.Behaviour):
    """Ask the robot to answer ``prompt`` (or, with ``listen``, the user's next utterance).

    Args:
        name: the behaviour's name in the tree.
        node: the rclpy node the action client lives on (spun by the caller).
        prompt: what to answer (MODE_PROMPT); ignored with ``listen``.
        listen: wait for the next utterance and answer it (MODE_LISTEN).
        use_vision: let what the camera saw join the context.
        preempt: interrupt a turn in progress instead of failing while the robot is busy.
        timeout_s: the goal's time limit (0: the dialogue node's default).
        action_name: the action, relative to the node's namespace.
        server_timeout_s: how long :meth:`setup` waits for the dialogue node.
        blackboard_key: where the answer is written on success (None: nowhere).
    """

    def __init__(
        self,
        name: str,
        node: Node,
        *,
        prompt: str = "",
        listen: bool = False,
        use_vision: bool = False,
        preempt: bool = False,
        timeout_s: float = 0.0,
        action_name: str = "converse",
        server_timeout_s: float = 10.0,
        blackboard_key: str | None = None,
    ) -> None:
        super().__init__(name)
        self.node = node
        self.goal = ConverseAction.Goal(
            mode=ConverseAction.Goal.MODE_LISTEN if listen else ConverseAction.Goal.MODE_PROMPT,
            prompt=prompt,
            use_vision=use_vision,
            preempt=preempt,
            timeout_s=float(timeout_s),
        )
        self.action_name = action_name
        self.server_timeout_s = server_timeout_s
        self.blackboard_key = blackboard_key
        self.partial = ""
        self.result: ConverseAction.Result | None = None
        self._client: ActionClient | None = None
        self._goal_future = None
        self._result_future = None
        self._goal_handle = None
        if blackboard_key:
            self._blackboard = self.attach_blackboard_client(name=f"{name} writer")
            self._blackboard.register_key(blackboard_key, access=py_trees.common.Access.WRITE)

    def setup(self, **kwargs) -> None:
        """Create the action client and wait for the dialogue node.

        Raises:
            RuntimeError: the action server did not appear within ``server_timeout_s``.
        """
        self._client = ActionClient(self.node, ConverseAction, self.action_name)
        if not self._client.wait_for_server(timeout_sec=self.server_timeout_s):
            raise RuntimeError(
                f"{self.name}: no '{self.action_name}' action server after "
                f"{self.server_timeout_s:g} s: is the dialogue node running "
                "and active in this namespace?"
            )

    def initialise(self) -> None:
        self.partial = ""
        self.result = None
        self._goal_handle = self._result_future = None
        self._goal_future = self._client.send_goal_async(
            self.goal, feedback_callback=self._on_feedback
        )
        self.feedback_message = "goal sent"

    def _on_feedback(self, feedback) -> None:
        self.partial = feedback.feedback.partial_response

    def update(self) -> py_trees.common.Status:
        if not self._goal_future.done():
            return py_trees.common.Status.RUNNING
        if self._goal_handle is None:
            self._goal_handle = self._goal_future.result()
            if not self._goal_handle.accepted:
                self.feedback_message = "rejected: the robot is busy (set preempt to interrupt)"
                return py_trees.common.Status.FAILURE
            self._result_future = self._goal_handle.get_result_async()
        if not self._result_future.done():
            self.feedback_message = f"answering: {self.partial}"
            return py_trees.common.Status.RUNNING
        self.result = self._result_future.result().result
        if not self.result.success:
            self.feedback_message = f"failed: {self.result.error}"
            return py_trees.common.Status.FAILURE
        self.feedback_message = f"answered: {self.result.response}"
        if self.blackboard_key:
            self._blackboard.set(self.blackboard_key, self.result.response)
        return py_trees.common.Status.SUCCESS

    def terminate(self, new_status: py_trees.common.Status) -> None:
        """Cancel the goal when the tree abandons this behaviour while it runs."""
        if (
            new_status == py_trees.common.Status.INVALID
            and self._goal_handle is not None
            and self._goal_handle.accepted
            and self._result_future is not None
            and not self._result_future.done()
        ):
            self._goal_handle.cancel_goal_async()
            self.feedback_message = "cancelled by the tree"


def example_tree(
    node: Node,
    prompt: str = "Say hello to the visitor in one short sentence.",
    listen_timeout_s: float = 30.0,
) -> py_trees.behaviours.Behaviour:
    """Greet, then answer the visitor's next question: a sequence of two converse goals."""
    root = py_trees.composites.Sequence(name="greet and answer", memory=True)
    root.add_children(
        [
            Converse("greet", node, prompt=prompt, blackboard_key="greeting"),
            Converse(
                "answer the visitor",
                node,
                listen=True,
                use_vision=True,
                timeout_s=listen_timeout_s,
                blackboard_key="answer",
            ),
        ]
    )
    return root


def run_tree(
    root: py_trees.behaviour.Behaviour,
    ticks_hz: float = 10.0,
    timeout_s: float = 120.0,
    node: Node | None = None,
) -> py_trees.common.Status:
    """Tick ``root`` until it finishes or ``timeout_s`` passes. The node its behaviours use
    spins elsewhere; give it as ``node`` to run each tick on the thread that spins it (needed
    when that is another thread: see the module's docstring)."""
    tree = py_trees.trees.BehaviourTree(root)
    tree.setup(timeout=timeout_s)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if node is None:
            tree.tick()
        else:
            on_executor(node, tree.tick)
        if root.status in (py_trees.common.Status.SUCCESS, py_trees.common.Status.FAILURE):
            return root.status
        time.sleep(1.0 / ticks_hz)
    tree.interrupt()
    return root.status


def main(args: list[str] | None = None) -> int:
    """Run :func:`example_tree` against a running dialogue node; 0 on success."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--namespace", default="", help="namespace of the omniflow graph")
    parser.add_argument("--prompt", default="Say hello to the visitor in one short sentence.")
    parser.add_argument("--ticks-hz", type=float, default=10.0)
    options = parser.parse_args(args)
    rclpy.init()
    node = rclpy.create_node("omniflow_tree", namespace=options.namespace)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    spinner = threading.Thread(target=_spin, args=(executor,), daemon=True)
    spinner.start()
    try:
        root = example_tree(node, options.prompt)
        status = run_tree(root, options.ticks_hz, node=node)
        print(py_trees.display.unicode_tree(root, show_status=True))
        for behaviour in root.children:
            print(f"{behaviour.name}: {behaviour.feedback_message}")
        return 0 if status == py_trees.common.Status.SUCCESS else 1
    except RuntimeError as err:
        print(err)
        return 1
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()


def _spin(executor: SingleThreadedExecutor) -> None:
    try:
        executor.spin()
    except ExternalShutdownException:
        pass


if __name__ == "__main__":
    raise SystemExit(main())
