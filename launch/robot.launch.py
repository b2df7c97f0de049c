"""The omniflow graph on a robot PC: default microphone, camera and speaker (config/robot.yaml).

    ros2 launch omniflow robot.launch.py [namespace:=robot1] [log_level:=debug]

Includes omniflow.launch.py with profile:=pc; every standard argument (namespace,
use_sim_time, params_file, log_level, vision_accelerator) is passed through.
"""

from omniflow.bringup import profile_launch


def generate_launch_description():
    return profile_launch("pc")
