"""The access table for ROS 2 security, and what is made from it (tier 1, no ROS): the table
in docs/security.md and config/sros2/policy.xml are its current output, and the policy has
one enclave per node with every name the node needs (test/integration/test_security_access.py
compares the table with the running nodes)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from omniflow import security
from omniflow.graph import GRAPH_NODES

ROOT = Path(__file__).parents[2]


def test_docs_hold_the_current_access_table():
    assert security.table_block() in (ROOT / "docs" / "security.md").read_text(), (
        "docs/security.md is out of date: python -m omniflow.security --write docs/security.md"
    )


def test_the_shipped_policy_is_the_generated_one():
    assert (ROOT / "config" / "sros2" / "policy.xml").read_text() == security.policy_xml(), (
        "config/sros2/policy.xml is out of date: "
        "python -m omniflow.security --policy > config/sros2/policy.xml"
    )


def test_the_policy_has_an_enclave_per_node_with_all_it_needs():
    policy = ET.fromstring(security.policy_xml("/robot1"))
    assert policy.tag == "policy" and policy.get("version")
    enclaves = policy.findall("./enclaves/enclave")
    assert [e.get("path") for e in enclaves] == [f"/omniflow/{n}" for n in GRAPH_NODES]
    for enclave in enclaves:
        (profile,) = enclave.findall("./profiles/profile")
        assert profile.get("ns") == "/robot1"
        node = security.access(profile.get("node"))
        for tag, item, rule, names in [
            ("topics", "topic", "publish", node.publish),
            ("topics", "topic", "subscribe", node.subscribe),
            ("services", "service", "reply", node.reply),
            ("services", "service", "request", node.request),
            ("actions", "action", "execute", node.execute),
        ]:
            allowed = [
                e.text
                for group in profile.findall(f"./{tag}[@{rule}='ALLOW']")
                for e in group.findall(item)
            ]
            assert sorted(allowed) == sorted(names), (profile.get("node"), rule)
    dialogue = security.access("dialogue")
    assert "converse" in dialogue.execute and "speech/stop" in dialogue.request
    assert "~/stop" in security.access("speech").reply


def test_every_node_shares_the_standard_services_and_topics():
    for name in GRAPH_NODES:
        node = security.access(name)
        assert {"/rosout", "/parameter_events", "~/status"} <= set(node.publish)
        assert {"~/set_parameters", "~/change_state"} <= set(node.reply)
