"""The omniflow graph on a recorded bag: the bag's audio and frames in place of the capture
nodes, every node on /clock (use_sim_time), speech to the null sink (config/replay.yaml).

    ros2 launch omniflow replay.launch.py bag:=/path/to/session.mcap [rate:=1.0]

Includes omniflow.launch.py with profile:=replay (every standard argument: namespace,
use_sim_time, params_file, log_level, vision_accelerator, passed through) and plays the bag
with ``omniflow replay --with-graph`` (the rosbags-based player, run by the interpreter running
this file: it waits until the nodes are active, and keeps /clock running after the bag until
the last answer is done). The nodes keep running after the bag: Ctrl-C stops them.
"""

from launch.actions import ExecuteProcess
from launch.substitutions import LaunchConfiguration

from omniflow.bringup import omniflow_command, profile_launch
from omniflow.graph import LaunchArgument

ARGUMENTS = (
    LaunchArgument("bag", None, "The bag to play (MCAP or sqlite3 rosbag2)"),
    LaunchArgument("rate", "1.0", "Playback rate factor"),
)


def generate_launch_description():
    player = ExecuteProcess(
        cmd=[
            *omniflow_command(),
            "replay",
            LaunchConfiguration("bag"),
            "--clock",
            "--rate",
            LaunchConfiguration("rate"),
            "--namespace",
            LaunchConfiguration("namespace"),
            "--with-graph",
        ],
        output="screen",
    )
    return profile_launch("replay", player, arguments=ARGUMENTS)
