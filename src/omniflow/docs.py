"""Markdown tables of the nodes' parameters, generated from their specs.

docs/nodes.md embeds this output between markers; a test keeps the two identical, so the
documentation cannot drift from the code. ``python -m omniflow.docs`` prints the tables;
``python -m omniflow.docs --write docs/nodes.md`` replaces them in place.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from omniflow.core.params import ParamSpec


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|")


def parameter_table(specs: tuple[ParamSpec, ...]) -> str:
    """A Markdown table: name, default, allowed values, when applied, description."""
    rows = ["| parameter | default | allowed | applied | description |", "|---|---|---|---|---|"]
    for spec in specs:
        if spec.choices:
            allowed = ", ".join(spec.choices)
        elif spec.minimum is not None and spec.maximum is not None:
            allowed = f"{spec.minimum:g} – {spec.maximum:g}"
        else:
            allowed = ""
        applied = "start-up" if spec.read_only else "at once" if spec.live else "configure"
        description = spec.description + (f" ({spec.unit})" if spec.unit else "")
        if isinstance(spec.default, str):
            default = f"`{spec.default!r}`"
        elif isinstance(spec.default, bool):
            default = f"`{str(spec.default).lower()}`"
        else:
            default = f"`{spec.default}`"
        rows.append(
            f"| `{spec.name}` | {default} | {_cell(allowed)} | {applied} | {_cell(description)} |"
        )
    return "\n".join(rows)


def node_tables() -> dict[str, str]:
    """The parameter table of every node, by node name."""
    from omniflow.nodes import audio_capture, camera, dialogue, fusion, power_manager, speech
    from omniflow.ros.device_node import COMMON_PARAMS

    return {
        "audio_capture": parameter_table(audio_capture.PARAMS),
        "camera": parameter_table(camera.PARAMS),
        "speech": parameter_table(speech.PARAMS),
        "fusion": parameter_table(fusion.PARAMS),
        "dialogue": parameter_table(dialogue.PARAMS),
        "power_manager": parameter_table(power_manager.PARAMS),
        "common": parameter_table(COMMON_PARAMS),
    }


def blocks() -> dict[str, str]:
    """Each node's table between the markers docs/nodes.md holds it in, by node name."""
    return {
        name: f"<!-- params:{name} -->\n{table}\n<!-- /params:{name} -->"
        for name, table in node_tables().items()
    }


def update(text: str) -> str:
    """``text`` with every marked table replaced by the one the specs generate now."""
    for name, block in blocks().items():
        text = re.sub(
            rf"<!-- params:{name} -->\n.*?<!-- /params:{name} -->",
            lambda _match, block=block: block,
            text,
            flags=re.S,
        )
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m omniflow.docs", description=__doc__)
    parser.add_argument(
        "--write", metavar="FILE", help="replace the marked tables in FILE (docs/nodes.md) in place"
    )
    args = parser.parse_args(argv)
    if args.write:
        path = Path(args.write)
        path.write_text(update(path.read_text()))
        return 0
    for block in blocks().values():
        print(block + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
