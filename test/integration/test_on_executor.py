"""``on_executor``: a call from another thread runs on the thread that spins the node."""

from __future__ import annotations

import threading

import pytest
import rclpy

from omniflow.ros.monitor import on_executor


def test_the_call_runs_on_the_spinning_thread_and_gives_its_result(ros_node):
    assert on_executor(ros_node, lambda: threading.current_thread().name) == (
        f"{ros_node.get_name()}-spin"
    )


def test_an_exception_of_the_call_reaches_the_caller_and_the_node_spins_on(ros_node):
    def fails() -> None:
        raise ValueError("bad goal")

    with pytest.raises(ValueError, match="bad goal"):
        on_executor(ros_node, fails)
    assert on_executor(ros_node, lambda: 42) == 42


def test_a_node_nothing_spins_is_named():
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("not_spinning", context=context)
    try:
        with pytest.raises(RuntimeError, match="'not_spinning' is not spinning"):
            on_executor(node, lambda: None)
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)
