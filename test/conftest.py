"""Test-wide settings: keep DDS on this machine and away from other runs; let llama.cpp's
idle threads sleep."""

import os
import random

from omniflow.engines.llm import set_openmp_wait_policy

# Discovery and traffic stay on the loopback interface, and each test session gets its own
# domain so that two runs on one machine (or a robot on the same network) never cross.
os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
os.environ.setdefault("ROS_DOMAIN_ID", str(random.randint(1, 101)))
# Before any test imports llama_cpp (libgomp reads it once, when loaded), as the dialogue node
# sets it before it loads a model; node and server processes the tests start inherit it.
set_openmp_wait_policy()
