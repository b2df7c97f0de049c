"""omniflow.ros.monitor over DDS: a wait that times out says what it waited for, how many
messages came and the last of them, so a failed run shows where the graph stood."""

from __future__ import annotations

import uuid

import pytest

from omniflow.msg import DialogueState
from omniflow.ros.monitor import TopicRecorder
from omniflow.ros.qos import STATE_CHANGES


def test_a_wait_that_times_out_names_the_last_message(ros_node) -> None:
    topic = f"/monitor_{uuid.uuid4().hex[:8]}/dialogue_state"
    states = TopicRecorder(ros_node, DialogueState, topic, STATE_CHANGES)
    publisher = ros_node.create_publisher(DialogueState, topic, STATE_CHANGES)
    with pytest.raises(
        TimeoutError, match=r"listening did not happen within 0.1 s \(0 messages received\)$"
    ):
        states.wait_until(lambda ms: bool(ms), 0.1, "listening")
    publisher.publish(
        DialogueState(state=DialogueState.USER_SPEAKING, turn_id=3, reason="the user is speaking")
    )
    states.wait_for(1, 10.0)
    with pytest.raises(TimeoutError) as raised:
        states.wait_until(lambda ms: ms[-1].state == DialogueState.LISTENING, 0.1, "listening")
    message = str(raised.value)
    assert message.startswith(f"'{topic}': listening did not happen within 0.1 s (1 messages")
    assert "state=1, turn_id=3, reason='the user is speaking'" in message
    publisher.publish(DialogueState(reason="x" * 1000))  # a long one is cut
    states.wait_for(2, 10.0)
    with pytest.raises(TimeoutError, match=r"x\.\.\.\)$"):
        states.wait_until(lambda ms: False, 0.1, "nothing")
