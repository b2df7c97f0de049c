"""Tier 2: the nodes run in their SROS2 enclaves, ``/omniflow/<node>``, as ``omniflow run`` and
the launch files start them, and with ROS_SECURITY_ENABLE unset they run as before. The
enclave is read back from the ROS graph (rcl announces each node's enclave in the discovery
information), so this is what a keystore lookup would use. Security itself cannot be
enforced here: sros2 and the DDS security plugins are not on PyPI."""

from __future__ import annotations

import time
import uuid

from omniflow.graph import profile_nodes, sample_overrides
from omniflow.launcher import NodeProcess
from omniflow.resources import sample, share_dir
from ros_helpers import wait_active

TIMEOUT_S = 60.0
NODES = ("audio_capture", "power_manager")


def test_each_node_announces_its_enclave_and_runs_without_security(ros_node, monkeypatch):
    for variable in ("ROS_SECURITY_ENABLE", "ROS_SECURITY_STRATEGY", "ROS_SECURITY_KEYSTORE"):
        monkeypatch.delenv(variable, raising=False)
    namespace = f"/t{uuid.uuid4().hex[:6]}"
    overrides = sample_overrides(str(sample("hello.wav")), str(sample("scene.avi")))
    specs = [
        spec
        for spec in profile_nodes("pc", str(share_dir()), namespace, overrides)
        if spec.name in NODES
    ]
    processes = [NodeProcess(spec) for spec in specs]
    try:
        for process in processes:
            wait_active(ros_node, process)
        expected = {(name, namespace, f"/omniflow/{name}") for name in NODES}
        deadline = time.monotonic() + TIMEOUT_S
        while not expected <= (seen := set(ros_node.get_node_names_and_namespaces_with_enclaves())):
            assert time.monotonic() < deadline, (
                f"enclaves {sorted(expected)} not announced within {TIMEOUT_S} s; "
                f"seen in {namespace}: {sorted(s for s in seen if s[1] == namespace)}"
            )
            time.sleep(0.1)
        for process in processes:
            assert process.running, process.output()[-2000:]
    finally:
        for process in processes:
            process.close()
