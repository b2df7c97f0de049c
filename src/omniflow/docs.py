"""Markdown tables of the nodes' parameters, generated from their specs.

docs/nodes.md embeds this output between markers; a test keeps the two identical, so the
documentation cannot drift from the code. ``python -m omniflow.docs`` prints the tables.
"""

from __future__ import annotations

from omniflow.core.params import ParamSpec


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|")


def parameter_table(specs: tuple[ParamSpec, ...]) -> str:
    """A Markdown table: name, default, allowed values, when applied, description."""
    rows = ["| parameter | default | allowed | applied | description |",
            "|---|---|---|---|---|"]
    for spec in specs:
        if spec.choices:
            allowed = ", ".join(spec.choices)
        elif spec.minimum is not None and spec.maximum is not None:
            allowed = f"{spec.minimum:g} – {spec.maximum:g}"
        else:
            allowed = ""
        applied = "start-up" if spec.read_only else "at once" if spec.live else "configure"
        description = spec.description + (f" ({spec.unit})" if spec.unit else "")
        default = f"`{spec.default!r}`" if isinstance(spec.default, str) else \
            f"`{str(spec.default).lower() if isinstance(spec.default, bool) else spec.default}`"
        rows.append(f"| `{spec.name}` | {default} | {_cell(allowed)} | {applied} | "
                    f"{_cell(description)} |")
    return "\n".join(rows)


def node_tables() -> dict[str, str]:
    """The parameter table of every node, by node name."""
    from omniflow.nodes import audio_capture, camera, dialogue, fusion, power_manager, speech
    from omniflow.ros.device_node import COMMON_PARAMS
    return {"audio_capture": parameter_table(audio_capture.PARAMS),
            "camera": parameter_table(camera.PARAMS),
            "speech": parameter_table(speech.PARAMS),
            "fusion": parameter_table(fusion.PARAMS),
            "dialogue": parameter_table(dialogue.PARAMS),
            "power_manager": parameter_table(power_manager.PARAMS),
            "common": parameter_table(COMMON_PARAMS)}


def main() -> int:
    for name, table in node_tables().items():
        print(f"<!-- params:{name} -->\n{table}\n<!-- /params:{name} -->\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
