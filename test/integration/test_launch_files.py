"""Tier 2/3: each launch file under ROS 2's own launch system (``ros2 launch`` on the upstream
launch, launch_ros and ros2launch sources, see ros_launch.py), its nodes over DDS:

- ``replay.launch.py`` on the bundled session gives the replay regression's outputs;
- ``robot.launch.py`` and ``pi.launch.py``, with file stand-ins for the devices through
  ``params_file``, bring every node up active in ``namespace``, each in its SROS2 enclave,
  with the file's parameters and ``use_sim_time``;
- a capture node killed with SIGKILL is started again by launch's own respawn, and active.

Skipped (with the reason) when the shared vendor directory beside the checkout is absent.
"""

from __future__ import annotations

import json
import os
import signal
import uuid
from pathlib import Path

import pytest
import rclpy
import yaml
from lifecycle_msgs.msg import State
from rclpy.parameter import Parameter

from omniflow import demo, regression
from omniflow.bag import BagWriter
from omniflow.graph import CAPTURE_NODES, GRAPH_NODES, PROFILES, profile, sample_overrides
from omniflow.msg import AudioChunk
from omniflow.resources import sample, share_dir
from omniflow.ros.bag_io import Recorder
from omniflow.ros.monitor import TopicRecorder, spinning
from omniflow.ros.qos import SENSOR_DATA
from ros_helpers import get_parameter, lifecycle_state
from ros_launch import ROOT, LaunchProcess, wait_for

# The first test here also builds composition_interfaces once per checkout (under a minute).
pytestmark = pytest.mark.timeout(300)
# Models load on activation (Whisper, the detector, the LLM): generous on 2 loaded cores.
READY_TIMEOUT_S = demo.READY_TIMEOUT_S
# The session (about 12 s of bag time) at the regression's rate, and the answer after it.
PLAYED_TIMEOUT_S = 90.0
# A get_state call: a live node answers in milliseconds.
ANSWER_TIMEOUT_S = 2.0


def _ns() -> str:
    return f"/t{uuid.uuid4().hex[:6]}"


def stand_in_params(profile_name: str, path: Path, overrides: dict[str, dict]) -> Path:
    """The profile's own YAML with ``overrides`` (parameters by node name) merged in, written
    to ``path``: what a user passes as ``params_file``."""
    own = share_dir() / "config" / profile(profile_name).params_file
    sections = yaml.safe_load(own.read_text(encoding="utf-8")) or {}
    for node, values in overrides.items():
        section = sections.setdefault(node, {}).setdefault("ros__parameters", {})
        section.update(values)
    path.write_text(yaml.safe_dump(sections), encoding="utf-8")
    return path


def in_graph(node, namespace: str, name: str) -> bool:
    return (name, namespace) in node.get_node_names_and_namespaces()


def is_active(node, full_name: str) -> bool:
    """True when the node answers get_state with ACTIVE (False while it does not answer: a
    node killed a moment ago may still be listed in the graph, and never answers)."""
    try:
        return lifecycle_state(node, full_name, ANSWER_TIMEOUT_S) == State.PRIMARY_STATE_ACTIVE
    except TimeoutError:
        return False


def wait_all_active(node, launch: LaunchProcess, namespace: str, names: tuple[str, ...]) -> None:
    for name in names:
        full = f"{namespace}/{name}"
        wait_for(f"{full} active", lambda full=full: is_active(node, full), READY_TIMEOUT_S, launch)


# ------------------------------------------------------------------------------ replay
@pytest.mark.serial  # the regression's outputs, heard words included
def test_the_replay_launch_file_gives_the_regression_outputs(ros2_launch, tmp_path) -> None:
    namespace = _ns()  # given to the launch file as users write it: without the leading slash
    params = stand_in_params("replay", tmp_path / "replay.yaml", regression.OVERRIDES)
    context = rclpy.Context()
    rclpy.init(context=context)
    monitor = rclpy.create_node(
        "launch_test_recorder",
        namespace=namespace,
        context=context,
        parameter_overrides=[Parameter("use_sim_time", value=True)],
    )
    outputs = tmp_path / "outputs"
    try:
        with spinning(monitor), BagWriter(outputs) as writer:
            recorder = Recorder(monitor, writer, demo.recorded_topics(), namespace)
            launch = ros2_launch(
                "replay.launch.py",
                bag=str(demo.default_bag()),
                rate=str(regression.REPLAY_RATE),
                namespace=namespace.lstrip("/"),
                params_file=str(params),
            )
            # The player joins the graph at once, waits for the nodes, plays the session and
            # exits when the dialogue is listening again after its last answer. (Its exit, not
            # its leaving the graph: once, on a loaded machine, the monitor still listed the
            # player 90 s after launch reported its clean exit.)
            wait_for(
                "the bag player in the graph",
                lambda: in_graph(monitor, namespace, "omniflow_player"),
                READY_TIMEOUT_S,
                launch,
            )
            wait_all_active(monitor, launch, namespace, PROFILES["replay"].nodes)
            wait_for(
                "the bag played (the player's process exited)",
                lambda: not launch.children_with("replay", "--with-graph"),
                PLAYED_TIMEOUT_S,
                launch,
            )
            recorder.close()
    finally:
        monitor.destroy_node()
        rclpy.shutdown(context=context)
    summary = regression.summarize(demo.session_run(outputs, demo.default_bag()))
    golden = json.loads(regression.golden_path().read_text(encoding="utf-8"))
    problems = regression.compare(summary, golden)
    assert problems == [], (
        "\n".join(problems) + "\nthis run: " + json.dumps(summary) + "\n" + launch.output()
    )


# ------------------------------------------------------------------------ robot and Pi
def _devices_on_files() -> dict[str, dict[str, object]]:
    """Parameters that put the capture nodes on the bundled files and speech nowhere."""
    return {
        **sample_overrides(str(sample("hello.wav")), str(sample("scene.avi"))),
        "speech": {"sink": "null"},
    }


def _bring_up(
    ros2_launch, ros_node, tmp_path, file_name: str, profile_name: str, sim: bool, **arguments
):
    """Launch ``file_name`` on the stand-in file, wait for every node to be active and check
    the file's parameters and use_sim_time on each; ``arguments``: more launch arguments (a
    ``namespace`` as users write it, without the leading slash, is normalised)."""
    arguments.setdefault("namespace", _ns())
    namespace = "/" + arguments["namespace"].strip("/")
    params = stand_in_params(profile_name, tmp_path / f"{profile_name}.yaml", _devices_on_files())
    launch = ros2_launch(
        file_name, params_file=str(params), use_sim_time=str(sim).lower(), **arguments
    )
    wait_all_active(ros_node, launch, namespace, GRAPH_NODES)
    for name in GRAPH_NODES:
        assert get_parameter(ros_node, f"{namespace}/{name}", "use_sim_time") is sim, name
    # Each in its SROS2 enclave (announced with the node, so known once the node answers).
    enclaves = {(n, ns): e for n, ns, e in ros_node.get_node_names_and_namespaces_with_enclaves()}
    assert {name: enclaves.get((name, namespace)) for name in GRAPH_NODES} == {
        name: f"/omniflow/{name}" for name in GRAPH_NODES
    }
    # The stand-in file's parameters, and the profile's own ones it carries.
    assert get_parameter(ros_node, f"{namespace}/audio_capture", "source") == "file"
    assert get_parameter(ros_node, f"{namespace}/camera", "path") == str(sample("scene.avi"))
    assert get_parameter(ros_node, f"{namespace}/speech", "sink") == "null"
    own = yaml.safe_load(params.read_text(encoding="utf-8"))["power_manager"]["ros__parameters"]
    sustained_w = get_parameter(ros_node, f"{namespace}/power_manager", "budget.sustained_w")
    assert sustained_w == own["budget.sustained_w"]
    return launch, namespace


def test_the_pi_launch_file_brings_the_graph_up_on_sim_time(ros2_launch, ros_node, tmp_path):
    # As the README writes it (namespace:=robot1), and the accelerator chosen at launch.
    namespace = f"robot{uuid.uuid4().hex[:6]}"
    _bring_up(
        ros2_launch,
        ros_node,
        tmp_path,
        "pi.launch.py",
        "pi",
        sim=True,
        namespace=namespace,
        vision_accelerator="cpu",
    )
    accelerator = get_parameter(ros_node, f"/{namespace}/fusion", "vision.accelerator")
    assert accelerator == "cpu"  # over the Pi YAML's auto


def test_the_robot_launch_file_respawns_a_killed_capture_node(ros2_launch, ros_node, tmp_path):
    launch, namespace = _bring_up(
        ros2_launch, ros_node, tmp_path, "robot.launch.py", "pc", sim=False
    )
    killed = {}
    for name in CAPTURE_NODES:
        (killed[name],) = launch.children(name)
        os.kill(killed[name], signal.SIGKILL)
    for name, pid in killed.items():
        respawned = wait_for(
            f"{name} started again by launch",
            lambda name=name, pid=pid: [p for p in launch.children(name) if p != pid],
            READY_TIMEOUT_S,
            launch,
        )
        assert len(respawned) == 1, respawned
        full = f"{namespace}/{name}"
        wait_for(f"{full} active again", lambda full=full: is_active(ros_node, full), 60, launch)
    # The microphone is heard again: blocks from the respawned node.
    audio = TopicRecorder(ros_node, AudioChunk, f"{namespace}/audio", SENSOR_DATA)
    audio.wait_until(lambda chunks: len(chunks) >= 5, 10, "5 audio blocks after the respawn")
    assert launch.running
    # The other nodes kept running through it.
    others = tuple(n for n in GRAPH_NODES if n not in CAPTURE_NODES)
    wait_all_active(ros_node, launch, namespace, others)


def test_every_launch_file_runs_in_a_test_here() -> None:
    """The profile launch files run above (the base one through their includes): a new
    launch file needs a test here."""
    tested = {"replay.launch.py", "robot.launch.py", "pi.launch.py", "omniflow.launch.py"}
    assert {p.name for p in (ROOT / "launch").glob("*.py")} == tested
