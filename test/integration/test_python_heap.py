"""A node executable keeps its Python heap flat (tier 2, real DDS): it settles the heap (a
full collection, then ``gc.freeze``) a few seconds after activation, says so in its latched
``~/status``, thaws it on a transition (what the transition dropped becomes collectable) and
settles it again afterwards. The mechanism itself is tested in test/unit/test_memory.py."""

from __future__ import annotations

import json

from lifecycle_msgs.msg import Transition

from omniflow.engines.memory import SETTLE_AFTER_S
from ros_helpers import change_state, wait_active, wait_status

SETTLE_TIMEOUT_S = SETTLE_AFTER_S + 10.0  # the settle runs on the next diagnostics tick


def settles(status: dict) -> int:
    return status.get("python_heap", {}).get("settles", 0)


def test_a_node_executable_settles_its_heap_after_each_transition(ros_node, start_node):
    speech = start_node("omniflow.nodes.speech", "speech", {"sink": "null"})
    status = wait_active(ros_node, speech)
    active = next(
        s for s in map(json.loads, (m.data for m in status.messages)) if s["state"] == "active"
    )
    assert settles(active) == 0, "settled at once: the activation's work may go on"
    heap = wait_status(status, lambda s: settles(s) >= 1, "the heap settled", SETTLE_TIMEOUT_S)[
        "python_heap"
    ]
    assert heap["frozen"] > 10_000, heap  # the interpreter, rclpy, numpy, the engines
    assert heap["settle_ms"] > 0.0, heap

    assert change_state(ros_node, speech, Transition.TRANSITION_DEACTIVATE)
    heap = wait_status(
        status,
        lambda s: s["state"] == "inactive" and settles(s) >= 2,
        "the heap settled again after the deactivation",
        SETTLE_TIMEOUT_S,
    )["python_heap"]
    assert heap["frozen"] > 10_000, heap
