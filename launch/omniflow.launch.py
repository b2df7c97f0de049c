"""The base launch description of the omniflow graph, included by the robot, Pi and replay
launch files (or used alone with your own parameters):

    ros2 launch omniflow omniflow.launch.py profile:=pc params_file:=/path/to/my.yaml

Arguments: profile, namespace, use_sim_time, params_file, log_level, vision_accelerator,
camera_dds_profile. The nodes, their parameter files, use_sim_time, respawn, the camera's
environment and the fusion node's vision.accelerator come from ``omniflow.graph``
(unit-tested) through ``omniflow.bringup.base_launch``. Every node is respawned if it
exits.
"""

from omniflow.bringup import base_launch


def generate_launch_description():
    return base_launch()
