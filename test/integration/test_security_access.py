"""The access table for ROS 2 security (``omniflow.security``) is what the nodes really do
(tier 2): every node of the graph is started, and the topics it publishes and subscribes, the
services it serves and calls and the actions it serves, as the ROS graph shows them, are
compared with the table that docs/security.md and the SROS2 policy are made from."""

from __future__ import annotations

import re
import time
import uuid

from rclpy.node import NodeNameNonExistentError

from omniflow import security
from omniflow.graph import GRAPH_NODES, sample_overrides

SAMPLES = "test/data/samples"
START_TIMEOUT_S = 120.0
# How an action server shows on the graph: services and topics under <action>/_action/.
_ACTION_PART = re.compile(r"^(.*)/_action/(send_goal|get_result|cancel_goal|feedback|status)$")

PARAMETERS = {
    **sample_overrides(f"{SAMPLES}/hello.wav", f"{SAMPLES}/scene.avi"),
    "fusion": {"asr.engine": "pocketsphinx", "vision.enabled": False},
    "dialogue": {"proactive.enabled": False},
    "speech": {"sink": "null"},
}
PARAMETERS["camera"] = {**PARAMETERS["camera"], "compressed": True}


def relative(name: str, namespace: str, node: str) -> str:
    """A graph name as the table writes it: ``~/`` own, relative, or absolute."""
    if name.startswith(f"{namespace}/{node}/"):
        return "~/" + name[len(namespace) + len(node) + 2 :]
    if name.startswith(f"{namespace}/"):
        return name[len(namespace) + 1 :]
    return name


def seen(ros_node, node: str, namespace: str) -> security.NodeAccess:
    """What ``node`` has on the ROS graph now, action parts folded into their action."""

    def names(entries) -> set[str]:
        return {relative(name, namespace, node) for name, _types in entries}

    publish = names(ros_node.get_publisher_names_and_types_by_node(node, namespace))
    subscribe = names(ros_node.get_subscriber_names_and_types_by_node(node, namespace))
    reply = names(ros_node.get_service_names_and_types_by_node(node, namespace))
    request = names(ros_node.get_client_names_and_types_by_node(node, namespace))
    executed = {m.group(1) for m in map(_ACTION_PART.match, publish | reply) if m}
    called = {m.group(1) for m in map(_ACTION_PART.match, subscribe | request) if m}

    def plain(found: set[str]) -> tuple[str, ...]:
        return tuple(sorted(n for n in found if not _ACTION_PART.match(n)))

    return security.NodeAccess(
        plain(publish),
        plain(subscribe),
        plain(reply),
        plain(request),
        tuple(sorted(executed)),
        tuple(sorted(called)),
    )


def expected(node: str, present: security.NodeAccess) -> security.NodeAccess:
    """The table's entry, without the names that need parameters these nodes do not have."""
    table = security.access(node)
    return security.NodeAccess(
        *(
            tuple(
                n
                for n in getattr(table, kind)
                if n not in table.only_when or n in getattr(present, kind)
            )
            for kind in ("publish", "subscribe", "reply", "request", "execute", "call")
        )
    )


def test_every_node_does_what_the_access_table_says(ros_node, start_node):
    namespace = f"/t{uuid.uuid4().hex[:6]}"
    processes = {
        name: start_node(
            f"omniflow.nodes.{name}", name, PARAMETERS.get(name, {}), namespace=namespace
        )
        for name in GRAPH_NODES
    }
    assert set(GRAPH_NODES) == set(security.NODES)
    deadline = time.monotonic() + START_TIMEOUT_S
    for name in GRAPH_NODES:
        while True:
            try:
                found = seen(ros_node, name, namespace)
            except NodeNameNonExistentError:  # not discovered yet
                found = security.NodeAccess()
            if found == expected(name, found):
                break
            assert processes[name].running, processes[name].output()
            assert time.monotonic() < deadline, (
                f"{name} on the graph differs from omniflow.security.NODES[{name!r}] (update "
                f"the table, then `python -m omniflow.security --write docs/security.md` and "
                f"`--policy > config/sros2/policy.xml`):\n found    {found}\n expected "
                f"{expected(name, found)}"
            )
            time.sleep(0.2)
