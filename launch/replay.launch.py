"""The omniflow graph on a recorded bag: the bag's audio and frames in place of the capture
nodes, every node on /clock (use_sim_time), speech to the null sink (config/replay.yaml).

    ros2 launch omniflow replay.launch.py bag:=/path/to/session.mcap [rate:=1.0]

Includes omniflow.launch.py with profile:=replay and plays the bag with ``omniflow replay``
(the rosbags-based player: ``ros2 bag`` works as well on a robot that has it).
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, ExecuteProcess, IncludeLaunchDescription
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.substitutions import FindPackageShare

STANDARD_ARGUMENTS = {
    "namespace": ("", "Namespace of every node"),
    "use_sim_time": ("true", "Use /clock (published by the player)"),
    "params_file": ("", "YAML parameters keyed by node name; empty: config/replay.yaml"),
    "log_level": ("info", "Logging level: debug, info, warn, error"),
}


def generate_launch_description() -> LaunchDescription:
    arguments = [DeclareLaunchArgument(name, default_value=default, description=description)
                 for name, (default, description) in STANDARD_ARGUMENTS.items()]
    arguments += [
        DeclareLaunchArgument("bag", description="The bag to play (MCAP or sqlite3 rosbag2)"),
        DeclareLaunchArgument("rate", default_value="1.0", description="Playback rate factor"),
    ]
    base = IncludeLaunchDescription(
        PathJoinSubstitution([FindPackageShare("omniflow"), "launch", "omniflow.launch.py"]),
        launch_arguments={"profile": "replay",
                          **{name: LaunchConfiguration(name) for name in STANDARD_ARGUMENTS}
                          }.items())
    player = ExecuteProcess(
        cmd=["omniflow", "replay", LaunchConfiguration("bag"), "--clock",
             "--rate", LaunchConfiguration("rate"),
             "--namespace", LaunchConfiguration("namespace")],
        output="screen")
    return LaunchDescription([*arguments, base, player])
