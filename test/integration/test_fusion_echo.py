"""Full duplex over real DDS (tier 2): the speech node speaks (null sink), a room in this
process turns what it plays into microphone audio, and the fusion node must not take the
robot's voice for the user's, while the user talking over the robot still starts speech."""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import soundfile
from std_msgs.msg import String

from omniflow.core.echo import EchoReference
from omniflow.msg import AudioChunk, ResponseChunk, SpeechState, Transcript, VoiceActivity
from omniflow.ros import conversions
from omniflow.ros.conversions import header, ns_from_time
from omniflow.ros.monitor import TopicRecorder, wait_for_publishers
from omniflow.ros.qos import EVENTS, LATCHED, SENSOR_DATA

HELLO = Path(__file__).parents[1] / "data" / "samples" / "hello.wav"  # speech 0.5-3.2 s
RATE = 16_000
CHUNK = 640
CHUNK_NS = 40_000_000
ROBOT_TEXT = ("The red box on the table is a parcel for the kitchen. I can carry it there "
              "after I finish charging, or you can take it yourself right now.")


class Room:
    """A microphone in a room: every 40 ms (paced, continuous stamps) a chunk of what the
    speaker played ``delay_ms`` earlier, attenuated, with one reflection, plus noise, plus
    the user's recording once :meth:`user_speaks` was called."""

    def __init__(self, node, namespace: str, delay_ms: float = 80.0, gain: float = 0.5):
        self.node = node
        self._pub = node.create_publisher(AudioChunk, f"{namespace}/audio", SENSOR_DATA)
        self._played = EchoReference(history_ms=3000)
        self._lock = threading.Lock()
        node.create_subscription(AudioChunk, f"{namespace}/played_audio", self._on_played,
                                 SENSOR_DATA)
        self._delay_ns = int(delay_ms * 1e6)
        self._gain = gain
        self._rng = np.random.default_rng(0)
        user, rate = soundfile.read(HELLO, dtype="int16")
        assert rate == RATE
        self._user = user.astype(np.float64) * 0.8
        self._user_start_ns: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.first_stamp_ns = 0

    def _on_played(self, msg: AudioChunk) -> None:
        assert msg.sample_rate == RATE
        with self._lock:
            self._played.add(ns_from_time(msg.header.stamp), conversions.audio_samples(msg)[:, 0])

    def user_speaks(self, at_ns: int) -> None:
        """The user's recording starts at stream time ``at_ns``."""
        self._user_start_ns = at_ns

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _chunk(self, stamp_ns: int) -> np.ndarray:
        with self._lock:
            direct = self._played.window(stamp_ns - self._delay_ns, CHUNK)
            reflection = self._played.window(stamp_ns - self._delay_ns - 15_000_000, CHUNK)
        x = self._gain * (direct + 0.4 * reflection)
        x += self._rng.standard_normal(CHUNK) * 30.0
        if self._user_start_ns is not None:
            offset = (stamp_ns - self._user_start_ns) * RATE // 1_000_000_000
            lo, hi = max(offset, 0), min(offset + CHUNK, len(self._user))
            if lo < hi:
                x[lo - offset:hi - offset] += self._user[lo:hi]
        return np.clip(np.round(x), -32768, 32767).astype(np.int16)

    def _run(self) -> None:
        clock = self.node.get_clock()
        stamp = clock.now().nanoseconds
        self.first_stamp_ns = stamp
        while not self._stop.is_set():
            # A real microphone sends a chunk once its last sample is in.
            wait_s = (stamp + CHUNK_NS - clock.now().nanoseconds) / 1e9
            if wait_s > 0 and self._stop.wait(wait_s):
                return
            self._pub.publish(conversions.audio_chunk(
                self._chunk(stamp), stamp_ns=stamp, frame_id="microphone", sample_rate=RATE,
                sequence=(stamp - self.first_stamp_ns) // CHUNK_NS))
            stamp += CHUNK_NS


def start_graph(ros_node, start_node):
    namespace = f"/t{uuid.uuid4().hex[:6]}"
    fusion = start_node("omniflow.nodes.fusion", "fusion", {"vision.enabled": False},
                        namespace=namespace)
    speech = start_node("omniflow.nodes.speech", "speech", {"sink": "null"},
                        namespace=namespace)
    status = TopicRecorder(ros_node, String, f"{namespace}/fusion/status", LATCHED)
    activity = TopicRecorder(ros_node, VoiceActivity, f"{namespace}/voice_activity", EVENTS)
    transcripts = TopicRecorder(ros_node, Transcript, f"{namespace}/transcript", EVENTS)
    states = TopicRecorder(ros_node, SpeechState, f"{namespace}/speech_state", LATCHED)
    response = ros_node.create_publisher(ResponseChunk, f"{namespace}/response", EVENTS)
    room = Room(ros_node, namespace)
    status.wait_until(lambda msgs: any(json.loads(m.data)["state"] == "active" for m in msgs),
                      timeout=60, what="fusion active")
    wait_for_publishers(ros_node, f"{namespace}/played_audio", 1, timeout=30)
    states.wait_for(1, timeout=30)
    deadline = time.monotonic() + 30
    while response.get_subscription_count() < 1 or \
            ros_node.count_subscribers(f"{namespace}/audio") < 1 or \
            ros_node.count_subscribers(f"{namespace}/played_audio") < 2:
        assert time.monotonic() < deadline, "the speech and fusion nodes never subscribed"
        time.sleep(0.05)
    time.sleep(1.0)  # discovery settles both ways
    room.start()
    time.sleep(1.0)  # the fusion node's VAD adapts to the room's noise
    return fusion, speech, status, activity, transcripts, states, response, room


def say(response, text: str, turn_id: int = 1) -> None:
    response.publish(ResponseChunk(header=header(time.time_ns(), ""), turn_id=turn_id, index=0,
                                   text_delta=text, is_final=True))


def wait_spoken(states, timeout: float = 40.0) -> None:
    states.wait_until(lambda s: any(m.speaking for m in s) and not s[-1].speaking, timeout,
                      "the robot spoke and finished")


def test_the_robot_talking_alone_starts_no_speech_and_no_transcript(ros_node, start_node):
    fusion, speech, status, activity, transcripts, states, response, room = \
        start_graph(ros_node, start_node)
    try:
        say(response, ROBOT_TEXT)
        wait_spoken(states)
        time.sleep(1.5)  # the last echo and the end of any utterance reach the node
    finally:
        room.stop()
    summary = json.loads(status.messages[-1].data)
    starts = [m for m in activity.messages if m.event == VoiceActivity.START]
    assert summary["played_blocks"] > 50, summary
    assert summary["echo_chunks"] > 20, summary
    # Without the echo stage the robot's voice would have started speech: counted.
    assert summary["echo_suppressed_starts"] >= 1, summary
    assert starts == [], (f"the robot's voice started speech: {starts}; status {summary}; "
                          f"fusion said:\n{fusion.output()[-2000:]}")
    assert transcripts.messages == []


def test_the_user_talking_over_the_robot_starts_speech(ros_node, start_node):
    fusion, speech, status, activity, transcripts, states, response, room = \
        start_graph(ros_node, start_node)
    try:
        say(response, ROBOT_TEXT)
        states.wait_until(lambda s: any(m.speaking for m in s), 20, "the robot speaking")
        time.sleep(1.0)
        user_at = ros_node.get_clock().now().nanoseconds
        room.user_speaks(user_at)      # hello.wav: voice from 0.5 s in
        try:
            starts = activity.wait_until(
                lambda msgs: any(user_start(m, user_at) for m in msgs), 20,
                "a START after the user began, while the robot speaks")
        except TimeoutError as err:
            raise AssertionError(f"{err}; status {status.messages[-1].data}; fusion said:\n"
                                 f"{fusion.output()[-2000:]}") from err
        start = next(m for m in starts if user_start(m, user_at))
        offset_s = (ns_from_time(start.header.stamp) - user_at) / 1e9
        assert 0.2 <= offset_s <= 1.5, offset_s
        assert start.speech_s > 0 and not np.isnan(start.echo_score)
        utterance = start.utterance_id
        activity.wait_until(lambda msgs: any(m.event == VoiceActivity.ONGOING and
                                             m.utterance_id == utterance for m in msgs),
                            10, "ONGOING while the user speaks")
        activity.wait_until(lambda msgs: any(m.event == VoiceActivity.END and
                                             m.utterance_id == utterance for m in msgs),
                            20, "END after the user stops")
    finally:
        room.stop()
    events = [m for m in activity.messages if m.utterance_id == utterance]
    assert [m.event for m in events][0] == VoiceActivity.START
    assert all(ns_from_time(m.start) == ns_from_time(start.start) for m in events)


def user_start(msg: VoiceActivity, user_at_ns: int) -> bool:
    """A START after the user's recording began (an echo leak before it is measured by the
    robot-alone test and by benchmarks/echo.py, not here)."""
    return msg.event == VoiceActivity.START and ns_from_time(msg.header.stamp) >= user_at_ns
