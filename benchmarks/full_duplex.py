#!/usr/bin/env python3
"""Barge-in through the whole graph: the user's speech onset -> generation cancelled and the
speaker silent, and how often the robot's own voice interrupts it.

Method (prints one JSON object):

- The fusion (vision off), dialogue (embedded Gemma) and speech (null sink: paced in real
  time) nodes, each in its own process on this host, over DDS. This process is the room
  (``test/integration/room.py``): a microphone that publishes a 40 ms chunk once its last
  sample is in, carrying what the speaker played 80 ms earlier (half amplitude, one
  reflection) plus noise, and the user's recording (``hello.wav``) when told.
- Each pass: a ``converse`` goal asks for a long story (``preempt``, so that the previous
  pass's turn is cancelled); once the robot has been speaking for ``--talk-s``, the user's
  recording starts. Its voice onset (the first 10 ms within 35 dB of its loudest frame) in
  stream time is the zero of every figure:
  ``start_stamp``: the START's own stamp (where the VAD places the start of speech: how much
  of the onset it did not take for voice);
  ``voice_activity``: the fusion node's START arrives here (``start_speech_ms``: the speech
  it had heard then, its ``speech_s``; the dialogue interrupts on the START itself when that
  is at least its ``barge_in.min_speech_ms``, else on the next ONGOING, a slice later);
  ``interrupted``: the dialogue node's INTERRUPTED state arrives here;
  ``last_chunk``: the last response chunk of the interrupted turn arrives (generation
  cancelled; earlier than ``interrupted`` when the model was between pieces);
  ``speech_idle``: the speech node's idle state arrives here;
  ``playback_end``: the end of the last block the speaker played for that turn (its stamp
  is when its first sample went out, plus its length).
  Target: ``playback_end`` and ``last_chunk`` <= 120 ms, including the microphone's 40 ms
  block and the VAD's confirmation (``vad.min_speech_ms``, 90 ms of speech by default).
- ``echo``: over the passes, every START while the robot spoke alone (before the user's
  recording) is a false barge-in; the count is reported with the robot's speaking time.

Figures: median and p90 over ``--passes``. A benchmark prints figures; it does not fail on
a slow machine::

    .venv/bin/python benchmarks/full_duplex.py --passes 8 --json build/bench/full_duplex.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "test" / "integration"))  # the room

from _common import SPREAD, summary, write_result  # noqa: E402

STORY = "Tell me a long story about a robot who learns to cook, with many details."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passes", type=int, default=8)
    parser.add_argument(
        "--talk-s",
        type=float,
        default=0.5,
        help="how long the robot speaks before the user starts (the embedded model's story "
        "is one sentence: about 2.5 s at the speech node's normal rate)",
    )
    parser.add_argument(
        "--wpm",
        type=int,
        default=0,
        help="the speech node's words_per_minute (0: its default); a slower voice talks "
        "longer, e.g. --wpm 80 --talk-s 1.5",
    )
    parser.add_argument(
        "--fusion",
        nargs="*",
        default=[],
        metavar="NAME=VALUE",
        help="fusion node parameters for a variant, e.g. echo.wait_ms=0",
    )
    parser.add_argument("--json", type=Path, help="also write the JSON here")
    args = parser.parse_args(argv)
    fusion_params: dict[str, object] = {"vision.enabled": False}
    speech_params: dict[str, object] = {"sink": "null"}
    if args.wpm:
        speech_params["words_per_minute"] = args.wpm
    for item in args.fusion:
        name, _, value = item.partition("=")
        fusion_params[name] = yaml.safe_load(value)
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")

    import rclpy
    from rclpy.action import ActionClient
    from room import Room
    from std_msgs.msg import String

    from omniflow.action import Converse
    from omniflow.launcher import NodeProcess, NodeSpec
    from omniflow.msg import AudioChunk, DialogueState, ResponseChunk, SpeechState, VoiceActivity
    from omniflow.ros.conversions import ns_from_time
    from omniflow.ros.monitor import TopicRecorder, spinning, wait_for_publishers
    from omniflow.ros.qos import EVENTS, LATCHED, SENSOR_DATA, STATE_CHANGES

    ns = f"/duplex{uuid.uuid4().hex[:6]}"
    processes = [
        NodeProcess(NodeSpec("omniflow.nodes.fusion", "fusion", fusion_params, namespace=ns)),
        NodeProcess(
            NodeSpec(
                "omniflow.nodes.dialogue",
                "dialogue",
                {"proactive.enabled": False, "llm.max_tokens": 256},
                namespace=ns,
            )
        ),
        NodeProcess(NodeSpec("omniflow.nodes.speech", "speech", speech_params, namespace=ns)),
    ]
    rclpy.init()
    node = rclpy.create_node("full_duplex_bench")
    keep = 200_000
    activity = TopicRecorder(node, VoiceActivity, f"{ns}/voice_activity", EVENTS, keep=keep)
    states = TopicRecorder(node, DialogueState, f"{ns}/dialogue_state", STATE_CHANGES, keep=keep)
    chunks = TopicRecorder(node, ResponseChunk, f"{ns}/response", EVENTS, keep=keep)
    speech = TopicRecorder(node, SpeechState, f"{ns}/speech_state", STATE_CHANGES, keep=keep)
    played = TopicRecorder(node, AudioChunk, f"{ns}/played_audio", SENSOR_DATA, keep=keep)
    fusion_status = TopicRecorder(node, String, f"{ns}/fusion/status", LATCHED)
    client = ActionClient(node, Converse, f"{ns}/converse")
    room = Room(node, ns)
    figures: dict[str, list[float]] = {
        k: []
        for k in (
            "start_stamp",
            "voice_activity",
            "interrupted",
            "last_chunk",
            "speech_idle",
            "playback_end",
        )
    }
    per_pass: list[dict[str, float]] = []  # START's speech_s and START -> INTERRUPTED
    false_starts = 0
    robot_alone_s = 0.0
    try:
        with spinning(node):
            if not client.wait_for_server(timeout_sec=120):
                raise SystemExit("the dialogue node did not start")
            fusion_status.wait_until(
                lambda ms: any(json.loads(m.data)["state"] == "active" for m in ms),
                120,
                "fusion active",
            )
            wait_for_publishers(node, f"{ns}/played_audio", 1, timeout=60)
            time.sleep(2.0)
            room.start()
            time.sleep(1.0)
            for _ in range(args.passes):
                future = client.send_goal_async(Converse.Goal(prompt=STORY, preempt=True))
                while not future.done():
                    time.sleep(0.01)
                handle = future.result()
                if not handle.accepted:
                    time.sleep(1.0)
                    continue
                seen = len(speech.received)
                speech.wait_until(
                    lambda ms, s=seen: any(m.speaking for m in ms[s:]), 120, "the robot speaking"
                )
                spoke_at = time.monotonic()
                turn = next(m.turn_id for m in speech.messages[seen:] if m.speaking)
                before = len(activity.received)
                time.sleep(args.talk_s)
                user_at = node.get_clock().now().nanoseconds
                false_starts += sum(
                    1 for r in activity.received[before:] if r.msg.event == VoiceActivity.START
                )
                robot_alone_s += time.monotonic() - spoke_at
                onset_ns = user_at + room.user_onset_ns
                n_states, n_speech = len(states.received), len(speech.received)
                room.user_speaks(user_at)
                try:
                    states.wait_until(
                        lambda ms, s=n_states: any(
                            m.state == DialogueState.INTERRUPTED for m in ms[s:]
                        ),
                        10,
                        "barge-in",
                    )
                    speech.wait_until(
                        lambda ms, s=n_speech: any(not m.speaking for m in ms[s:]),
                        10,
                        "speech idle",
                    )
                except TimeoutError as err:
                    print(f"pass without barge-in: {err}", file=sys.stderr)
                    time.sleep(4.0)
                    continue
                time.sleep(1.0)
                start = next(
                    (
                        r
                        for r in activity.received[before:]
                        if r.msg.event == VoiceActivity.START and r.wall_ns >= user_at
                    ),
                    None,
                )
                interrupted = next(
                    r
                    for r in states.received[n_states:]
                    if r.msg.state == DialogueState.INTERRUPTED
                )
                idle = next(r for r in speech.received[n_speech:] if not r.msg.speaking)
                last_chunk = max(
                    (r.wall_ns for r in chunks.received if r.msg.turn_id == turn), default=None
                )
                ends = [
                    ns_from_time(r.msg.header.stamp) + len(r.msg.data) // 2 * 62_500
                    for r in played.received
                    if ns_from_time(r.msg.header.stamp) < idle.wall_ns
                    and r.wall_ns >= user_at - 10**9
                ]
                if start is not None:
                    figures["voice_activity"].append((start.wall_ns - onset_ns) / 1e6)
                    figures["start_stamp"].append(
                        (ns_from_time(start.msg.header.stamp) - onset_ns) / 1e6
                    )
                    per_pass.append(
                        {
                            "start_speech_ms": round(start.msg.speech_s * 1000, 1),
                            "start_to_interrupted_ms": round(
                                (interrupted.wall_ns - start.wall_ns) / 1e6, 1
                            ),
                        }
                    )
                figures["interrupted"].append((interrupted.wall_ns - onset_ns) / 1e6)
                figures["speech_idle"].append((idle.wall_ns - onset_ns) / 1e6)
                if last_chunk is not None:
                    figures["last_chunk"].append((last_chunk - onset_ns) / 1e6)
                if ends:
                    figures["playback_end"].append((max(ends) - onset_ns) / 1e6)
                time.sleep(3.0)  # the user's recording ends; the next goal preempts its turn
    finally:
        room.stop()
        node.destroy_node()
        rclpy.try_shutdown()
        for process in processes:
            process.close()
    result: dict[str, object] = {
        "passes": args.passes,
        "fusion": fusion_params,
        "speech": speech_params,
        "talk_s": args.talk_s,
        "from_voice_onset_ms": {k: summary(v, 1, figures=SPREAD) for k, v in figures.items()},
        "start_speech_ms": summary((p["start_speech_ms"] for p in per_pass), 1, figures=SPREAD),
        "per_pass": per_pass,
        "echo": {
            "false_barge_ins": false_starts,
            "robot_speaking_alone_s": round(robot_alone_s, 1),
        },
        "target_ms": 120,
    }
    write_result(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
