"""The power manager in its own process, acting on real nodes over real DDS (tier 2).

Hardware is the only thing faked: a sysfs/procfs tree (test/data/sysfs) whose temperature
file the test rewrites.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
import uuid
from pathlib import Path

import pytest
import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from lifecycle_msgs.msg import State, Transition
from rcl_interfaces.srv import SetParameters
from std_msgs.msg import String

from omniflow.msg import DialogueState, PowerState, VoiceActivity
from omniflow.ros.monitor import TopicRecorder, spinning, wait_for_publishers
from omniflow.ros.qos import EVENTS, LATCHED, STATE_CHANGES
from ros_helpers import change_state, get_parameter, lifecycle_state, set_parameters, topic

MODULE = "omniflow.nodes.power_manager"
CAMERA_MODULE = "omniflow.nodes.camera"
# The node holding the LLM.
LLM_NODE_MODULE = "omniflow.nodes.dialogue"
LLM_NODE_PARAMS: dict[str, object] = {"proactive.enabled": False}
LLM_THREADS = 2
SCENE = Path(__file__).parents[1] / "data" / "samples" / "scene.avi"
PI5_TREE = Path(__file__).parents[1] / "data" / "sysfs" / "pi5"
TIMEOUT_S = 60.0

# Short timeouts so a test sees LISTEN -> IDLE -> SLEEP in seconds; no targets by default.
FAST = {
    "policy.active_hold_s": 1.0,
    "policy.idle_after_s": 3.0,
    "policy.sleep_after_s": 3600.0,
    "policy.min_dwell_s": 0.5,
    "period_s": 0.5,
    "targets.camera": "",
    "targets.vision": "",
    "targets.llm": "",
}


def wait_parameter(node, process, name: str, value: object, timeout: float = TIMEOUT_S):
    """Poll a parameter of a node process until it has ``value``."""
    deadline = time.monotonic() + timeout
    current = None
    while time.monotonic() < deadline:
        current = get_parameter(node, process, name)
        if current == value:
            return
        time.sleep(0.2)
    raise TimeoutError(
        f"{process.spec.name}.{name} is {current!r}, not {value!r}, after {timeout} s"
    )


def wait_state(node, process, state: int, timeout: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    current = None
    while time.monotonic() < deadline:
        current = lifecycle_state(node, process)
        if current == state:
            return
        time.sleep(0.2)
    raise TimeoutError(f"{process.spec.name} is in state {current}, not {state}")


def wait_mode(recorder: TopicRecorder, mode: int, what: str) -> PowerState:
    messages = recorder.wait_until(
        lambda msgs: bool(msgs) and msgs[-1].mode == mode, TIMEOUT_S, what
    )
    return messages[-1]


def dialogue_publisher(node, namespace: str):
    publisher = node.create_publisher(DialogueState, f"{namespace}/dialogue_state", LATCHED)

    def publish(state: int) -> None:
        publisher.publish(DialogueState(state=state, reason="test"))

    return publish


def power_recorder(node, namespace: str) -> TopicRecorder:
    return TopicRecorder(node, PowerState, f"{namespace}/power_state", STATE_CHANGES)


@pytest.fixture
def namespace() -> str:
    return f"/p{uuid.uuid4().hex[:6]}"


def test_camera_rate_follows_the_conversation(ros_node, start_node, namespace):
    camera = start_node(
        CAMERA_MODULE, "camera", {"source": "video", "path": str(SCENE), "fps": 20.0}, namespace
    )
    manager = start_node(MODULE, "power_manager", {**FAST, "targets.camera": "camera"}, namespace)
    states = power_recorder(ros_node, namespace)
    publish = dialogue_publisher(ros_node, namespace)
    wait_for_publishers(ros_node, topic(manager, "power_state"), 1, timeout=30)
    publish(DialogueState.LISTENING)

    # LISTEN first (15 fps), IDLE after policy.idle_after_s without interaction.
    idle = wait_mode(states, PowerState.IDLE, "IDLE after the idle timeout")
    assert idle.camera_fps == 10.0 and "quiet" in idle.reason
    # Real /sys and /proc here: a load, and a power (measured or, without a sensor, modelled).
    assert 0.0 <= idle.cpu_load <= 1.0 and idle.power_w > 0.0
    wait_parameter(ros_node, camera, "fps", 10.0)

    publish(DialogueState.USER_SPEAKING)
    active = wait_mode(states, PowerState.ACTIVE, "ACTIVE when the user speaks")
    assert active.camera_fps == 30.0 and active.reason == "in conversation"
    wait_parameter(ros_node, camera, "fps", 30.0)

    publish(DialogueState.LISTENING)  # after the hold: LISTEN, then IDLE again
    wait_mode(states, PowerState.IDLE, "IDLE again once the conversation is over")
    wait_parameter(ros_node, camera, "fps", 10.0)

    # The user's voice alone (fusion's voice activity, one event per slice) wakes it too.
    voice = ros_node.create_publisher(VoiceActivity, f"{namespace}/voice_activity", EVENTS)
    deadline = time.monotonic() + TIMEOUT_S
    while states.messages[-1].mode != PowerState.ACTIVE:
        assert time.monotonic() < deadline, "voice activity did not wake the robot"
        voice.publish(VoiceActivity(event=VoiceActivity.ONGOING, utterance_id=1))
        time.sleep(0.2)
    wait_parameter(ros_node, camera, "fps", 30.0)
    assert manager.running and camera.running


def test_over_temperature_throttles_and_recovers(ros_node, start_node, namespace, tmp_path):
    root = tmp_path / "pi5"
    shutil.copytree(PI5_TREE, root)
    temp = root / "sys/class/thermal/thermal_zone0/temp"
    cpufreq = root / "sys/devices/system/cpu/cpu2/cpufreq"
    camera = start_node(
        CAMERA_MODULE, "camera", {"source": "video", "path": str(SCENE), "fps": 20.0}, namespace
    )
    manager = start_node(
        MODULE,
        "power_manager",
        {
            **FAST,
            "policy.idle_after_s": 3600.0,
            "sysfs_root": str(root),
            "budget.temperature_c": 80.0,
            "targets.camera": "camera",
        },
        namespace,
    )
    states = power_recorder(ros_node, namespace)
    diagnostics = TopicRecorder(ros_node, DiagnosticArray, "/diagnostics", 10)

    listen = wait_mode(states, PowerState.LISTEN, "LISTEN at 52 °C")
    assert listen.temperature_c == pytest.approx(52.35, abs=0.01)
    wait_parameter(ros_node, camera, "fps", 15.0)
    assert (cpufreq / "scaling_governor").read_text().strip() == "schedutil"

    temp.write_text("85000\n")
    hot = wait_mode(states, PowerState.THERMAL_LIMIT, "THERMAL_LIMIT at 85 °C")
    assert "85.0 °C >= limit 80" in hot.reason and hot.camera_fps == 10.0
    wait_parameter(ros_node, camera, "fps", 10.0)
    deadline = time.monotonic() + TIMEOUT_S
    while (cpufreq / "scaling_max_freq").read_text().strip() != "1440000":
        assert time.monotonic() < deadline, "the frequency cap was not written"
        time.sleep(0.2)
    assert (cpufreq / "scaling_governor").read_text().strip() == "powersave"
    name = f"omniflow: {namespace}/power_manager"

    def hot_status(arrays):
        return any(
            s.name == name and s.message.startswith("THERMAL_LIMIT")
            for array in arrays
            for s in array.status
        )

    arrays = diagnostics.wait_until(hot_status, TIMEOUT_S, "a THERMAL_LIMIT diagnostic")
    status = next(
        s
        for array in reversed(arrays)
        for s in array.status
        if s.name == name and s.message.startswith("THERMAL_LIMIT")
    )
    values = {kv.key: kv.value for kv in status.values}
    assert status.level == b"\x01"  # WARN
    assert values["temperature_c"] == "85.0" and values["cpu_freq_mhz"] == "1500"
    assert values["board"] == "Raspberry Pi 5 Model B Rev 1.0"
    # The fake /proc/stat never moves: no load, so no estimate either.
    assert values["cpu_load"] == "nan" and values["power_w"] == "nan"

    temp.write_text("79000\n")  # under the limit but within the hysteresis: stays
    time.sleep(2.0)
    assert states.messages[-1].mode == PowerState.THERMAL_LIMIT
    temp.write_text("70000\n")
    wait_mode(states, PowerState.LISTEN, "LISTEN once cooled below 77 °C")
    wait_parameter(ros_node, camera, "fps", 15.0)
    while (cpufreq / "scaling_max_freq").read_text().strip() != "2400000":
        assert time.monotonic() < deadline + TIMEOUT_S, "the frequency cap was not lifted"
        time.sleep(0.2)
    assert manager.running

    # A cap does not outlive the node: stopped while hot, it lifts the cap on its way out.
    temp.write_text("90000\n")
    wait_mode(states, PowerState.THERMAL_LIMIT, "THERMAL_LIMIT at 90 °C")
    deadline = time.monotonic() + TIMEOUT_S
    while (cpufreq / "scaling_max_freq").read_text().strip() != "1440000":
        assert time.monotonic() < deadline, "the frequency cap was not written again"
        time.sleep(0.2)
    assert manager.stop() == 0
    assert (cpufreq / "scaling_max_freq").read_text().strip() == "2400000"


MUTE_S = 3.0


@pytest.fixture
def mute_node(namespace):
    """A node in this process whose set_parameters service answers too late: each call waits
    :data:`MUTE_S`, past the manager's 1 s timeout (a callback waiting until the test ends
    would hold the next call back as long: one executor thread runs them in turn)."""
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node(
        "mute", namespace=namespace, context=context, start_parameter_services=False
    )
    release = threading.Event()
    calls = []

    def never(request, response):
        calls.append(request)
        release.wait(MUTE_S)
        return response

    node.create_service(SetParameters, "mute/set_parameters", never)
    with spinning(node):
        yield calls
        release.set()
    node.destroy_node()
    rclpy.shutdown(context=context)


def test_targets_that_do_not_answer_are_logged_and_retried(
    ros_node, start_node, namespace, mute_node
):
    manager = start_node(
        MODULE,
        "power_manager",
        {
            **FAST,
            "targets.camera": "nobody_runs_this",
            "targets.vision": "mute",
            "targets.timeout_s": 1.0,
        },
        namespace,
    )
    states = power_recorder(ros_node, namespace)
    states.wait_for(1, timeout=30)
    deadline = time.monotonic() + TIMEOUT_S
    output = ""
    while not ("did not answer within 1 s" in output and "is not available" in output):
        assert time.monotonic() < deadline, output
        time.sleep(0.5)
        output = manager.output()
    # The silent service is called again after each timeout; the node keeps working.
    while len(mute_node) < 2:
        assert time.monotonic() < deadline, "no retry of the silent target"
        time.sleep(0.2)
    count = len(states.messages)
    states.wait_for(count + 3, timeout=30)
    wait_mode(states, PowerState.IDLE, "IDLE, targets or not")
    assert manager.running
    assert "nobody_runs_this/set_parameters is not available" in output
    assert "Traceback" not in manager.output()


def test_llm_lifecycle_follows_the_conversation(ros_node, start_node, namespace):
    llm = start_node(LLM_NODE_MODULE, "dialogue", LLM_NODE_PARAMS, namespace)
    # The model loads first: a manager started beside it can reach SLEEP (3 s) and free the
    # model before a loaded 2-core machine has finished loading it.
    wait_state(ros_node, llm, State.PRIMARY_STATE_ACTIVE)
    manager = start_node(
        MODULE,
        "power_manager",
        {
            **FAST,
            "policy.idle_after_s": 1.0,
            "policy.sleep_after_s": 3.0,
            "targets.llm": "dialogue",
            "llm.threads": LLM_THREADS,
        },
        namespace,
    )
    states = power_recorder(ros_node, namespace)
    publish = dialogue_publisher(ros_node, namespace)
    publish(DialogueState.LISTENING)

    wait_mode(states, PowerState.SLEEP, "SLEEP after the sleep timeout")
    wait_state(ros_node, llm, State.PRIMARY_STATE_UNCONFIGURED)  # the model is freed

    publish(DialogueState.USER_SPEAKING)
    wait_mode(states, PowerState.ACTIVE, "ACTIVE when the user speaks")
    wait_state(ros_node, llm, State.PRIMARY_STATE_ACTIVE)
    assert manager.running and llm.running
    assert "dialogue lifecycle: False" in manager.output()


def test_inconsistent_parameters_are_refused_at_start_up_and_at_run_time(ros_node, start_node):
    bad = start_node(MODULE, "power_manager", {**FAST, "model.idle_w": 3.0, "model.max_w": 2.0})
    assert bad.wait(timeout=30) == 2
    assert "model.max_w (2.0 W) is below model.idle_w (3.0 W)" in bad.output()

    manager = start_node(MODULE, "power_manager", FAST)
    (result,) = set_parameters(ros_node, manager, **{"policy.sleep_after_s": 1.0})
    assert not result.successful and "SLEEP comes after IDLE" in result.reason
    (unknown_mode,) = set_parameters(ros_node, manager, **{"cpu.control": "turbo"})
    assert not unknown_mode.successful and "auto, advise, off" in unknown_mode.reason
    (good,) = set_parameters(ros_node, manager, **{"camera.fps_idle": 5.0})
    assert good.successful
    assert get_parameter(ros_node, manager, "camera.fps_idle") == 5.0


def test_a_lifecycle_manager_drives_it_and_deactivate_lifts_the_cap(
    ros_node, start_node, namespace, tmp_path
):
    root = tmp_path / "pi5"
    shutil.copytree(PI5_TREE, root)
    (root / "sys/class/thermal/thermal_zone0/temp").write_text("90000\n")
    cap = root / "sys/devices/system/cpu/cpu2/cpufreq/scaling_max_freq"
    manager = start_node(
        MODULE,
        "power_manager",
        {**FAST, "autostart": False, "sysfs_root": str(root), "budget.temperature_c": 80.0},
        namespace,
    )
    states = power_recorder(ros_node, namespace)
    status = TopicRecorder(ros_node, String, f"{namespace}/power_manager/status", LATCHED)
    wait_state(ros_node, manager, State.PRIMARY_STATE_UNCONFIGURED)
    time.sleep(2 * FAST["period_s"])
    assert states.messages == []  # nothing runs before a lifecycle manager says so

    assert change_state(ros_node, manager, Transition.TRANSITION_CONFIGURE)
    assert change_state(ros_node, manager, Transition.TRANSITION_ACTIVATE)
    wait_mode(states, PowerState.THERMAL_LIMIT, "THERMAL_LIMIT at 90 °C")
    reports = status.wait_until(
        lambda msgs: any(json.loads(m.data).get("mode") == "THERMAL_LIMIT" for m in msgs),
        TIMEOUT_S,
        "a status with the mode",
    )
    assert json.loads(reports[-1].data)["state"] == "active"
    deadline = time.monotonic() + TIMEOUT_S
    while cap.read_text().strip() != "1440000":
        assert time.monotonic() < deadline, "the frequency cap was not written"
        time.sleep(0.2)

    assert change_state(ros_node, manager, Transition.TRANSITION_DEACTIVATE)
    assert cap.read_text().strip() == "2400000"  # nobody watches the temperature now
    count = len(states.messages)
    time.sleep(2 * FAST["period_s"])
    assert len(states.messages) == count
    assert change_state(ros_node, manager, Transition.TRANSITION_ACTIVATE)
    deadline = time.monotonic() + TIMEOUT_S
    while cap.read_text().strip() != "1440000":
        assert time.monotonic() < deadline, "the cap was not written again on activate"
        time.sleep(0.2)
    assert manager.running
