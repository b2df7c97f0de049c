"""Tier 2: every node of the conversation comes back from ``kill -9`` in the middle of a turn.

The fusion, dialogue, speech and power-manager nodes run under the supervisor ``omniflow run``
uses (``omniflow.launcher.Supervisor``: every node respawned ``RESPAWN_DELAY_S`` after it
exits), with the room of ``test_conversation`` as their microphone and the speech node's null
sink as the speaker. For each node in turn, in the middle of a turn, the node is killed with
SIGKILL; then:

- it is respawned and comes back active (its lifecycle state, asked over DDS);
- the others notice: the dialogue is back in LISTENING (no turn stuck in SPEAKING or
  THINKING, no utterance stuck in USER_SPEAKING), the speech node is not left speaking, and a
  converse goal that was running ends with the reason;
- the next question the user asks is answered and spoken.

The figures (killed -> back; the end of the next question -> its answer, beside the same
measured before any kill) are printed, for docs/design.md.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
import rclpy
from action_msgs.msg import GoalStatus
from dialogue_graph import (
    LONG_PROMPT,
    dialogue_params,
    spoken_to_the_end,
    wait_future,
    wait_into_answer,
)
from room import Room
from std_msgs.msg import String

from omniflow.action import Converse
from omniflow.graph import RESPAWN_DELAY_S
from omniflow.launcher import NodeSpec, Supervisor
from omniflow.msg import AudioChunk, DialogueState, ResponseChunk, SpeechState
from omniflow.ros.conversions import ns_from_time
from omniflow.ros.monitor import TopicRecorder, spinning, wait_for_publishers
from omniflow.ros.qos import EVENTS, LATCHED, SENSOR_DATA, STATE_CHANGES
from ros_helpers import SpinThreadActionClient

# Generous bounds for a loaded 2-core machine; the figures printed are what matters.
START_TIMEOUT_S = 120.0
BACK_TIMEOUT_S = 60.0
ANSWER_TIMEOUT_S = 60.0
USER_TURN_TIMEOUT_S = 3.0  # the dialogue gives up an utterance whose fusion node died
QUESTION_END_S = 3.2  # the end of the room's recorded question (room.HELLO)


@dataclass
class Recovery:
    node: str
    killed_in: str
    back_s: float  # killed -> respawned and active
    answer_s: float  # the end of the next question -> the first chunk of its answer
    spoken_s: float  # the end of the next question -> its answer playing


class Robot:
    """The conversation's nodes under a supervisor, the room, and this test's view of them."""

    def __init__(self, node) -> None:
        self.node = node
        ns = self.namespace = f"/t{uuid.uuid4().hex[:6]}"
        specs = [
            NodeSpec("omniflow.nodes.fusion", "fusion", {"vision.enabled": False}, namespace=ns),
            NodeSpec(
                "omniflow.nodes.dialogue",
                "dialogue",
                dialogue_params(user_turn_timeout_s=USER_TURN_TIMEOUT_S),
                namespace=ns,
            ),
            NodeSpec("omniflow.nodes.speech", "speech", {"sink": "null"}, namespace=ns),
            NodeSpec(
                "omniflow.nodes.power_manager",
                "power_manager",
                {
                    "policy.sleep_after_s": 3600.0,
                    "targets.camera": "",
                    "targets.vision": "",
                    "targets.llm": "dialogue",
                },
                namespace=ns,
            ),
        ]
        self.lines: list[str] = []
        self.supervisor = Supervisor(
            specs, {s.name for s in specs}, RESPAWN_DELAY_S, report=self.lines.append
        )
        self._stop = threading.Event()
        self._polling = threading.Thread(target=self._poll, daemon=True)
        self._polling.start()
        self.states = TopicRecorder(node, DialogueState, f"{ns}/dialogue_state", STATE_CHANGES)
        self.speech_states = TopicRecorder(node, SpeechState, f"{ns}/speech_state", STATE_CHANGES)
        self.chunks = TopicRecorder(node, ResponseChunk, f"{ns}/response", EVENTS)
        self.played = TopicRecorder(node, AudioChunk, f"{ns}/played_audio", SENSOR_DATA)
        self.status = {
            s.name: TopicRecorder(node, String, f"{ns}/{s.name}/status", LATCHED) for s in specs
        }
        self.client = SpinThreadActionClient(node, Converse, f"{ns}/converse")
        self.room = Room(node, ns)
        for name in self.supervisor.processes:
            self.wait_active(name, START_TIMEOUT_S)
        wait_for_publishers(node, f"{ns}/played_audio", 1, timeout=30)
        deadline = time.monotonic() + 30
        while node.count_subscribers(f"{ns}/audio") < 1:
            assert time.monotonic() < deadline, "fusion never subscribed to the audio"
            time.sleep(0.05)
        self.room.start()
        time.sleep(1.0)  # the VAD adapts to the room's noise

    def _poll(self) -> None:
        while not self._stop.wait(0.1):
            self.supervisor.poll()

    def wait_active(self, name: str, timeout: float, after: int = 0) -> None:
        """Wait for the node's latched ~/status to say active, among the messages from index
        ``after`` on (a killed process publishes nothing more: a new one is the respawn's)."""
        self.status[name].wait_until(
            lambda ms: any(json.loads(m.data)["state"] == "active" for m in ms[after:]),
            timeout,
            f"{name} active",
        )

    def kill(self, name: str) -> float:
        """SIGKILL the node; wait until it is respawned and active; seconds that took."""
        killed_at = time.monotonic()
        respawns = self.supervisor.respawns[name]
        self.supervisor.processes[name].process.kill()
        deadline = killed_at + BACK_TIMEOUT_S
        while self.supervisor.respawns[name] == respawns:
            assert time.monotonic() < deadline, f"{name} was not respawned"
            time.sleep(0.05)
        self.wait_active(name, BACK_TIMEOUT_S, after=len(self.status[name].messages))
        return time.monotonic() - killed_at

    def user_asks(self) -> None:
        self.room.user_speaks(self.node.get_clock().now().nanoseconds)

    def wait_dialogue(self, state: int, after: int, what: str) -> DialogueState:
        """The first dialogue state ``state`` among the messages from index ``after`` on."""
        messages = self.states.wait_until(
            lambda ms: any(m.state == state for m in ms[after:]), ANSWER_TIMEOUT_S, what
        )
        return next(m for m in messages[after:] if m.state == state)

    def ask_until(self, state: int, what: str) -> DialogueState:
        """The user asks; the first dialogue state ``state`` after that."""
        after = len(self.states.messages)
        self.user_asks()
        return self.wait_dialogue(state, after, what)

    def listening_now(self, what: str) -> None:
        self.states.wait_until(
            lambda ms: bool(ms) and ms[-1].state == DialogueState.LISTENING, ANSWER_TIMEOUT_S, what
        )

    def next_answer(self) -> tuple[float, float]:
        """Ask; seconds from the end of the question to the first chunk of the answer and to
        its playback."""
        since = time.monotonic() + QUESTION_END_S
        after = len(self.states.messages)
        heard = self.ask_until(DialogueState.THINKING, "the next question heard").turn_id
        # The answer's turn can be a later one: a pause inside the question ends the turn,
        # and the words after it open the next (spoken_to_the_end).
        self.chunks.wait_until(
            lambda ms: any(c.turn_id >= heard for c in ms), ANSWER_TIMEOUT_S, "an answer"
        )
        answered = time.monotonic() - since
        self.speech_states.wait_until(
            lambda ms: any(m.speaking and m.turn_id >= heard for m in ms),
            ANSWER_TIMEOUT_S,
            "the answer spoken",
        )
        spoken = time.monotonic() - since
        self.states.wait_until(
            lambda ms: spoken_to_the_end(ms[after:]) is not None,
            ANSWER_TIMEOUT_S,
            "an answer spoken to the end",
        )
        self.listening_now("listening after the answer")
        return answered, spoken

    def outputs(self) -> str:
        """What the supervisor reported, each node's output, and the last dialogue states."""
        states = "\n".join(
            f"  {ns_from_time(m.header.stamp) / 1e9:.3f} {m.state} turn {m.turn_id}: {m.reason}"
            for m in self.states.messages[-12:]
        )
        return (
            "\n".join(self.lines[-12:])
            + "\n"
            + "\n".join(
                f"--- {name}\n{p.output()[-1200:]}" for name, p in self.supervisor.processes.items()
            )
            + f"\n--- dialogue_state\n{states}"
            + "".join(
                f"\n--- {name}/status\n{recorder.messages[-1].data}"
                for name, recorder in self.status.items()
                if recorder.messages
            )
        )

    def close(self) -> None:
        self.room.stop()
        self._stop.set()
        self._polling.join(5)
        self.supervisor.close()


@pytest.fixture(scope="module")
def robot():
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node(f"test_{uuid.uuid4().hex[:8]}", context=context)
    with spinning(node):
        graph = Robot(node)
        try:
            RESULTS.append(Recovery("(none)", "", 0.0, *graph.next_answer()))
            yield graph
        finally:
            graph.close()
            print(
                "\nnode killed    | in             | back (s) | question end -> answer / spoken (s)"
            )
            for r in RESULTS:
                print(
                    f"{r.node:<14} | {r.killed_in:<14} | {r.back_s:8.1f} | "
                    f"{r.answer_s:.1f} / {r.spoken_s:.1f}"
                )
    node.destroy_node()
    rclpy.shutdown(context=context)


RESULTS: list[Recovery] = []


@contextmanager
def explained(robot: Robot) -> Iterator[None]:
    """A failed wait or assertion, with what the nodes said."""
    try:
        yield
    except (AssertionError, TimeoutError) as err:
        raise AssertionError(f"{err}\n{robot.outputs()}") from err


def recovered(robot: Robot, name: str, killed_in: str, back_s: float) -> None:
    RESULTS.append(Recovery(name, killed_in, back_s, *robot.next_answer()))


def test_speech_killed_while_speaking_a_goal_ends_it_with_the_reason(robot):
    with explained(robot):
        after = len(robot.speech_states.messages)
        handle = wait_future(
            robot.client.send_goal_async(
                Converse.Goal(mode=Converse.Goal.MODE_PROMPT, prompt=LONG_PROMPT)
            ),
            30,
        )
        assert handle.accepted
        robot.speech_states.wait_until(
            lambda ms: any(m.speaking for m in ms[after:]), ANSWER_TIMEOUT_S, "the robot speaking"
        )
        wait_into_answer(robot.played)
        back_s = robot.kill("speech")
        outcome = wait_future(handle.get_result_async(), ANSWER_TIMEOUT_S)
        assert outcome.status == GoalStatus.STATUS_ABORTED
        assert "speech node went away" in outcome.result.error
        robot.listening_now("listening after the speech node went away")
        status = json.loads(robot.status["dialogue"].messages[-1].data)
        assert status["speech_lost"] >= 1, status
        recovered(robot, "speech", "SPEAKING", back_s)


def test_dialogue_killed_while_the_robot_speaks_leaves_no_speech_behind(robot):
    with explained(robot):
        robot.ask_until(DialogueState.SPEAKING, "the robot answering")
        back_s = robot.kill("dialogue")
        robot.speech_states.wait_until(
            lambda ms: not ms[-1].speaking, ANSWER_TIMEOUT_S, "the speech node idle again"
        )
        robot.listening_now("the respawned dialogue node listening")
        recovered(robot, "dialogue", "SPEAKING", back_s)


def test_fusion_killed_while_the_user_speaks_leaves_no_utterance_open(robot):
    with explained(robot):
        robot.ask_until(DialogueState.USER_SPEAKING, "the user speaking")
        back_s = robot.kill("fusion")
        robot.listening_now("listening again without the utterance's end")
        recovered(robot, "fusion", "USER_SPEAKING", back_s)


def test_power_manager_killed_in_a_turn_the_turn_goes_on(robot):
    with explained(robot):
        after = len(robot.states.messages)
        robot.ask_until(DialogueState.THINKING, "the robot thinking")
        back_s = robot.kill("power_manager")
        # The question's answer, in whatever turn it ends (spoken_to_the_end).
        robot.states.wait_until(
            lambda ms: spoken_to_the_end(ms[after:]) is not None,
            ANSWER_TIMEOUT_S,
            "the question's answer spoken to the end",
        )
        robot.listening_now("listening after the turn")
        recovered(robot, "power_manager", "THINKING", back_s)
