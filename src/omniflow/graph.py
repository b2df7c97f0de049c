"""The nodes of an omniflow graph, as plain data: one description that the launch files,
the demo and the tests all start from (``ros2 launch`` on robots, child processes here).
No ROS imports."""

from __future__ import annotations

from collections.abc import Mapping

from omniflow.launcher import NodeSpec

# Capture nodes own a device: launch files respawn them when they die.
CAPTURE_NODES = ("audio_capture", "camera")


def sensor_nodes(namespace: str = "",
                 overrides: Mapping[str, Mapping[str, object]] | None = None,
                 log_level: str = "info") -> list[NodeSpec]:
    """The audio capture and camera nodes, with per-node parameter overrides by node name."""
    overrides = overrides or {}
    return [NodeSpec(module=f"omniflow.nodes.{name}", name=name,
                     parameters=dict(overrides.get(name, {})), namespace=namespace,
                     log_level=log_level)
            for name in CAPTURE_NODES]


def sample_overrides(audio_path: str, video_path: str) -> dict[str, dict[str, object]]:
    """Parameters that run the sensor nodes on recorded files instead of devices."""
    return {"audio_capture": {"source": "file", "file.path": audio_path, "file.loop": True},
            "camera": {"source": "video", "path": video_path, "fps": 15.0}}
