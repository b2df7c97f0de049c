"""The omniflow graph on a Raspberry Pi 5 + Coral, Camera Module, USB microphone (config/pi.yaml).

    ros2 launch omniflow pi.launch.py [namespace:=robot1] [vision_accelerator:=edgetpu]

Includes omniflow.launch.py with profile:=pi; every standard argument (namespace,
use_sim_time, params_file, log_level, vision_accelerator) is passed through.
"""

from omniflow.bringup import profile_launch


def generate_launch_description():
    return profile_launch("pi")
