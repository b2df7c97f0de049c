"""The omniflow graph on a robot PC: default microphone, camera and speaker (config/robot.yaml).

    ros2 launch omniflow robot.launch.py [namespace:=robot1] [log_level:=debug]

Includes omniflow.launch.py with profile:=pc; every standard argument is passed through.
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, IncludeLaunchDescription
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.substitutions import FindPackageShare

STANDARD_ARGUMENTS = {
    "namespace": ("", "Namespace of every node"),
    "use_sim_time": ("false", "Use /clock instead of the system clock"),
    "params_file": ("", "YAML parameters keyed by node name; empty: config/robot.yaml"),
    "log_level": ("info", "Logging level: debug, info, warn, error"),
}


def generate_launch_description() -> LaunchDescription:
    arguments = [DeclareLaunchArgument(name, default_value=default, description=description)
                 for name, (default, description) in STANDARD_ARGUMENTS.items()]
    base = IncludeLaunchDescription(
        PathJoinSubstitution([FindPackageShare("omniflow"), "launch", "omniflow.launch.py"]),
        launch_arguments={"profile": "pc",
                          **{name: LaunchConfiguration(name) for name in STANDARD_ARGUMENTS}
                          }.items())
    return LaunchDescription([*arguments, base])
