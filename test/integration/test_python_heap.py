"""A node executable settles its Python heap (a full collection, then ``gc.freeze``) at the
end of each lifecycle transition and says so in its latched ``~/status`` (tier 2, real DDS).
The mechanism itself is tested in test/unit/test_memory.py."""

from __future__ import annotations

import json

from lifecycle_msgs.msg import Transition

from ros_helpers import change_state, wait_active, wait_status


def heap(status: dict) -> dict:
    return status.get("python_heap", {})


def test_a_node_executable_settles_its_heap_at_the_end_of_each_transition(ros_node, start_node):
    speech = start_node("omniflow.nodes.speech", "speech", {"sink": "null"})
    status = wait_active(ros_node, speech)
    active = next(
        s for s in map(json.loads, (m.data for m in status.messages)) if s["state"] == "active"
    )
    # configure and activate: settled before the status said active
    assert heap(active).get("settles") == 2, active
    assert heap(active)["frozen"] > 10_000, active  # the interpreter, rclpy, numpy, the engines
    assert heap(active)["settle_ms"] > 0.0, active

    assert change_state(ros_node, speech, Transition.TRANSITION_DEACTIVATE)
    inactive = wait_status(status, lambda s: s["state"] == "inactive", "speech inactive")
    assert heap(inactive)["settles"] == 3, inactive
