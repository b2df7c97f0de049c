"""The robot's side of the two-host test (test_two_hosts.py), run inside the robot's network
namespace: the split-robot profile's fusion and speech nodes as child processes, and a room
(room.py) standing in for the microphone; the dialogue node runs in the other namespace.

    python two_hosts.py NAMESPACE LINK   (LINK: this side's veth, cut for 5 s mid-run)

It asks by voice, barges in, cuts the link and speaks during the outage, then checks the answers
come back; it prints one JSON line with what it measured (the test asserts on it).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import rclpy
from dialogue_graph import ANSWER_TIMEOUT_S, LONG_PROMPT, SLOW_SPEECH, wait_future
from room import Room

from omniflow.action import Converse
from omniflow.graph import PROFILES
from omniflow.launcher import NodeProcess, NodeSpec
from omniflow.msg import DialogueState, SpeechState, Transcript
from omniflow.ros.monitor import TopicRecorder, spinning
from omniflow.ros.qos import EVENTS, STATE_CHANGES
from ros_helpers import SpinThreadActionClient

OUTAGE_S = 5.0
ROBOT_NODES = {"fusion": {"vision.enabled": False}, "speech": SLOW_SPEECH}


class Arrivals:
    """Receive times (monotonic) of a topic's messages, with the messages."""

    def __init__(self, node, msg_type, topic: str, qos) -> None:
        self.items: list[tuple[float, object]] = []
        self._cond = threading.Condition()
        node.create_subscription(msg_type, topic, self._on, qos)

    def _on(self, msg) -> None:
        with self._cond:
            self.items.append((time.monotonic(), msg))
            self._cond.notify_all()

    def wait(self, predicate, after: float, timeout: float, what: str) -> tuple[float, object]:
        def found():
            return next(((t, m) for t, m in self.items if t >= after and predicate(m)), None)

        with self._cond:
            if not self._cond.wait_for(found, timeout):
                raise TimeoutError(f"no {what} within {timeout:g} s")
            return found()


def link(name: str, state: str) -> None:
    subprocess.run(["ip", "link", "set", name, state], check=True)


def main(namespace: str, veth: str) -> dict[str, object]:
    assert set(ROBOT_NODES) <= set(PROFILES["split-robot"].nodes)
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("two_hosts_robot", context=context)
    ns = namespace
    processes = [
        NodeProcess(NodeSpec(f"omniflow.nodes.{name}", name, params, namespace=ns))
        for name, params in ROBOT_NODES.items()
    ]
    result: dict[str, object] = {}
    try:
        with spinning(node):
            states = TopicRecorder(node, DialogueState, f"{ns}/dialogue_state", STATE_CHANGES)
            speech = TopicRecorder(node, SpeechState, f"{ns}/speech_state", STATE_CHANGES)
            transcripts = Arrivals(node, Transcript, f"{ns}/transcript", EVENTS)
            said = Arrivals(node, Transcript, f"{ns}/user_said", EVENTS)
            client = SpinThreadActionClient(node, Converse, f"{ns}/converse")
            room = Room(node, ns)
            began = time.monotonic()
            assert client.wait_for_server(timeout_sec=120), "the dialogue host never appeared"
            states.wait_until(
                lambda ms: any(m.state == DialogueState.LISTENING for m in ms), 120, "listening"
            )
            speech.wait_for(1, timeout=60)
            deadline = time.monotonic() + 60
            while node.count_subscribers(f"{ns}/audio") < 1:
                assert time.monotonic() < deadline, "fusion never subscribed"
                time.sleep(0.05)
            time.sleep(1.0)
            result["discovered_s"] = round(time.monotonic() - began, 1)
            room.start()
            time.sleep(1.0)

            # 1. A question spoken on this side is answered from the other.
            asked = time.monotonic()
            room.user_speaks(node.get_clock().now().nanoseconds)
            # The turn may join two utterances ("Hello robot." and the question after the
            # pause): it carries the last one's id.
            said_t, turn = said.wait(lambda m: True, asked, ANSWER_TIMEOUT_S, "turn")
            heard_t, final = transcripts.wait(
                lambda m: m.is_final and m.utterance_id == turn.utterance_id,
                asked,
                5.0,
                "the final transcript of the turn's last utterance",
            )
            # transcript (here) -> dialogue (there) -> user_said (here): two link crossings.
            result["round_trip_ms"] = round((said_t - heard_t) * 1e3, 1)
            states.wait_until(
                lambda ms: any(m.state == DialogueState.SPEAKING for m in ms),
                ANSWER_TIMEOUT_S,
                "the answer spoken",
            )
            result["question"] = final.text
            states.wait_until(
                lambda ms: ms[-1].state == DialogueState.LISTENING, ANSWER_TIMEOUT_S, "listening"
            )

            # 2. A barge-in crosses the link: the user talks over a long answer.
            goal = Converse.Goal(mode=Converse.Goal.MODE_PROMPT, prompt=LONG_PROMPT)
            handle = wait_future(client.send_goal_async(goal), 30)
            assert handle.accepted
            speech.wait_until(lambda ms: ms[-1].speaking, ANSWER_TIMEOUT_S, "robot speaking")
            time.sleep(0.5)
            room.user_speaks(node.get_clock().now().nanoseconds)
            states.wait_until(
                lambda ms: any(m.state == DialogueState.INTERRUPTED for m in ms), 60, "barge-in"
            )
            speech.wait_until(lambda ms: not ms[-1].speaking, 20, "playback stopped")
            result["barge_in"] = True
            states.wait_until(
                lambda ms: ms[-1].state == DialogueState.LISTENING, ANSWER_TIMEOUT_S, "listening"
            )
            time.sleep(1.0)

            # 3. The link is cut for 5 s; the robot keeps listening, and answers come back.
            link(veth, "down")
            down = time.monotonic()
            room.user_speaks(node.get_clock().now().nanoseconds)
            transcripts.wait(
                lambda m: m.is_final and m.text.strip(), down, OUTAGE_S + 10, "outage transcript"
            )
            result["heard_during_outage"] = True
            time.sleep(max(0.0, down + OUTAGE_S - time.monotonic()))
            link(veth, "up")
            up = time.monotonic()
            result["outage_s"] = round(up - down, 1)
            said_t, _ = said.wait(lambda m: True, down, ANSWER_TIMEOUT_S, "a turn after the cut")
            # The first turn after the cut: the outage utterance, retransmitted once the
            # link is back (the transcript topic is reliable).
            result["recovered_s"] = round(said_t - up, 1)
            result["recovered"] = True
            # The robot side says it lost the dialogue node during the cut, and when it is back.
            speech_process = next(p for p in processes if p.spec.name == "speech")
            deadline = time.monotonic() + 10
            while "dialogue node is back" not in speech_process.output():
                if time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            log = speech_process.output()
            result["said_lost"] = "lost the dialogue node" in log
            result["said_back"] = "the dialogue node is back" in log
            room.stop()
    except (TimeoutError, AssertionError) as err:
        result["error"] = str(err)
        result["outputs"] = {p.spec.name: p.output()[-2000:] for p in processes}
    finally:
        for process in processes:
            process.close()
        node.destroy_node()
        rclpy.shutdown(context=context)
    return result


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])), flush=True)
