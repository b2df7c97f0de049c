"""The launch descriptions behind the files in ``launch/``, written once.

``omniflow.launch.py`` is the base: it declares the profile, the standard arguments and the
camera's DDS profile, and starts the profile's nodes. The robot, Pi and replay files are
:func:`profile_launch`: the same standard arguments, and the base included with their
profile (and so their YAML). What the nodes are, with which parameters, respawn and
environment, comes from :mod:`omniflow.graph` (plain data, unit-tested); this module only
turns it into launch actions.

It imports ``launch`` (ROS 2's launch package, part of a ROS install, not on PyPI), so only
launch files import it; ``launch_ros`` is imported where the nodes are created, at launch.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

from launch import LaunchContext, LaunchDescription, LaunchDescriptionEntity
from launch.actions import DeclareLaunchArgument, IncludeLaunchDescription, OpaqueFunction
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution, ThisLaunchFileDir

from omniflow.graph import (
    LaunchArgument,
    base_arguments,
    launch_node_actions,
    standard_arguments,
)

# The base launch file, beside the files that include it (share/omniflow/launch/).
BASE_LAUNCH_FILE = "omniflow.launch.py"


def omniflow_command() -> list[str]:
    """The ``omniflow`` command as a launch action runs it: by the interpreter running the
    launch file (which imports this package), not by name on PATH. ``ros2 launch`` from a
    virtual environment that is not activated has no ``bin/omniflow`` on PATH, and a process
    action started by name failed with ``FileNotFoundError: 'omniflow'``."""
    return [sys.executable, "-m", "omniflow.cli"]


def declare(arguments: Iterable[LaunchArgument]) -> list[DeclareLaunchArgument]:
    """One DeclareLaunchArgument per argument."""
    return [
        DeclareLaunchArgument(
            a.name,
            default_value=a.default,
            description=a.description,
            choices=list(a.choices) or None,
        )
        for a in arguments
    ]


def include_base(profile_name: str) -> IncludeLaunchDescription:
    """The base launch file with this profile, every standard argument passed through."""
    passed = {
        "profile": profile_name,
        **{a.name: LaunchConfiguration(a.name) for a in standard_arguments(profile_name)},
    }
    return IncludeLaunchDescription(
        PathJoinSubstitution([ThisLaunchFileDir(), BASE_LAUNCH_FILE]),
        launch_arguments=passed.items(),
    )


def profile_launch(
    profile_name: str, *extra: LaunchDescriptionEntity, arguments: Iterable[LaunchArgument] = ()
) -> LaunchDescription:
    """A profile's launch file: the standard arguments (defaults of that profile) and
    ``arguments``, the base included with the profile, then ``extra`` actions."""
    return LaunchDescription(
        [
            *declare((*standard_arguments(profile_name), *arguments)),
            include_base(profile_name),
            *extra,
        ]
    )


def base_launch() -> LaunchDescription:
    """The base launch file: its arguments, and the profile's nodes once they are known."""
    return LaunchDescription([*declare(base_arguments()), OpaqueFunction(function=_nodes)])


def _nodes(context: LaunchContext) -> list[LaunchDescriptionEntity]:
    from ament_index_python.packages import get_package_share_directory
    from launch_ros.actions import Node

    def value(name: str) -> str:
        return LaunchConfiguration(name).perform(context)

    actions = launch_node_actions(
        value("profile"),
        get_package_share_directory("omniflow"),
        namespace=value("namespace"),
        use_sim_time=value("use_sim_time") == "true",
        log_level=value("log_level"),
        params_file=value("params_file"),
        camera_dds_profile=value("camera_dds_profile"),
        vision_accelerator=value("vision_accelerator"),
    )
    return [Node(**kwargs) for kwargs in actions]
