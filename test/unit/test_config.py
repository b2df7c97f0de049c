"""The shipped YAML profiles, the graph description and the launch file agree with the nodes."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from omniflow.graph import CAPTURE_NODES, GRAPH_NODES, graph_nodes, sample_overrides
from omniflow.nodes import audio_capture, camera, dialogue, fusion, power_manager, speech
from omniflow.ros.device_node import COMMON_PARAMS

ROOT = Path(__file__).parents[2]
SPECS = {
    "audio_capture": audio_capture.PARAMS + COMMON_PARAMS,
    "camera": camera.PARAMS + COMMON_PARAMS,
    "speech": speech.PARAMS + COMMON_PARAMS,
    "fusion": fusion.PARAMS,
    "dialogue": dialogue.PARAMS,
    "power_manager": power_manager.PARAMS,
}


def profile_entries():
    for path in sorted((ROOT / "config").glob("*.yaml")):
        for node, section in yaml.safe_load(path.read_text()).items():
            for name, value in section["ros__parameters"].items():
                yield pytest.param(node, name, value, id=f"{path.name}:{node}.{name}")


@pytest.mark.parametrize(("node", "name", "value"), list(profile_entries()))
def test_every_profile_value_is_a_declared_and_allowed_parameter(node, name, value):
    specs = {spec.name: spec for spec in SPECS[node]}
    assert name in specs, f"{node} has no parameter {name}"
    assert specs[name].check(value) is None


def test_profiles_are_keyed_by_node_name_or_wildcard():
    for path in (ROOT / "config").glob("*.yaml"):
        keys = set(yaml.safe_load(path.read_text()))
        assert keys <= set(SPECS) | {"/**"}, path.name


def test_graph_nodes_describe_every_node_with_overrides():
    assert [spec.name for spec in graph_nodes()] == list(GRAPH_NODES)
    specs = graph_nodes(CAPTURE_NODES, "/robot", sample_overrides("/a.wav", "/b.avi"))
    assert [spec.name for spec in specs] == list(CAPTURE_NODES)
    assert [spec.executable for spec in specs] == ["audio_capture", "camera"]
    assert specs[0].parameters["file.path"] == "/a.wav"
    assert specs[1].parameters["source"] == "video"
    assert {spec.namespace for spec in specs} == {"/robot"}
    for spec in specs:
        problems = [
            spec_.check(spec.parameters[spec_.name])
            for spec_ in SPECS[spec.name]
            if spec_.name in spec.parameters
        ]
        assert problems == [None] * len(problems)


@pytest.mark.parametrize(
    "path", sorted((ROOT / "launch").glob("*.launch.py")), ids=lambda p: p.name
)
def test_launch_files_parse_and_document_the_standard_arguments(path):
    """Declared through omniflow.bringup (test_launcher.py builds each launch file and checks
    the declarations); each file's docstring names them for whoever reads it."""
    doc = ast.get_docstring(ast.parse(path.read_text()))
    for argument in ("namespace", "use_sim_time", "params_file", "log_level"):
        assert argument in doc


def test_node_reference_parameter_tables_are_generated_from_the_specs():
    from omniflow.docs import node_tables

    reference = (ROOT / "docs" / "nodes.md").read_text()
    for name, table in node_tables().items():
        block = f"<!-- params:{name} -->\n{table}\n<!-- /params:{name} -->"
        assert block in reference, (
            f"docs/nodes.md's {name} parameter table is out of date: "
            "run `python -m omniflow.docs --write docs/nodes.md`"
        )


def test_the_camera_gets_the_large_frames_dds_profile_unless_one_is_set(monkeypatch):
    from omniflow.graph import DDS_PROFILE_VARIABLE, FRAME_PUBLISHER_PROFILE, frame_publisher_env

    assert (ROOT.joinpath(*FRAME_PUBLISHER_PROFILE)).is_file()
    monkeypatch.delenv(DDS_PROFILE_VARIABLE, raising=False)
    env = frame_publisher_env("/opt/share/omniflow")
    assert env == {DDS_PROFILE_VARIABLE: "/opt/share/omniflow/config/fastdds/large_frames.xml"}
    specs = graph_nodes(camera_env=env)
    assert [DDS_PROFILE_VARIABLE in spec.env for spec in specs] == [False, True, *[False] * 4]
    assert specs[1].env == env
    monkeypatch.setenv(DDS_PROFILE_VARIABLE, "/mine.xml")
    assert frame_publisher_env("/opt/share/omniflow") == {}
