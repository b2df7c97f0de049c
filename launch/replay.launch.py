"""The omniflow graph on a recorded bag: the bag's audio and frames in place of the capture
nodes, every node on /clock (use_sim_time), speech to the null sink (config/replay.yaml).

    ros2 launch omniflow replay.launch.py bag:=/path/to/session.mcap [rate:=1.0]

Includes omniflow.launch.py with profile:=replay (every standard argument: namespace,
use_sim_time, params_file, log_level, vision_accelerator, passed through) and plays the bag
with ``omniflow replay`` (the rosbags-based player: ``ros2 bag`` works as well on a robot
that has it).
"""

from launch.actions import ExecuteProcess
from launch.substitutions import LaunchConfiguration

from omniflow.bringup import profile_launch
from omniflow.graph import LaunchArgument

ARGUMENTS = (
    LaunchArgument("bag", None, "The bag to play (MCAP or sqlite3 rosbag2)"),
    LaunchArgument("rate", "1.0", "Playback rate factor"),
)


def generate_launch_description():
    player = ExecuteProcess(
        cmd=[
            "omniflow",
            "replay",
            LaunchConfiguration("bag"),
            "--clock",
            "--rate",
            LaunchConfiguration("rate"),
            "--namespace",
            LaunchConfiguration("namespace"),
        ],
        output="screen",
    )
    return profile_launch("replay", player, arguments=ARGUMENTS)
