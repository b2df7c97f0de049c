"""Every node executable stops cleanly on SIGINT and SIGTERM (tier 2, real DDS): each is
started as the launch files start it, with file stand-ins for its devices, is seen active on
its latched ``~/status``, is busy where stopping used to crash (fusion decoding speech, the
speech node speaking), gets the signal, and exits with 0 and no traceback."""

from __future__ import annotations

import signal
import uuid
from pathlib import Path

import pytest
from test_speech import LONG_ANSWER, Conversation

from omniflow.launcher import NodeProcess
from ros_helpers import wait_active, wait_status

SAMPLES = Path(__file__).parents[1] / "data" / "samples"
HELLO = SAMPLES / "hello.wav"  # speech from about 0.5 s to 3.2 s
SCENE = SAMPLES / "scene.avi"
MICROPHONE = {"source": "file", "file.path": str(HELLO), "file.loop": True}
STOP_S = 20.0  # a stop joins workers (3 s each at most) and engines


def stop_and_check(process: NodeProcess, sig: signal.Signals) -> None:
    process.process.send_signal(sig)
    code = process.wait(STOP_S)
    output = process.output()
    assert code == 0, f"{process.spec.name} exited with {code} on {sig.name}:\n{output[-3000:]}"
    for sign in ("Traceback", "terminate called", "RCLError"):
        assert sign not in output, f"{process.spec.name} on {sig.name}:\n{output[-3000:]}"


@pytest.mark.parametrize(
    ("module", "parameters", "sig"),
    [
        ("audio_capture", MICROPHONE, signal.SIGINT),
        ("camera", {"source": "video", "path": str(SCENE), "fps": 10.0}, signal.SIGTERM),
        ("dialogue", {"proactive.enabled": False}, signal.SIGINT),
        (
            "power_manager",
            {"targets.camera": "", "targets.vision": "", "targets.llm": ""},
            signal.SIGTERM,
        ),
    ],
)
def test_an_idle_node_stops_with_exit_code_0(ros_node, start_node, module, parameters, sig):
    process = start_node(f"omniflow.nodes.{module}", module, parameters)
    wait_active(ros_node, process)
    stop_and_check(process, sig)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_fusion_stops_with_exit_code_0_while_it_decodes_speech(ros_node, start_node, sig):
    namespace = f"/t{uuid.uuid4().hex[:6]}"
    fusion = start_node(
        "omniflow.nodes.fusion", "fusion", {"vision.enabled": False}, namespace=namespace
    )
    status = wait_active(ros_node, fusion)
    start_node("omniflow.nodes.audio_capture", "audio_capture", MICROPHONE, namespace=namespace)
    wait_status(status, lambda s: s["speech_starts"] >= 1, "fusion hearing speech")
    stop_and_check(fusion, sig)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_speech_stops_with_exit_code_0_while_it_speaks(ros_node, start_node, sig):
    speech = start_node("omniflow.nodes.speech", "speech", {"sink": "null"})
    conversation = Conversation(ros_node, speech)  # waits until it is active
    conversation.say(1, LONG_ANSWER)
    conversation.wait_speaking(1)
    stop_and_check(speech, sig)
