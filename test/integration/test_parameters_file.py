"""A parameters file with a name no node declares, or none of whose sections applies to the
node, is reported by name at start-up (tier 2: rclpy's own argument parsing and parameter
overrides; a node process's latched status over DDS)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import rclpy
from rclpy.node import Node
from std_msgs.msg import String

from omniflow.core.params import ParamSpec
from omniflow.ros.monitor import TopicRecorder
from omniflow.ros.params import declare_parameters, parameter_values
from omniflow.ros.qos import LATCHED

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


def test_a_node_names_unknown_parameters_and_files_that_miss_it_in_its_status(
    ros_node, tmp_path: Path
) -> None:
    namespace = f"/t{uuid.uuid4().hex[:6]}"
    typo = tmp_path / "typo.yaml"
    typo.write_text("/**/power_manager:\n  ros__parameters:\n    policy.idel_after_s: 3.0\n")
    elsewhere = tmp_path / "elsewhere.yaml"  # keyed without the namespace: applies to nothing
    elsewhere.write_text("power_manager:\n  ros__parameters:\n    period_s: 0.5\n")
    status = TopicRecorder(ros_node, String, f"{namespace}/power_manager/status", LATCHED)
    argv = [sys.executable, "-m", "omniflow.nodes.power_manager", "--ros-args"]
    argv += [
        "-r",
        f"__ns:={namespace}",
        "--params-file",
        str(typo),
        "--params-file",
        str(elsewhere),
    ]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        (first, *_) = status.wait_for(1, timeout=60)
        problems = json.loads(first.data)["parameter_problems"]
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    assert problems == [
        "'policy.idel_after_s' is not a parameter of this node "
        "(did you mean 'policy.idle_after_s'?)",
        f"no section of {elsewhere} applies to this node ({namespace}/power_manager): its "
        "sections are 'power_manager' ('power_manager' has the node's name, in another "
        f"namespace); name it '{namespace}/power_manager', '/**/power_manager' or '/**'",
    ]
    assert process.returncode == 0, output
    assert "did you mean 'policy.idle_after_s'?" in output  # the same, in the warning
