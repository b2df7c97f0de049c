"""Fixtures for tier-2 tests: a spinning test node in this process, nodes in child processes."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import rclpy
from rclpy.node import Node

import ros_launch
from omniflow.launcher import NodeProcess, NodeSpec
from omniflow.ros.monitor import spinning


def pytest_collection_modifyitems(items):
    for item in items:
        if "/integration/" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


@pytest.fixture
def ros_node() -> Iterator[Node]:
    """A node of the test's own, spinning on a background thread."""
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node(f"test_{uuid.uuid4().hex[:8]}", context=context)
    with spinning(node):
        yield node
    node.destroy_node()
    rclpy.shutdown(context=context)


@pytest.fixture
def start_node() -> Iterator:
    """Start nodes in child processes; they are stopped when the test ends."""
    started: list[NodeProcess] = []

    def start(
        module: str,
        name: str,
        parameters: dict[str, object],
        namespace: str | None = None,
        env: dict[str, str] | None = None,
    ) -> NodeProcess:
        """``namespace``: share one between nodes that talk to each other (default: a
        fresh one per node, so tests never hear each other); ``env``: extra environment of
        the node's process (e.g. the camera's DDS profile)."""
        process = NodeProcess(
            NodeSpec(
                module=module,
                name=name,
                parameters=parameters,
                namespace=namespace or f"/t{uuid.uuid4().hex[:6]}",
                env=env or {},
            )
        )
        started.append(process)
        return process

    yield start
    for process in started:
        process.close()


@pytest.fixture(scope="session")
def launch_env() -> dict[str, str]:
    """The environment of a ``ros2 launch`` process (upstream launch on the path, the
    test-built composition_interfaces: see ros_launch.py); skips without ../shared."""
    return ros_launch.launch_environment()


@pytest.fixture
def ros2_launch(launch_env: dict[str, str], tmp_path: Path) -> Iterator:
    """Start ``ros2 launch omniflow <file> name:=value ...``; stopped when the test ends."""
    started: list[ros_launch.LaunchProcess] = []

    def start(file_name: str, **arguments: str) -> ros_launch.LaunchProcess:
        log = tmp_path / f"{file_name}.{len(started)}.log"
        process = ros_launch.LaunchProcess(file_name, arguments, launch_env, log)
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()
