"""A parameters file with a name no node declares is reported by name at start-up (tier 2:
rclpy's own argument parsing and parameter overrides, no DDS traffic)."""

from __future__ import annotations

from pathlib import Path

import pytest
import rclpy
from rclpy.node import Node

from omniflow.core.params import ParamSpec
from omniflow.ros.params import declare_parameters, parameter_values

pytestmark = pytest.mark.integration

SPECS = (
    ParamSpec("window.before_ms", 80, "Before", unit="ms", minimum=0, maximum=2000),
    ParamSpec("window.after_ms", 120, "After", unit="ms", minimum=0, maximum=2000),
)


def test_a_typo_in_a_parameters_file_is_named_with_the_closest_parameter(tmp_path: Path) -> None:
    params = tmp_path / "params.yaml"
    params.write_text(
        "fusion:\n  ros__parameters:\n    use_sim_time: false\n"
        "    window.befor_ms: 40\n    window.after_ms: 100\n"
    )
    context = rclpy.Context()
    rclpy.init(args=["--ros-args", "--params-file", str(params)], context=context)
    try:
        node = Node("fusion", context=context)
        warnings = []
        node.get_logger().warning = warnings.append  # what the node would log
        declare_parameters(node, SPECS)
        assert parameter_values(node, SPECS) == {"window.before_ms": 80, "window.after_ms": 100}
        assert len(warnings) == 1
        assert "'window.befor_ms' is not a parameter of this node" in warnings[0]
        assert "did you mean 'window.before_ms'?" in warnings[0]
        assert "use_sim_time" not in warnings[0]
        node.destroy_node()
    finally:
        rclpy.shutdown(context=context)
