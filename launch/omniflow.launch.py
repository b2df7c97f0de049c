"""Launch the omniflow nodes (audio capture, camera, fusion, speech, power manager) on a robot.

    ros2 launch omniflow omniflow.launch.py params_file:=/path/to/my.yaml namespace:=robot1

The nodes and their defaults come from ``omniflow.graph`` (unit-tested); this file only
turns them into launch actions. Capture nodes are respawned if they exit.
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare

from omniflow.graph import (
    CAPTURE_NODES,
    DDS_PROFILE_VARIABLE,
    FRAME_PUBLISHER_PROFILE,
    graph_nodes,
)


def generate_launch_description() -> LaunchDescription:
    arguments = [
        DeclareLaunchArgument("namespace", default_value="",
                              description="Namespace of every node"),
        DeclareLaunchArgument("use_sim_time", default_value="false",
                              description="Use /clock (bag replay) instead of the system clock"),
        DeclareLaunchArgument(
            "params_file",
            default_value=PathJoinSubstitution([FindPackageShare("omniflow"), "config",
                                                "robot.yaml"]),
            description="YAML parameters keyed by node name (config/robot.yaml, "
                        "config/pi.yaml, or your own; see config/sensors.example.yaml)"),
        DeclareLaunchArgument("log_level", default_value="info",
                              description="Logging level: debug, info, warn, error"),
        DeclareLaunchArgument(
            "camera_dds_profile",
            default_value=PathJoinSubstitution([FindPackageShare("omniflow"),
                                                *FRAME_PUBLISHER_PROFILE]),
            description="Fast DDS profile of the camera process (16 MiB shared memory: "
                        "full-HD frames in ~9 ms instead of ~21 ms, none lost best effort)"),
    ]
    camera_env = {DDS_PROFILE_VARIABLE: LaunchConfiguration("camera_dds_profile")}
    nodes = [
        Node(package="omniflow", executable=spec.executable, name=spec.name,
             namespace=LaunchConfiguration("namespace"), output="screen",
             respawn=spec.name in CAPTURE_NODES, respawn_delay=2.0,
             parameters=[LaunchConfiguration("params_file"),
                         {"use_sim_time": LaunchConfiguration("use_sim_time")}],
             arguments=["--ros-args", "--log-level", LaunchConfiguration("log_level")],
             additional_env=camera_env if spec.name == "camera" else None)
        for spec in graph_nodes()
    ]
    return LaunchDescription(arguments + nodes)
