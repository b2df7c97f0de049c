"""The nodes of an omniflow graph, as plain data: one description that the launch files,
the demo and the tests all start from (``ros2 launch`` on robots, child processes here).
No ROS imports."""

from __future__ import annotations

import os
from collections.abc import Mapping

from omniflow.launcher import NodeSpec

# Capture nodes own a device: launch files respawn them when they die.
CAPTURE_NODES = ("audio_capture", "camera")
# Every node of the graph so far, in launch order.
GRAPH_NODES = (*CAPTURE_NODES, "fusion", "dialogue", "speech", "power_manager")

# The Fast DDS profile for processes that publish camera frames (config/fastdds/): a 16 MiB
# shared-memory segment instead of 512 KiB, so a full-HD frame crosses processes in ~9 ms
# instead of ~21 ms, and best-effort frames are not lost (benchmarks/README.md).
FRAME_PUBLISHER_PROFILE = ("config", "fastdds", "large_frames.xml")
DDS_PROFILE_VARIABLE = "FASTRTPS_DEFAULT_PROFILES_FILE"


def frame_publisher_env(share_dir: str) -> dict[str, str]:
    """Environment for a node publishing camera frames: the large-frames profile, unless the
    user already chose a Fast DDS profile."""
    if DDS_PROFILE_VARIABLE in os.environ:
        return {}
    return {DDS_PROFILE_VARIABLE: os.path.join(share_dir, *FRAME_PUBLISHER_PROFILE)}


def graph_nodes(names: tuple[str, ...] = GRAPH_NODES, namespace: str = "",
                overrides: Mapping[str, Mapping[str, object]] | None = None,
                log_level: str = "info",
                camera_env: Mapping[str, str] | None = None) -> list[NodeSpec]:
    """The named nodes, with per-node parameter overrides by node name, and extra
    environment for the camera process (see :func:`frame_publisher_env`)."""
    overrides = overrides or {}
    envs = {"camera": dict(camera_env or {})}
    return [NodeSpec(module=f"omniflow.nodes.{name}", name=name,
                     parameters=dict(overrides.get(name, {})), namespace=namespace,
                     log_level=log_level, env=envs.get(name, {}))
            for name in names]


def sample_overrides(audio_path: str, video_path: str) -> dict[str, dict[str, object]]:
    """Parameters that run the sensor nodes on recorded files instead of devices."""
    return {"audio_capture": {"source": "file", "file.path": audio_path, "file.loop": True},
            "camera": {"source": "video", "path": video_path, "fps": 15.0}}
