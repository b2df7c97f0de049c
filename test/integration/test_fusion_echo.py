"""Full duplex over real DDS (tier 2): the speech node speaks (null sink), a room in this
process turns what it plays into microphone audio, and the fusion node must not take the
robot's voice for the user's, while the user talking over the robot still starts speech."""

from __future__ import annotations

import json
import time
import uuid

import numpy as np
from dialogue_graph import say_at_once
from room import Room
from std_msgs.msg import String

from omniflow.msg import ResponseChunk, SpeechState, Transcript, VoiceActivity
from omniflow.ros.conversions import ns_from_time
from omniflow.ros.monitor import TopicRecorder, wait_for_publishers
from omniflow.ros.qos import EVENTS, LATCHED, RESPONSE, STATE_CHANGES

ROBOT_TEXT = (
    "The red box on the table is a parcel for the kitchen. I can carry it there "
    "after I finish charging, or you can take it yourself right now."
)


def start_graph(ros_node, start_node):
    namespace = f"/t{uuid.uuid4().hex[:6]}"
    fusion = start_node(
        "omniflow.nodes.fusion", "fusion", {"vision.enabled": False}, namespace=namespace
    )
    speech = start_node("omniflow.nodes.speech", "speech", {"sink": "null"}, namespace=namespace)
    status = TopicRecorder(ros_node, String, f"{namespace}/fusion/status", LATCHED)
    activity = TopicRecorder(ros_node, VoiceActivity, f"{namespace}/voice_activity", EVENTS)
    transcripts = TopicRecorder(ros_node, Transcript, f"{namespace}/transcript", EVENTS)
    states = TopicRecorder(ros_node, SpeechState, f"{namespace}/speech_state", STATE_CHANGES)
    response = ros_node.create_publisher(ResponseChunk, f"{namespace}/response", RESPONSE)
    room = Room(ros_node, namespace)
    status.wait_until(
        lambda msgs: any(json.loads(m.data)["state"] == "active" for m in msgs),
        timeout=60,
        what="fusion active",
    )
    wait_for_publishers(ros_node, f"{namespace}/played_audio", 1, timeout=30)
    states.wait_for(1, timeout=30)
    deadline = time.monotonic() + 30
    while (
        response.get_subscription_count() < 1
        or ros_node.count_subscribers(f"{namespace}/audio") < 1
        or ros_node.count_subscribers(f"{namespace}/played_audio") < 2
    ):
        assert time.monotonic() < deadline, "the speech and fusion nodes never subscribed"
        time.sleep(0.05)
    time.sleep(1.0)  # discovery settles both ways
    room.start()
    time.sleep(1.0)  # the fusion node's VAD adapts to the room's noise
    return fusion, speech, status, activity, transcripts, states, response, room


def wait_spoken(states, timeout: float = 40.0) -> None:
    states.wait_until(
        lambda s: any(m.speaking for m in s) and not s[-1].speaking,
        timeout,
        "the robot spoke and finished",
    )


def test_the_robot_talking_alone_starts_no_speech_and_no_transcript(ros_node, start_node):
    fusion, speech, status, activity, transcripts, states, response, room = start_graph(
        ros_node, start_node
    )
    try:
        say_at_once(response, ROBOT_TEXT)
        wait_spoken(states)
        time.sleep(1.5)  # the last echo and the end of any utterance reach the node
        # Without the echo stage the robot's voice would have started speech: counted (in
        # a status published after the node heard the echo: a loaded node is late).
        try:
            status.wait_until(
                lambda ms: bool(ms) and json.loads(ms[-1].data)["echo_suppressed_starts"] >= 1,
                timeout=15,
                what="a start the echo stage suppressed",
            )
        except TimeoutError as err:
            raise AssertionError(
                f"{err}; statuses {[m.data for m in status.messages[-1:]]}"
            ) from err
    finally:
        room.stop()
    summary = json.loads(status.messages[-1].data)
    starts = [m for m in activity.messages if m.event == VoiceActivity.START]
    assert summary["played_blocks"] > 50, summary
    assert summary["played_lost"] == 0, summary  # the reference has no holes
    assert summary["echo_chunks"] > 20, summary
    assert starts == [], (
        f"the robot's voice started speech: {starts}; status {summary}; "
        f"fusion said:\n{fusion.output()[-2000:]}"
    )
    assert transcripts.messages == []


def test_the_user_talking_over_the_robot_starts_speech(ros_node, start_node):
    fusion, speech, status, activity, transcripts, states, response, room = start_graph(
        ros_node, start_node
    )
    try:
        say_at_once(response, ROBOT_TEXT)
        states.wait_until(lambda s: any(m.speaking for m in s), 20, "the robot speaking")
        time.sleep(1.0)
        user_at = ros_node.get_clock().now().nanoseconds
        room.user_speaks(user_at)  # hello.wav: voice from 0.5 s in
        try:
            starts = activity.wait_until(
                lambda msgs: any(user_start(m, user_at) for m in msgs),
                20,
                "a START after the user began, while the robot speaks",
            )
        except TimeoutError as err:
            raise AssertionError(
                f"{err}; status {status.messages[-1].data}; fusion said:\n{fusion.output()[-2000:]}"
            ) from err
        start = next(m for m in starts if user_start(m, user_at))
        offset_s = (ns_from_time(start.header.stamp) - user_at) / 1e9
        assert 0.2 <= offset_s <= 1.5, offset_s
        assert start.speech_s > 0 and not np.isnan(start.echo_score)
        utterance = start.utterance_id
        activity.wait_until(
            lambda msgs: any(
                m.event == VoiceActivity.ONGOING and m.utterance_id == utterance for m in msgs
            ),
            10,
            "ONGOING while the user speaks",
        )
        activity.wait_until(
            lambda msgs: any(
                m.event == VoiceActivity.END and m.utterance_id == utterance for m in msgs
            ),
            20,
            "END after the user stops",
        )
    finally:
        room.stop()
    events = [m for m in activity.messages if m.utterance_id == utterance]
    assert [m.event for m in events][0] == VoiceActivity.START
    assert all(ns_from_time(m.start) == ns_from_time(start.start) for m in events)


def user_start(msg: VoiceActivity, user_at_ns: int) -> bool:
    """A START after the user's recording began (an echo leak before it is measured by the
    robot-alone test and by benchmarks/echo.py, not here)."""
    return msg.event == VoiceActivity.START and ns_from_time(msg.header.stamp) >= user_at_ns
