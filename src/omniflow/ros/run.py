"""The entry point shared by the node executables: start one node, spin it, stop it cleanly."""

from __future__ import annotations

from collections.abc import Callable

import rclpy
from rclpy.exceptions import InvalidParameterTypeException, InvalidParameterValueException
from rclpy.executors import Executor, ExternalShutdownException, SingleThreadedExecutor
from rclpy.lifecycle import LifecycleNode, TransitionCallbackReturn
from rclpy.node import Node

from omniflow.errors import ConfigError


def run_node(
    node_factory: Callable[[], Node],
    args: list[str] | None = None,
    *,
    executor_factory: Callable[[], Executor] = SingleThreadedExecutor,
) -> int:
    """Run a node until shutdown; the entry point of the node executables.

    The node has a ``params`` dict and a ``release()`` that frees what it holds in any state
    (every :class:`~omniflow.ros.lifecycle.LifecycleBase`); a lifecycle node with
    ``autostart`` configures and activates itself. It spins on a single-threaded executor by
    default: its callbacks only buffer, workers do the rest on their own threads. A node
    whose callbacks wait (the dialogue node's action goals) passes a multi-threaded one.

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
