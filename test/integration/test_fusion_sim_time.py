"""The fusion node under ``use_sim_time`` fed from a rosbag2 MCAP, with the bag looping (tier 2).

The bag is written at test time with the ``rosbags`` library: the committed samples
``hello.wav`` (in 40 ms ``omniflow/msg/AudioChunk``s, then 1 s of quiet noise so the VAD can
end the utterance) and ``scene.avi`` (``sensor_msgs/Image`` at 10 fps), all stamped in a
simulated time that starts at ``SIM_ORIGIN_NS`` (far from the wall clock, so a stamp taken
from the wrong clock cannot pass). The test reads the bag back and plays it twice at real
speed, as a looping ``ros2 bag play --clock`` would: ``/clock`` (rosgraph_msgs/Clock) leads
every message, and the second pass starts the clock again at the origin (a jump back).
``/clock`` and ``/diagnostics`` are remapped into the test's namespace so that parallel
tests never hear each other's clock.

Asserted: the transcript and the association record are stamped in sim time (start, end,
words, header, trigger and candidates); after the jump back the node is still running,
reports the reset in its diagnostics (the ring's ``resets``, the scheduler's
``clock_resets``) and transcribes the second pass, again in sim time.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import cv2
import numpy as np
import pytest
import soundfile
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.serialization import deserialize_message, serialize_message
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import Image

from omniflow.launcher import NodeProcess, NodeSpec
from omniflow.msg import Association, AudioChunk, Transcript
from omniflow.ros import conversions
from omniflow.ros.conversions import ns_from_time
from omniflow.ros.monitor import TopicRecorder
from omniflow.ros.qos import EVENTS, SENSOR_DATA

rosbags = pytest.importorskip("rosbags", reason="rosbags is in requirements/dev.txt")
from rosbags.rosbag2 import Reader, StoragePlugin, Writer  # noqa: E402
from rosbags.typesys import Stores, get_types_from_msg, get_typestore  # noqa: E402

REPO = Path(__file__).parents[2]
SAMPLES = REPO / "test" / "data" / "samples"
_MS = 1_000_000
_S = 1_000_000_000
SIM_ORIGIN_NS = 1_000 * _S
CHUNK = 640
FRAME_PERIOD_NS = 100 * _MS


def write_bag(path: Path) -> float:
    """Write the MCAP bag; return its length in seconds."""
    speech, rate = soundfile.read(str(SAMPLES / "hello.wav"), dtype="int16")
    assert rate == 16_000
    quiet = np.random.default_rng(0).normal(0, 30, rate).astype(np.int16)
    audio = np.concatenate([speech, quiet])
    audio = audio[: len(audio) // CHUNK * CHUNK]
    typestore = get_typestore(Stores.ROS2_JAZZY)
    typestore.register(
        get_types_from_msg(
            (REPO / "msg" / "AudioChunk.msg").read_text(encoding="utf-8"), "omniflow/msg/AudioChunk"
        )
    )
    capture = cv2.VideoCapture(str(SAMPLES / "scene.avi"))
    with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        audio_conn = writer.add_connection("/audio", "omniflow/msg/AudioChunk", typestore=typestore)
        image_conn = writer.add_connection(
            "/image_raw", "sensor_msgs/msg/Image", typestore=typestore
        )
        for seq, i in enumerate(range(0, len(audio), CHUNK)):
            stamp = SIM_ORIGIN_NS + i * _S // rate
            msg = conversions.audio_chunk(
                audio[i : i + CHUNK],
                stamp_ns=stamp,
                frame_id="microphone",
                sample_rate=rate,
                sequence=seq,
            )
            writer.write(audio_conn, stamp, serialize_message(msg))
        length_ns = len(audio) * _S // rate
        for stamp in range(SIM_ORIGIN_NS, SIM_ORIGIN_NS + length_ns, FRAME_PERIOD_NS):
            ok, bgr = capture.read()
            if not ok:
                capture.set(cv2.CAP_PROP_POS_FRAMES, 0)
                ok, bgr = capture.read()
            assert ok, "scene.avi gave no frame"
            msg = conversions.image(bgr, "bgr8", stamp_ns=stamp, frame_id="camera")
            writer.write(image_conn, stamp, serialize_message(msg))
    capture.release()
    return length_ns / _S


def read_bag(path: Path) -> list[tuple[int, str, object]]:
    """(bag time, topic, rclpy message) in time order."""
    types = {"/audio": AudioChunk, "/image_raw": Image}
    with Reader(path) as reader:
        assert {c.topic for c in reader.connections} == set(types)
        return [
            (stamp, conn.topic, deserialize_message(bytes(raw), types[conn.topic]))
            for conn, stamp, raw in reader.messages()
        ]


def publishers(node, namespace: str) -> dict:
    """The bag's publishers, by topic, and ``/clock``'s, made once for every pass."""
    pubs = {
        topic: node.create_publisher(msg_type, f"{namespace}{topic}", SENSOR_DATA)
        for topic, msg_type in (("/audio", AudioChunk), ("/image_raw", Image))
    }
    pubs["/clock"] = node.create_publisher(Clock, f"{namespace}/clock", 10)
    return pubs


def play(pubs: dict, messages: list[tuple[int, str, object]], loops: int) -> None:
    """Publish the bag ``loops`` times at real speed, /clock leading every message."""
    for _ in range(loops):
        t0 = time.monotonic()
        for stamp, topic, msg in messages:
            pause = (stamp - SIM_ORIGIN_NS) / _S - (time.monotonic() - t0)
            if pause > 0:
                time.sleep(pause)
            pubs["/clock"].publish(Clock(clock=conversions.time_from_ns(stamp + 40 * _MS)))
            pubs[topic].publish(msg)


def tick(clock, from_ns: int, seconds: float) -> None:
    """Move the sim clock on from ``from_ns`` at real speed (timers on sim time fire)."""
    for i in range(int(seconds * 20)):
        clock.publish(Clock(clock=conversions.time_from_ns(from_ns + i * 50 * _MS)))
        time.sleep(0.05)


def wait_ticking(
    recorder: TopicRecorder, predicate, clock, from_ns: int, what: str, timeout: float = 30.0
) -> tuple[list, int]:
    """Wait for ``predicate(messages)`` while the sim clock keeps moving after the bag's
    end (as a player with a trailing clock does: the node's slices run on sim time).
    Returns the messages and the sim time reached."""
    deadline = time.monotonic() + timeout
    sim_ns = from_ns
    while not predicate(recorder.messages):
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{what} did not happen within {timeout} s ({len(recorder.messages)} messages)"
            )
        tick(clock, sim_ns, 0.5)
        sim_ns += 500 * _MS
    return recorder.messages, sim_ns


def in_sim_time(stamp_ns: int, loop_s: float) -> bool:
    """A stream-time stamp: inside the bag's span of sim time."""
    return SIM_ORIGIN_NS <= stamp_ns <= SIM_ORIGIN_NS + int((loop_s + 2) * _S)


def stamped_by(stamp_ns: int, sim_ns: int) -> bool:
    """A stamp taken when a message was published: on the sim clock, not after the sim time
    the test had reached (the clock keeps ticking while a loaded machine decodes)."""
    return SIM_ORIGIN_NS <= stamp_ns <= sim_ns + 500 * _MS


def diagnostics_values(msg: DiagnosticArray, node_name: str) -> dict[str, str]:
    for status in msg.status:
        if status.name.endswith(node_name):
            return {kv.key: kv.value for kv in status.values}
    return {}


def test_fusion_runs_in_sim_time_from_a_bag_and_survives_the_loop(ros_node, tmp_path):
    bag = tmp_path / "hello_scene"
    loop_s = write_bag(bag)
    messages = read_bag(bag)
    assert len(messages) > 100

    namespace = f"/t{uuid.uuid4().hex[:6]}"
    spec = NodeSpec(
        module="omniflow.nodes.fusion",
        name="fusion",
        namespace=namespace,
        parameters={"use_sim_time": True, "vision.rate_hz": 10.0},
        remappings={"/clock": f"{namespace}/clock", "/diagnostics": f"{namespace}/diagnostics"},
    )
    transcripts = TopicRecorder(ros_node, Transcript, f"{namespace}/transcript", EVENTS)
    associations = TopicRecorder(ros_node, Association, f"{namespace}/associations", EVENTS)
    diagnostics = TopicRecorder(ros_node, DiagnosticArray, f"{namespace}/diagnostics", 10)
    pubs = publishers(ros_node, namespace)
    clock = pubs["/clock"]
    with NodeProcess(spec) as fusion:
        try:
            # The node's subscriptions exist once it is constructed; models load after. Each
            # of our publishers waits to be matched (its first messages would be lost).
            deadline = time.monotonic() + 90
            while (
                any(pub.get_subscription_count() < 1 for pub in pubs.values())
                or "configured:" not in fusion.output()
            ):
                assert fusion.running, fusion.output()[-3000:]
                unmatched = [t for t, pub in pubs.items() if pub.get_subscription_count() < 1]
                assert time.monotonic() < deadline, (
                    f"fusion did not start within 90 s (unmatched: {unmatched})"
                )
                clock.publish(Clock(clock=conversions.time_from_ns(SIM_ORIGIN_NS)))
                time.sleep(0.1)

            play(pubs, messages, loops=1)
            end_ns = messages[-1][0] + 40 * _MS
            first, first_sim_ns = wait_ticking(
                transcripts,
                lambda ms: any(m.is_final for m in ms),
                clock,
                end_ns,
                "a final transcript of the first pass",
            )
            final = next(m for m in first if m.is_final)
            assert final.text.strip()
            assert final.words and all(0.0 < w.confidence <= 1.0 for w in final.words)  # Whisper's
            assert stamped_by(ns_from_time(final.header.stamp), first_sim_ns)
            for stamp in (
                final.start,
                final.end,
                *(w.start for w in final.words),
                *(w.end for w in final.words),
            ):
                assert in_sim_time(ns_from_time(stamp), loop_s), stamp

            # Each utterance is decided twice, at its onset and by its words, from the frames of
            # a narrow window (80 ms before its onset, 120 ms after). On a loaded machine the
            # frames of one moment can be lost in the node's queue (it keeps the newest two):
            # the stamps are checked on a decision of the first pass that paired frames.
            def paired(m: Association) -> bool:
                return bool(m.candidates) and in_sim_time(ns_from_time(m.trigger.stamp), loop_s)

            records = associations.wait_until(
                lambda ms: any(paired(m) for m in ms),
                timeout=15,
                what="frames paired with the first pass's speech",
            )
            record = next(m for m in records if paired(m))
            assert stamped_by(ns_from_time(record.header.stamp), first_sim_ns + 15 * _S)
            for candidate in record.candidates:
                assert in_sim_time(ns_from_time(candidate.stamp), loop_s)

            play(pubs, messages, loops=1)  # the bag again: the clock jumps back

            def second_pass(msg: Transcript) -> bool:  # the first words again, from the origin
                return (
                    msg.is_final
                    and msg.utterance_id > final.utterance_id
                    and msg.text.strip()
                    and ns_from_time(msg.start) - SIM_ORIGIN_NS < _S  # the next starts at 1.7 s
                )

            later, sim_ns = wait_ticking(
                transcripts,
                lambda ms: any(second_pass(m) for m in ms),
                clock,
                end_ns,
                "a final transcript after the loop",
            )
            second = next(m for m in later if second_pass(m))
            assert in_sim_time(ns_from_time(second.start), loop_s)
            assert stamped_by(ns_from_time(second.header.stamp), sim_ns)
            # Diagnostics tick at 1 Hz of sim time: keep the clock moving until one reports.
            values: dict[str, str] = {}
            reports: list[dict[str, str]] = []
            for _ in range(10):
                reports = [diagnostics_values(m, "/fusion") for m in diagnostics.messages]
                values = next(
                    (v for v in reversed(reports) if int(v.get("ring.resets", 0)) >= 1), {}
                )
                if values:
                    break
                tick(clock, sim_ns, 2.0)
                sim_ns += 2 * _S
            assert values, f"no reset reported; last diagnostics: {reports[-1:]}"
            assert int(values["scheduler.clock_resets"]) >= 1
            assert "clock jumped back" in values["ring.last_reset_reason"]
            assert int(values["engine_errors"]) == 0
            assert fusion.running
        except (AssertionError, TimeoutError) as err:
            heard = [
                (
                    m.utterance_id,
                    ns_from_time(m.start) - SIM_ORIGIN_NS,
                    ns_from_time(m.end) - SIM_ORIGIN_NS,
                    m.is_final,
                    m.text,
                )
                for m in transcripts.messages
            ]
            decided = [
                (m.utterance_id, ns_from_time(m.trigger.stamp) - SIM_ORIGIN_NS, len(m.candidates))
                for m in associations.messages
            ]
            reports = [diagnostics_values(m, "/fusion") for m in diagnostics.messages]
            raise AssertionError(
                f"{err}\ntranscripts (id, start, end from the origin, final, "
                f"text): {heard}\nassociations (id, trigger from the origin, candidates): "
                f"{decided}\nlast diagnostics: {reports[-1:]}\n"
                f"fusion said:\n{fusion.output()[-4000:]}"
            ) from err
