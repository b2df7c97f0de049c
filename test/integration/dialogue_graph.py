"""The dialogue node and a speech node in one namespace, as the tests see them."""

from __future__ import annotations

import time
import uuid

from lifecycle_msgs.msg import State as LifecycleStateMsg
from std_msgs.msg import String

from omniflow.action import Converse
from omniflow.msg import (
    DialogueState,
    ResponseChunk,
    SpeechState,
    Transcript,
    TranscriptWord,
    VoiceActivity,
)
from omniflow.ros import conversions
from omniflow.ros.monitor import TopicRecorder
from omniflow.ros.qos import EVENTS, LATCHED, STATE_CHANGES
from ros_helpers import SpinThreadActionClient, lifecycle_state

DIALOGUE = "omniflow.nodes.dialogue"
SPEECH = "omniflow.nodes.speech"
# Generous: two cores shared with the rest of the suite; the model loads in ~1-3 s.
START_TIMEOUT_S = 90.0
ANSWER_TIMEOUT_S = 120.0
LONG_PROMPT = "Tell me a long story about a robot who learns to cook, with many details."
# The speech node's voice for tests where the user talks over the robot: the slowest
# espeak-ng rate, so whatever the model answers to LONG_PROMPT (it has ended after a few
# words) is spoken for seconds, not the ~1 s a short answer takes.
SLOW_SPEECH = {"sink": "null", "words_per_minute": 80}


def dialogue_params(**overrides) -> dict[str, object]:
    params = {
        "llm.backend": "embedded",
        "llm.max_tokens": 64,
        "llm.seed": 7,
        "proactive.enabled": False,
        "speech_start_timeout_s": 2.0,
    }
    params.update(overrides)
    return params


class Graph:
    """The dialogue and speech nodes in one namespace, and this test's view of them
    (``speech_params``: the speech node's, the null sink by default; ``params``: the
    dialogue node's)."""

    def __init__(self, ros_node, start_node, *, speech: bool = True, speech_params=None, **params):
        self.node = ros_node
        self.namespace = f"/t{uuid.uuid4().hex[:6]}"
        self.dialogue = start_node(
            DIALOGUE, "dialogue", dialogue_params(**params), namespace=self.namespace
        )
        self.speech = (
            start_node(
                SPEECH, "speech", speech_params or {"sink": "null"}, namespace=self.namespace
            )
            if speech
            else None
        )
        self.states = TopicRecorder(
            ros_node, DialogueState, self.topic("dialogue_state"), STATE_CHANGES
        )
        self.chunks = TopicRecorder(ros_node, ResponseChunk, self.topic("response"), EVENTS)
        self.said = TopicRecorder(ros_node, Transcript, self.topic("user_said"), EVENTS)
        self.speech_states = TopicRecorder(
            ros_node, SpeechState, self.topic("speech_state"), STATE_CHANGES
        )
        self.status = TopicRecorder(ros_node, String, self.topic("dialogue/status"), LATCHED)
        self.voice = ros_node.create_publisher(VoiceActivity, self.topic("voice_activity"), EVENTS)
        self.transcript = ros_node.create_publisher(Transcript, self.topic("transcript"), EVENTS)
        self.client = SpinThreadActionClient(ros_node, Converse, self.topic("converse"))

    def topic(self, name: str) -> str:
        return f"{self.namespace}/{name}"

    def wait_active(self) -> None:
        assert self.client.wait_for_server(timeout_sec=START_TIMEOUT_S), self.dialogue.output()
        deadline = time.monotonic() + START_TIMEOUT_S
        # With autostart the node configures (loads and warms its model) before it spins, and
        # answers no service until then: a cold first start can take longer than one call's
        # timeout, so each query may take the time left.
        while (
            lifecycle_state(self.node, self.dialogue, max(1.0, deadline - time.monotonic()))
            != LifecycleStateMsg.PRIMARY_STATE_ACTIVE
        ):
            assert time.monotonic() < deadline, self.dialogue.output()
            time.sleep(0.2)
        for publisher in (self.voice, self.transcript):
            while publisher.get_subscription_count() < 1:
                assert time.monotonic() < deadline, "the dialogue node never subscribed"
                time.sleep(0.05)
        if self.speech is not None:  # the speech node hears the answers and is active
            while self.node.count_subscribers(self.topic("response")) < 2:
                assert time.monotonic() < deadline, "the speech node never subscribed"
                time.sleep(0.05)
            self.speech_states.wait_for(1, timeout=START_TIMEOUT_S)
            time.sleep(1.0)  # discovery settles both ways

    def send(
        self,
        prompt: str = "",
        *,
        listen: bool = False,
        preempt: bool = False,
        timeout_s: float = 0.0,
    ):
        """Send a goal; returns (goal handle, feedback list)."""
        feedback: list[Converse.Feedback] = []
        goal = Converse.Goal(
            mode=Converse.Goal.MODE_LISTEN if listen else Converse.Goal.MODE_PROMPT,
            prompt=prompt,
            preempt=preempt,
            timeout_s=float(timeout_s),
        )
        future = self.client.send_goal_async(
            goal, feedback_callback=lambda m: feedback.append(m.feedback)
        )
        return wait_future(future, START_TIMEOUT_S), feedback

    def state_sequence(self) -> list[int]:
        return [m.state for m in self.states.messages]

    def wait_state(self, state: int, timeout: float = ANSWER_TIMEOUT_S) -> DialogueState:
        self.states.wait_until(
            lambda ms: any(m.state == state for m in ms),
            timeout=timeout,
            what=f"dialogue state {state}",
        )
        return next(m for m in self.states.messages if m.state == state)

    def speak_user(self, utterance_id: int, speech_s: float) -> None:
        now_ns = self.node.get_clock().now().nanoseconds
        start_ns = now_ns - int(speech_s * 1e9)
        self.voice_event(VoiceActivity.START, utterance_id, start_ns, start_ns, speech_s)

    def voice_event(
        self,
        event: int,
        utterance_id: int,
        stamp_ns: int,
        start_ns: int = 0,
        speech_s: float | None = None,
    ) -> None:
        """Publish a voice-activity event as the fusion node does, stamped in stream time
        (``speech_s`` by default: from ``start_ns`` to ``stamp_ns``)."""
        if speech_s is None:
            speech_s = max(stamp_ns - start_ns, 0) / 1e9 if start_ns else 0.0
        self.voice.publish(
            VoiceActivity(
                header=conversions.header(stamp_ns, "microphone"),
                event=event,
                utterance_id=utterance_id,
                start=conversions.time_from_ns(start_ns),
                speech_s=speech_s,
                echo_score=float("nan"),
            )
        )

    def final_transcript(
        self,
        utterance_id: int,
        text: str,
        start_ns: int | None = None,
        end_ns: int | None = None,
        confidences: tuple[float, ...] = (),
        confidence: float = 0.9,
    ) -> None:
        """Publish the final transcript of an utterance (default: one that just ended, 1 s
        long); ``confidences``: the recogniser's for each word, given as words spread
        over the utterance (none: no words, as Moonshine); ``confidence``: the whole
        final's."""
        now_ns = self.node.get_clock().now().nanoseconds
        end_ns = now_ns if end_ns is None else end_ns
        start_ns = end_ns - 10**9 if start_ns is None else start_ns
        texts = text.split() if confidences else []
        step = (end_ns - start_ns) // max(len(texts), 1)
        words = [
            TranscriptWord(
                word=w,
                start=conversions.time_from_ns(start_ns + i * step),
                end=conversions.time_from_ns(start_ns + (i + 1) * step),
                confidence=c,
            )
            for i, (w, c) in enumerate(zip(texts, confidences, strict=True))
        ]
        self.transcript.publish(
            Transcript(
                header=conversions.header(now_ns, "microphone"),
                utterance_id=utterance_id,
                start=conversions.time_from_ns(start_ns),
                end=conversions.time_from_ns(end_ns),
                text=text,
                confidence=confidence,
                is_final=True,
                words=words,
            )
        )


def say_at_once(response, text: str, turn_id: int = 1) -> None:
    """Publish a whole answer as one final chunk of ``turn_id`` on ``response``."""
    response.publish(
        ResponseChunk(
            header=conversions.header(time.time_ns(), ""),
            turn_id=turn_id,
            index=0,
            text_delta=text,
            is_final=True,
        )
    )


def spoken_to_the_end(states: list[DialogueState]) -> int | None:
    """The first turn among ``states`` the robot spoke to the end (SPEAKING, then LISTENING
    in the same turn with nothing between), or None. A spoken question can end its turn
    early: a pause inside it ends the turn, the robot starts its answer, and the words after
    the pause talk over it (a barge-in) and open the next turn, whose answer is the one given."""
    speaking = None
    for m in states:
        if m.state == DialogueState.SPEAKING:
            speaking = m.turn_id
        elif m.state == DialogueState.LISTENING and m.turn_id == speaking:
            return speaking
        else:
            speaking = None
    return None


def wait_into_answer(played: TopicRecorder, blocks: int = 10) -> None:
    """Wait until ``blocks`` more blocks of ``played_audio`` are played: where a test kills
    the speech node mid-answer. Killed within ms of its speaking state, the node can die
    before the dialogue node has that state, which then ends the turn as unplayed."""
    start = len(played.messages)
    played.wait_until(lambda ms: len(ms) >= start + blocks, ANSWER_TIMEOUT_S, "blocks played")


def wait_future(future, timeout: float):
    deadline = time.monotonic() + timeout
    while not future.done():
        assert time.monotonic() < deadline, "no answer from the action server"
        time.sleep(0.02)
    return future.result()


def ask(client: SpinThreadActionClient, text: str):
    """Send a converse goal and wait for its result."""
    handle = wait_future(client.send_goal_async(Converse.Goal(prompt=text)), 30)
    assert handle.accepted
    return wait_future(handle.get_result_async(), 60)
