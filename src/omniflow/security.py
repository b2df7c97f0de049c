"""What each node of the graph needs on the ROS graph, for ROS 2 security (SROS2). No ROS.

With security enabled, a node may only publish, subscribe, serve and call what its enclave's
permissions allow. ``NODES`` lists that for every node of the graph (names as the node uses
them: relative to its namespace, ``~/`` for its own, ``/`` for absolute ones; the services a
node calls on others under their default names), ``EVERY_NODE`` what every node has (rclpy's
logging, parameters and type description, the lifecycle services, omniflow's status and
diagnostics). A test starts every node and compares what it really creates with these
tables, so they cannot drift from the code.

From them: the table in docs/security.md (``python -m omniflow.security --write
docs/security.md``), and an SROS2 policy with one enclave per node, ``/omniflow/<node>``
(``python -m omniflow.security --policy``; ``config/sros2/policy.xml`` is its output for the
root namespace), for ``ros2 security create_permission``.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from xml.sax.saxutils import escape, quoteattr

__all__ = [
    "ENCLAVE_ROOT",
    "EVERY_NODE",
    "NODES",
    "NodeAccess",
    "access",
    "access_table",
    "policy_xml",
]

# Where the enclaves of the graph's nodes live in a keystore: /omniflow/<node>.
ENCLAVE_ROOT = "/omniflow"


@dataclass(frozen=True)
class NodeAccess:
    """The topics, services and actions of one node, by what the node does with them."""

    publish: tuple[str, ...] = ()
    subscribe: tuple[str, ...] = ()
    reply: tuple[str, ...] = ()  # services the node serves
    request: tuple[str, ...] = ()  # services it calls
    execute: tuple[str, ...] = ()  # actions it serves
    call: tuple[str, ...] = ()  # actions it sends goals to
    #: Names the node creates only with some parameters, with when.
    only_when: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def merged(self, other: NodeAccess) -> NodeAccess:
        return NodeAccess(
            *(tuple(sorted({*getattr(self, kind), *getattr(other, kind)})) for kind in _KINDS),
            only_when=MappingProxyType({**self.only_when, **other.only_when}),
        )


_KINDS = ("publish", "subscribe", "reply", "request", "execute", "call")
_PARAMETER_SERVICES = (
    "~/describe_parameters",
    "~/get_parameter_types",
    "~/get_parameters",
    "~/list_parameters",
    "~/set_parameters",
    "~/set_parameters_atomically",
)
_LIFECYCLE_SERVICES = (
    "~/change_state",
    "~/get_available_states",
    "~/get_available_transitions",
    "~/get_state",
    "~/get_transition_graph",
)

EVERY_NODE = NodeAccess(
    publish=("/diagnostics", "/parameter_events", "/rosout", "~/status", "~/transition_event"),
    reply=(*_PARAMETER_SERVICES, *_LIFECYCLE_SERVICES, "~/get_type_description"),
)

# Each node's own, beyond EVERY_NODE.
NODES: Mapping[str, NodeAccess] = MappingProxyType(
    {
        "audio_capture": NodeAccess(publish=("audio",)),
        "camera": NodeAccess(
            publish=("image_raw", "image_raw/compressed"),
            only_when=MappingProxyType({"image_raw/compressed": "with `compressed: true`"}),
        ),
        "fusion": NodeAccess(
            publish=("associations", "scene", "transcript", "voice_activity"),
            subscribe=("audio", "image_raw", "played_audio"),
        ),
        "dialogue": NodeAccess(
            publish=("dialogue_state", "response", "user_said"),
            subscribe=(
                "associations",
                "image_raw",
                "power_state",
                "scene",
                "speech_state",
                "transcript",
                "voice_activity",
            ),
            request=("speech/stop",),
            execute=("converse",),
            only_when=MappingProxyType(
                {"image_raw": "with a model that sees images (`minicpmv`, `llm.remote.images`)"}
            ),
        ),
        "speech": NodeAccess(
            publish=("played_audio", "speech_state"),
            subscribe=("dialogue_state", "response"),
            reply=("~/stop",),
        ),
        "power_manager": NodeAccess(
            publish=("power_state",),
            subscribe=("dialogue_state", "voice_activity"),
            request=(
                "camera/set_parameters",
                "dialogue/change_state",
                "dialogue/get_state",
                "dialogue/set_parameters",
                "fusion/set_parameters",
            ),
        ),
    }
)


def access(node: str) -> NodeAccess:
    """Everything ``node`` needs: its own (``NODES``) and what every node has."""
    return NODES[node].merged(EVERY_NODE)


def _names(names: tuple[str, ...], only_when: Mapping[str, str]) -> str:
    if not names:
        return "–"
    return ", ".join(
        f"`{name}`" + (f" ({only_when[name]})" if name in only_when else "") for name in names
    )


def access_table() -> str:
    """A Markdown table: each node's topics, services and actions (docs/security.md)."""
    rows = [
        "| node | publishes | subscribes | serves | calls | actions served |",
        "|---|---|---|---|---|---|",
    ]
    for name, own in [("every node", EVERY_NODE), *NODES.items()]:
        cells = [
            _names(getattr(own, kind), own.only_when)
            for kind in ("publish", "subscribe", "reply", "request", "execute")
        ]
        label = name if name == "every node" else f"`{name}`"
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _rules(tag: str, item: str, attribute: str, names: tuple[str, ...]) -> list[str]:
    if not names:
        return []
    lines = [f'          <{tag} {attribute}="ALLOW">']
    lines += [f"            <{item}>{escape(name)}</{item}>" for name in names]
    return [*lines, f"          </{tag}>"]


def policy_xml(namespace: str = "/") -> str:
    """An SROS2 policy (``ros2 security create_permission``): one enclave per node,
    ``/omniflow/<node>``, for the graph's nodes in ``namespace``. Names a node creates only
    with some parameters are allowed too."""
    lines = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        "<!-- Generated by omniflow.security.policy_xml(): what each omniflow node",
        "     publishes, subscribes, serves and calls (docs/security.md). -->",
        '<policy version="0.2.0">',
        "  <enclaves>",
    ]
    for name in NODES:
        node = access(name)
        lines += [
            f"    <enclave path={quoteattr(f'{ENCLAVE_ROOT}/{name}')}>",
            "      <profiles>",
            f"        <profile ns={quoteattr(namespace)} node={quoteattr(name)}>",
            *_rules("topics", "topic", "publish", node.publish),
            *_rules("topics", "topic", "subscribe", node.subscribe),
            *_rules("services", "service", "reply", node.reply),
            *_rules("services", "service", "request", node.request),
            *_rules("actions", "action", "execute", node.execute),
            *_rules("actions", "action", "call", node.call),
            "        </profile>",
            "      </profiles>",
            "    </enclave>",
        ]
    return "\n".join([*lines, "  </enclaves>", "</policy>", ""])


def table_block() -> str:
    """The table between the markers docs/security.md holds it in."""
    return f"<!-- access -->\n{access_table()}\n<!-- /access -->"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m omniflow.security", description=__doc__)
    parser.add_argument("--policy", action="store_true", help="print the SROS2 policy")
    parser.add_argument(
        "--namespace", default="/", help="the nodes' namespace in the policy (default: /)"
    )
    parser.add_argument(
        "--write", metavar="FILE", help="replace the marked table in FILE (docs/security.md)"
    )
    args = parser.parse_args(argv)
    if args.policy:
        print(policy_xml(args.namespace), end="")
    elif args.write:
        path = Path(args.write)
        text = re.sub(
            r"<!-- access -->\n.*?<!-- /access -->",
            lambda _match: table_block(),
            path.read_text(),
            flags=re.S,
        )
        path.write_text(text)
    else:
        print(access_table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
