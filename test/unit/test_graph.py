"""Tier 1: the graph's tables (nodes, topics, profiles) and what launch files and `omniflow run`
start from them; the launch files are parsed and checked to stay thin over omniflow.graph."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from omniflow import graph
from omniflow.errors import ConfigError
from omniflow.graph import (
    CAPTURE_NODES,
    DDS_PROFILE_VARIABLE,
    GRAPH_NODES,
    MALLOC_ARENAS_VARIABLE,
    PROFILES,
    TOPICS,
    graph_nodes,
    launch_nodes,
    profile_nodes,
)

ROOT = Path(__file__).resolve().parents[2]
SHARE = "/opt/ros/share/omniflow"
CAMERA_ENV = {DDS_PROFILE_VARIABLE: "/x/large_frames.xml"}


@pytest.mark.parametrize(
    ("name", "yaml_file", "nodes", "sim_time"),
    [
        ("pc", "robot.yaml", GRAPH_NODES, False),
        ("pi", "pi.yaml", GRAPH_NODES, False),
        ("replay", "replay.yaml", tuple(n for n in GRAPH_NODES if n not in CAPTURE_NODES), True),
    ],
)
def test_each_profile_has_its_nodes_params_file_and_clock(name, yaml_file, nodes, sim_time):
    described = launch_nodes(name, SHARE, camera_env=CAMERA_ENV)
    assert [n.name for n in described] == list(nodes)
    assert [n.executable for n in described] == list(nodes)
    assert {n.params_files for n in described} == {(f"{SHARE}/config/{yaml_file}",)}
    assert {n.use_sim_time for n in described} == {sim_time}
    assert (ROOT / "config" / yaml_file).is_file()


def test_replay_runs_no_capture_node_and_uses_the_clock():
    replay = PROFILES["replay"]
    assert not set(replay.nodes) & set(CAPTURE_NODES)
    assert "fusion" in replay.nodes and replay.use_sim_time


def test_replay_keeps_the_live_speech_out_of_the_echo_reference():
    """The replayed microphone carries the echo of the bag's played audio, not of the live
    speech node's: in replay the live blocks go to another topic."""
    launched = {n.name: n for n in graph.launch_nodes("replay", "/share")}
    assert launched["speech"].remappings == {"played_audio": "replay/played_audio"}
    assert launched["fusion"].remappings == {}
    specs = {s.name: s for s in graph.profile_nodes("replay", str(ROOT))}
    assert specs["speech"].remappings == {"played_audio": "replay/played_audio"}
    assert all(not n.remappings for n in graph.launch_nodes("pc", "/share"))


def test_every_node_respawns_and_only_camera_and_fusion_get_dds_profiles(monkeypatch):
    monkeypatch.delenv(DDS_PROFILE_VARIABLE, raising=False)
    described = {n.name: n for n in launch_nodes("pc", SHARE, camera_env=CAMERA_ENV)}
    assert all(n.respawn for n in described.values())
    assert all(n.respawn_delay > 0 for n in described.values())
    profiles = {name: n.env.get(DDS_PROFILE_VARIABLE) for name, n in described.items()}
    assert profiles.pop("camera") == CAMERA_ENV[DDS_PROFILE_VARIABLE]
    assert profiles.pop("fusion") == f"{SHARE}/config/fastdds/frame_receiver.xml"
    assert set(profiles.values()) == {None}


def test_a_dds_profile_the_user_set_is_left_to_every_node(monkeypatch):
    monkeypatch.setenv(DDS_PROFILE_VARIABLE, "/home/me/fastdds.xml")
    assert all(DDS_PROFILE_VARIABLE not in n.env for n in launch_nodes("pi", SHARE))


def test_the_speech_node_gets_one_malloc_arena_unless_the_user_chose(monkeypatch):
    monkeypatch.delenv(MALLOC_ARENAS_VARIABLE, raising=False)
    for nodes in (launch_nodes("pc", SHARE), graph_nodes()):  # launch files, omniflow run
        arenas = {
            n.name: n.env[MALLOC_ARENAS_VARIABLE]
            for n in nodes
            if n.env.get(MALLOC_ARENAS_VARIABLE)
        }
        assert arenas == {"speech": "1"}
    monkeypatch.setenv(MALLOC_ARENAS_VARIABLE, "4")
    assert all(MALLOC_ARENAS_VARIABLE not in n.env for n in launch_nodes("pc", SHARE))


def test_the_camera_dds_profile_defaults_to_the_shared_file(monkeypatch):
    monkeypatch.delenv(DDS_PROFILE_VARIABLE, raising=False)
    camera = next(n for n in launch_nodes("pi", SHARE) if n.name == "camera")
    assert camera.env == {DDS_PROFILE_VARIABLE: f"{SHARE}/config/fastdds/large_frames.xml"}


def test_the_vision_accelerator_argument_sets_the_fusion_nodes_parameter_only():
    def extra(**kwargs) -> dict[str, dict]:
        actions = graph.launch_node_actions("pi", str(ROOT), **kwargs)
        return {a["name"]: a["parameters"][-1] for a in actions}

    assert all("vision.accelerator" not in p for p in extra().values())  # the YAML's
    chosen = extra(vision_accelerator="edgetpu")
    assert chosen["fusion"] == {"use_sim_time": False, "vision.accelerator": "edgetpu"}
    assert all("vision.accelerator" not in p for n, p in chosen.items() if n != "fusion")
    (argument,) = [a for a in graph.standard_arguments("pi") if a.name == "vision_accelerator"]
    assert argument.choices == ("", "auto", "edgetpu", "cpu") and argument.default == ""


def test_a_params_file_replaces_the_profiles_own():
    described = launch_nodes("pi", SHARE, params_file="/home/me/robot.yaml")
    assert {n.params_files for n in described} == {("/home/me/robot.yaml",)}


def test_an_unknown_profile_is_refused_naming_the_known_ones():
    with pytest.raises(ConfigError, match="pc, pi, replay"):
        launch_nodes("laptop", SHARE)


def test_profile_nodes_merge_yaml_overrides_and_sim_time(tmp_path, monkeypatch):
    monkeypatch.delenv(DDS_PROFILE_VARIABLE, raising=False)
    params = tmp_path / "mine.yaml"
    params.write_text(
        yaml.safe_dump(
            {
                "/**": {"ros__parameters": {"frame_id": "base"}},
                "speech": {"ros__parameters": {"sink": "wav", "wav.path": "/tmp/x.wav"}},
                "fusion": {"ros__parameters": {"vision.rate_hz": 2.0}},
            }
        )
    )
    specs = {
        s.name: s
        for s in profile_nodes(
            "replay", SHARE, "/r", params_file=str(params), overrides={"speech": {"sink": "null"}}
        )
    }
    assert specs["speech"].parameters == {
        "frame_id": "base",
        "sink": "null",
        "wav.path": "/tmp/x.wav",
        "use_sim_time": True,
    }
    assert specs["fusion"].parameters["vision.rate_hz"] == 2.0
    assert {s.namespace for s in specs.values()} == {"/r"}


def test_profile_nodes_read_the_shipped_profiles():
    specs = profile_nodes("pi", str(ROOT))
    assert specs[1].parameters["source"] == "picamera2"
    assert "use_sim_time" not in specs[0].parameters


def test_a_missing_params_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read parameters file"):
        profile_nodes("pc", SHARE, params_file=str(tmp_path / "none.yaml"))


def test_topics_are_unique_and_published_by_graph_nodes_or_nodes_to_come():
    names = [t.name for t in TOPICS]
    assert len(names) == len(set(names))
    assert {t.qos for t in TOPICS} <= {
        graph.SENSOR_DATA,
        graph.LATCHED,
        graph.EVENTS,
        graph.KEPT_EVENTS,
    }
    publishers = {t.publisher for t in TOPICS}
    assert set(GRAPH_NODES) <= publishers | {"speech"}
    assert graph.topic("dialogue_state").qos == graph.LATCHED
    assert graph.topic("response").qos == graph.KEPT_EVENTS  # for a speech node that joins late
    with pytest.raises(ConfigError, match="audio, image_raw"):
        graph.topic("nope")


def test_output_topics_follow_the_nodes_by_name():
    today = {t.name for t in graph.output_topics(("fusion", "speech"))}
    assert {"transcript", "associations", "speech_state"} <= today
    assert "response" not in today and "audio" not in today
    later = {t.name for t in graph.output_topics(("fusion", "speech", "dialogue", "power_manager"))}
    assert {"response", "dialogue_state", "user_said", "power_state"} <= later


LAUNCH_FILES = sorted((ROOT / "launch").glob("*.launch.py"))
STANDARD = ("namespace", "use_sim_time", "params_file", "log_level", "vision_accelerator")


@pytest.mark.parametrize("path", LAUNCH_FILES, ids=lambda p: p.name)
def test_launch_files_are_thin_over_the_shared_bringup(path):
    tree = ast.parse(path.read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "omniflow.bringup" in imported
    functions = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert len(functions) <= 2 and sum(len(ast.unparse(f).splitlines()) for f in functions) < 60


@pytest.mark.parametrize("name", [None, *PROFILES])
def test_every_launch_file_declares_the_standard_arguments(name):
    arguments = graph.standard_arguments(name)
    assert tuple(a.name for a in arguments) == STANDARD
    assert all(a.default is not None and a.description for a in arguments)
    sim_time = {a.name: a.default for a in arguments}["use_sim_time"]
    assert sim_time == ("true" if name and PROFILES[name].use_sim_time else "false")
    if name is not None:
        params_file = next(a for a in arguments if a.name == "params_file")
        assert f"config/{PROFILES[name].params_file}" in params_file.description


def test_the_base_launch_file_declares_the_profile_and_the_camera_dds_profile():
    arguments = {a.name: a for a in graph.base_arguments()}
    assert list(arguments) == ["profile", *STANDARD, "camera_dds_profile"]
    assert arguments["profile"].choices == tuple(PROFILES)
    assert arguments["profile"].default in PROFILES


@pytest.mark.parametrize(("name", "profile"), [("robot", "pc"), ("pi", "pi"), ("replay", "replay")])
def test_profile_launch_files_include_the_base_with_their_profile(name, profile):
    source = (ROOT / "launch" / f"{name}.launch.py").read_text()
    assert f'profile_launch("{profile}"' in source


def test_the_base_launch_file_takes_its_nodes_from_the_graph():
    source = (ROOT / "launch" / "omniflow.launch.py").read_text()
    assert "base_launch()" in source


def test_launch_node_actions_carry_respawn_sim_time_log_level_and_camera_env(monkeypatch):
    monkeypatch.delenv(DDS_PROFILE_VARIABLE, raising=False)
    actions = {
        a["name"]: a
        for a in graph.launch_node_actions(
            "pc", str(ROOT), namespace="/r1", log_level="debug", camera_dds_profile="/x/mine.xml"
        )
    }
    assert list(actions) == list(GRAPH_NODES)
    assert all(a["respawn"] for a in actions.values())
    env = {name: a["additional_env"] or {} for name, a in actions.items()}
    assert env["camera"] == {DDS_PROFILE_VARIABLE: "/x/mine.xml"}
    assert env["fusion"][DDS_PROFILE_VARIABLE] == f"{ROOT}/config/fastdds/frame_receiver.xml"
    assert [n for n in GRAPH_NODES if DDS_PROFILE_VARIABLE in env[n]] == ["camera", "fusion"]
    assert env["audio_capture"] == {}
    assert env["speech"] == graph.node_env("speech")
    for name, action in actions.items():
        assert action["package"] == "omniflow" and action["executable"] == name
        assert action["namespace"] == "/r1"
        enclave = ["--enclave", f"/omniflow/{name}"]  # its SROS2 enclave, as in the policy
        assert action["arguments"] == ["--ros-args", "--log-level", "debug", *enclave]
        own = yaml.safe_load((ROOT / "config" / "robot.yaml").read_text())
        from_file = {
            **own["/**"]["ros__parameters"],
            **own.get(name, {}).get("ros__parameters", {}),
        }
        assert action["parameters"] == [from_file, {"use_sim_time": False}]


def test_launch_node_actions_use_the_clock_when_asked_or_in_replay():
    asked = graph.launch_node_actions("pi", str(ROOT), use_sim_time=True)
    assert all(a["parameters"][-1] == {"use_sim_time": True} for a in asked)
    replay = {a["name"]: a for a in graph.launch_node_actions("replay", str(ROOT))}
    assert all(a["parameters"][-1] == {"use_sim_time": True} for a in replay.values())
    assert replay["speech"]["remappings"] == [("played_audio", "replay/played_audio")]


def test_launch_node_actions_default_to_the_packaged_camera_profile_and_yaml(tmp_path):
    mine = tmp_path / "pi.yaml"
    mine.write_text(yaml.safe_dump({"camera": {"ros__parameters": {"fps": 5.0}}}))
    actions = {
        a["name"]: a for a in graph.launch_node_actions("pi", str(ROOT), params_file=str(mine))
    }
    assert actions["camera"]["additional_env"] == {
        DDS_PROFILE_VARIABLE: f"{ROOT}/config/fastdds/large_frames.xml"
    }
    assert actions["camera"]["parameters"][0] == {"fps": 5.0}
    assert all(a["parameters"][0] == {} for n, a in actions.items() if n != "camera")


def test_a_params_file_reaches_nodes_in_a_namespace(tmp_path):
    """ROS matches a file's ``camera:`` key to ``/camera`` only: the launch files pass each
    node its sections, so a namespace does not lose them; ``/**``, ``/**/<name>`` and the
    full name apply too, later over earlier."""
    mine = tmp_path / "mine.yaml"
    sections = {
        "/**": {"ros__parameters": {"a": 1, "b": 1, "c": 1, "d": 1}},
        "/**/camera": {"ros__parameters": {"b": 2, "c": 2, "d": 2}},
        "camera": {"ros__parameters": {"c": 3, "d": 3}},
        "/robot1/camera": {"ros__parameters": {"d": 4}},
        "/robot2/camera": {"ros__parameters": {"d": 5}},
    }
    mine.write_text(yaml.safe_dump(sections))
    for namespace in ("/robot1", "robot1/"):
        actions = {
            a["name"]: a
            for a in graph.launch_node_actions(
                "pc", str(ROOT), namespace=namespace, params_file=str(mine)
            )
        }
        assert actions["camera"]["parameters"][0] == {"a": 1, "b": 2, "c": 3, "d": 4}
        assert actions["fusion"]["parameters"][0] == {"a": 1, "b": 1, "c": 1, "d": 1}


def test_an_unreadable_params_file_is_a_config_error_at_launch(tmp_path):
    with pytest.raises(ConfigError, match="cannot read parameters file"):
        graph.launch_node_actions("pc", str(ROOT), params_file=str(tmp_path / "none.yaml"))
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="keyed by node name"):
        graph.launch_node_actions("pc", str(ROOT), params_file=str(tmp_path / "list.yaml"))


def test_readme_topic_table_is_generated_from_the_graph():
    block = f"<!-- topics -->\n{graph.topic_table()}\n<!-- /topics -->"
    assert block in (ROOT / "README.md").read_text(), (
        "README's topic table is out of date: paste the output of `python -m omniflow.graph`"
    )


def test_omniflow_run_starts_each_node_in_its_enclave_of_the_policy():
    specs = graph.profile_nodes("pc", str(ROOT))
    policy = (ROOT / "config" / "sros2" / "policy.xml").read_text()
    for spec in specs:
        argv = spec.argv(Path("p.yaml"))
        enclave = argv[argv.index("--enclave") + 1]
        assert argv.index("--ros-args") < argv.index("--enclave")
        assert enclave == f"/omniflow/{spec.name}" and f'<enclave path="{enclave}">' in policy
