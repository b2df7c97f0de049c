"""Test-wide settings: keep DDS on this machine and away from other runs."""

import os
import random

# Discovery and traffic stay on the loopback interface, and each test session gets its own
# domain so that two runs on one machine (or a robot on the same network) never cross.
os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
os.environ.setdefault("ROS_DOMAIN_ID", str(random.randint(1, 101)))
