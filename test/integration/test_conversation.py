"""Full duplex through the real graph over DDS (tier 2): the fusion, dialogue (embedded Gemma)
and speech nodes in their own processes, and a room in this process that turns what the
speaker plays into microphone audio, mixed with a recorded user when the test says so.

- a spoken question (a WAV) gets a streamed, spoken answer;
- the user talking over the robot stops generation and playback (barge-in);
- the robot's own voice coming back through the microphone does not.
"""

from __future__ import annotations

import json
import time
import uuid

from action_msgs.msg import GoalStatus
from dialogue_graph import (
    ANSWER_TIMEOUT_S,
    LONG_PROMPT,
    SLOW_SPEECH,
    dialogue_params,
    spoken_to_the_end,
    wait_future,
)
from room import Room
from std_msgs.msg import String

from omniflow.action import Converse
from omniflow.msg import DialogueState, ResponseChunk, SpeechState, Transcript, VoiceActivity
from omniflow.ros.monitor import TopicRecorder, wait_for_publishers
from omniflow.ros.qos import EVENTS, LATCHED, STATE_CHANGES
from ros_helpers import SpinThreadActionClient


class Conversation:
    """fusion + dialogue + speech in one namespace, with the room as their microphone."""

    def __init__(
        self, ros_node, start_node, *, fusion_params=None, speech_params=None, **room_options
    ):
        """``fusion_params``: more parameters of the fusion node; ``speech_params``: the
        speech node's (a null sink by default); ``room_options``: the room's
        (:class:`room.Room`)."""
        self.node = ros_node
        ns = self.namespace = f"/t{uuid.uuid4().hex[:6]}"
        self.fusion = start_node(
            "omniflow.nodes.fusion",
            "fusion",
            {"vision.enabled": False, **(fusion_params or {})},
            namespace=ns,
        )
        self.dialogue = start_node(
            "omniflow.nodes.dialogue", "dialogue", dialogue_params(), namespace=ns
        )
        self.speech = start_node(
            "omniflow.nodes.speech", "speech", speech_params or {"sink": "null"}, namespace=ns
        )
        self.fusion_status = TopicRecorder(ros_node, String, f"{ns}/fusion/status", LATCHED)
        self.states = TopicRecorder(ros_node, DialogueState, f"{ns}/dialogue_state", STATE_CHANGES)
        self.speech_states = TopicRecorder(
            ros_node, SpeechState, f"{ns}/speech_state", STATE_CHANGES
        )
        self.chunks = TopicRecorder(ros_node, ResponseChunk, f"{ns}/response", EVENTS)
        self.said = TopicRecorder(ros_node, Transcript, f"{ns}/user_said", EVENTS)
        self.activity = TopicRecorder(ros_node, VoiceActivity, f"{ns}/voice_activity", EVENTS)
        self.client = SpinThreadActionClient(ros_node, Converse, f"{ns}/converse")
        self.room = Room(ros_node, ns, **room_options)
        assert self.client.wait_for_server(timeout_sec=90), self.dialogue.output()
        self.fusion_status.wait_until(
            lambda ms: any(json.loads(m.data)["state"] == "active" for m in ms),
            timeout=90,
            what="fusion active",
        )
        self.states.wait_until(
            lambda ms: any(m.reason == "listening" for m in ms), timeout=90, what="dialogue active"
        )
        wait_for_publishers(ros_node, f"{ns}/played_audio", 1, timeout=30)
        self.speech_states.wait_for(1, timeout=30)
        deadline = time.monotonic() + 30
        while (
            ros_node.count_subscribers(f"{ns}/audio") < 1
            or ros_node.count_subscribers(f"{ns}/played_audio") < 2
            or ros_node.count_publishers(f"{ns}/voice_activity") < 1
        ):
            assert time.monotonic() < deadline, "the graph never connected"
            time.sleep(0.05)
        time.sleep(1.0)  # discovery settles both ways
        self.room.start()
        time.sleep(1.0)  # the VAD adapts to the room's noise

    def ask(self, prompt: str):
        goal = Converse.Goal(mode=Converse.Goal.MODE_PROMPT, prompt=prompt)
        handle = wait_future(self.client.send_goal_async(goal), 30)
        assert handle.accepted
        return handle

    def answer(self) -> tuple[int, str]:
        """The first turn the robot spoke to the end (``spoken_to_the_end``) and its whole
        streamed answer."""
        states = self.states.wait_until(
            lambda ms: spoken_to_the_end(ms) is not None,
            timeout=ANSWER_TIMEOUT_S,
            what="an answer spoken to the end",
        )
        turn_id = spoken_to_the_end(states)
        chunks = self.chunks.wait_until(
            lambda ms: any(c.turn_id == turn_id and c.is_final for c in ms),
            timeout=30,
            what="the whole answer",
        )
        return turn_id, "".join(c.text_delta for c in chunks if c.turn_id == turn_id)

    def outputs(self) -> str:
        """What each node printed, and what the test saw of the conversation: a failure's
        message shows which turn went where."""
        states = "\n".join(
            f"turn {m.turn_id}: {m.state} ({m.reason})" for m in self.states.messages
        )
        said = "\n".join(f"utterance {m.utterance_id}: {m.text!r}" for m in self.said.messages)
        activity = " ".join(
            f"{m.utterance_id}:{m.event}"
            for m in self.activity.messages
            if m.event != VoiceActivity.SILENCE
        )
        nodes = "\n".join(
            f"--- {p.spec.name}\n{p.output()[-1500:]}"
            for p in (self.fusion, self.dialogue, self.speech)
        )
        return (
            f"--- dialogue states\n{states}\n--- user_said\n{said}\n"
            f"--- voice activity (utterance:event, SILENCE left out)\n{activity}\n{nodes}"
        )

    def close(self) -> None:
        self.room.stop()


def test_a_spoken_question_gets_a_streamed_spoken_answer(ros_node, start_node):
    talk = Conversation(ros_node, start_node)
    try:
        talk.room.user_speaks(ros_node.get_clock().now().nanoseconds)
        said = talk.said.wait_until(
            lambda ms: len(ms) > 0, timeout=ANSWER_TIMEOUT_S, what="user_said"
        )
        question = said[-1]
        assert question.text.strip()
        turn_id, answer = talk.answer()
        assert answer.strip()
        talk.speech_states.wait_until(
            lambda ms: any(m.speaking and m.turn_id == turn_id for m in ms),
            timeout=30,
            what="the answer spoken",
        )
    except (TimeoutError, AssertionError) as err:
        raise AssertionError(f"{err}\n{talk.outputs()}") from err
    finally:
        talk.close()


def test_the_user_talking_over_the_robot_stops_it(ros_node, start_node):
    talk = Conversation(ros_node, start_node, speech_params=SLOW_SPEECH)
    try:
        handle = talk.ask(LONG_PROMPT)
        talk.speech_states.wait_until(
            lambda ms: any(m.speaking for m in ms),
            timeout=ANSWER_TIMEOUT_S,
            what="the robot speaking",
        )
        time.sleep(0.5)
        talk.room.user_speaks(ros_node.get_clock().now().nanoseconds)
        interrupted = talk.states.wait_until(
            lambda ms: any(m.state == DialogueState.INTERRUPTED for m in ms),
            timeout=30,
            what="barge-in",
        )
        reason = next(m.reason for m in interrupted if m.state == DialogueState.INTERRUPTED)
        assert "barge-in" in reason
        talk.speech_states.wait_until(
            lambda ms: not ms[-1].speaking, timeout=10, what="playback stopped"
        )
        outcome = wait_future(handle.get_result_async(), 30)
        assert outcome.status == GoalStatus.STATUS_ABORTED
        assert "interrupted" in outcome.result.error
        turn = outcome.result.turn_id
        count = len([c for c in talk.chunks.messages if c.turn_id == turn])
        time.sleep(1.0)
        assert len([c for c in talk.chunks.messages if c.turn_id == turn]) == count
    except (TimeoutError, AssertionError) as err:
        raise AssertionError(f"{err}\n{talk.outputs()}") from err
    finally:
        talk.close()


def test_the_robots_own_voice_does_not_interrupt_it(ros_node, start_node):
    talk = Conversation(ros_node, start_node)
    try:
        handle = talk.ask(LONG_PROMPT)
        outcome = wait_future(handle.get_result_async(), ANSWER_TIMEOUT_S)
        assert outcome.status == GoalStatus.STATUS_SUCCEEDED, outcome.result.error
        talk.speech_states.wait_until(
            lambda ms: any(m.speaking for m in ms) and not ms[-1].speaking,
            timeout=ANSWER_TIMEOUT_S,
            what="the robot spoke and finished",
        )
        time.sleep(1.5)  # the last echo reaches the fusion node
        states = [m.state for m in talk.states.messages]
        assert DialogueState.SPEAKING in states
        assert DialogueState.INTERRUPTED not in states
        assert talk.said.messages == []
        assert [m for m in talk.activity.messages if m.event == VoiceActivity.START] == []
        played = json.loads(talk.fusion_status.messages[-1].data)
        assert played["echo_chunks"] > 10, played
    except (TimeoutError, AssertionError) as err:
        raise AssertionError(f"{err}\n{talk.outputs()}") from err
    finally:
        talk.close()
