"""The base launch description of the omniflow graph, included by the robot, Pi and replay
launch files (or used alone with your own parameters):

    ros2 launch omniflow omniflow.launch.py profile:=pc params_file:=/path/to/my.yaml

The nodes, their parameter files, use_sim_time, respawn and the camera's environment come
from ``omniflow.graph.launch_nodes`` (unit-tested); this file only turns them into launch
actions. Capture nodes are respawned if they exit.
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare

from omniflow.graph import DDS_PROFILE_VARIABLE, FRAME_PUBLISHER_PROFILE, PROFILES, launch_nodes


def _nodes(context):
    share = FindPackageShare("omniflow").perform(context)
    use_sim_time = LaunchConfiguration("use_sim_time").perform(context)
    camera_env = {DDS_PROFILE_VARIABLE: LaunchConfiguration("camera_dds_profile").perform(context)}
    nodes = launch_nodes(LaunchConfiguration("profile").perform(context), share,
                         params_file=LaunchConfiguration("params_file").perform(context) or None,
                         camera_env=camera_env)
    return [
        Node(package="omniflow", executable=node.executable, name=node.name,
             namespace=LaunchConfiguration("namespace"), output="screen",
             respawn=node.respawn, respawn_delay=node.respawn_delay,
             parameters=[*node.params_files,
                         {"use_sim_time": node.use_sim_time or use_sim_time == "true"}],
             arguments=["--ros-args", "--log-level", LaunchConfiguration("log_level")],
             remappings=list(node.remappings.items()),
             additional_env=dict(node.env) or None)
        for node in nodes
    ]


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription([
        DeclareLaunchArgument("profile", default_value="pc", choices=list(PROFILES),
                              description="Which nodes run: pc, pi, or replay (no capture)"),
        DeclareLaunchArgument("namespace", default_value="",
                              description="Namespace of every node"),
        DeclareLaunchArgument("use_sim_time", default_value="false",
                              description="Use /clock (bag replay) instead of the system clock"),
        DeclareLaunchArgument(
            "params_file", default_value="",
            description="YAML parameters keyed by node name; empty: the profile's own "
                        "(config/robot.yaml, config/pi.yaml, config/replay.yaml)"),
        DeclareLaunchArgument("log_level", default_value="info",
                              description="Logging level: debug, info, warn, error"),
        DeclareLaunchArgument(
            "camera_dds_profile",
            default_value=PathJoinSubstitution([FindPackageShare("omniflow"),
                                                *FRAME_PUBLISHER_PROFILE]),
            description="Fast DDS profile of the camera process (16 MiB shared memory: "
                        "full-HD frames in ~9 ms instead of ~21 ms, none lost best effort)"),
        OpaqueFunction(function=_nodes),
    ])
