"""Tier 2: `omniflow replay` publishes a bag with its timing and /clock, `omniflow record`
records it over real DDS, and Ctrl-C leaves a complete, readable bag."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid

from rosgraph_msgs.msg import Clock

from omniflow.bag import BagReader, decode
from omniflow.report import stamp_ns
from omniflow.resources import sample
from omniflow.ros.monitor import TopicRecorder

TIMEOUT_S = 120


def omniflow(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "omniflow.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_for_line(process: subprocess.Popen, text: str, timeout: float = TIMEOUT_S) -> str:
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line and process.poll() is not None:
            break
        seen.append(line)
        if text in line:
            return line
    raise AssertionError(f"no {text!r} in the output:\n{''.join(seen)}")


def test_ctrl_c_while_messages_flow_leaves_a_complete_bag(tmp_path):
    namespace = f"/t{uuid.uuid4().hex[:6]}"
    out = tmp_path / "rec"
    recorder = omniflow(
        "record", "--namespace", namespace, "-o", str(out), "--topics", "audio", "image_raw"
    )
    player = None
    try:
        wait_for_line(recorder, "recording into")
        player = omniflow(
            "replay",
            str(sample("session.mcap")),
            "--namespace",
            namespace,
            "--wait",
            "60",
            "--loop",
            "--topics",
            "audio",
            "image_raw",
        )
        wait_for_line(player, "waiting up to")
        time.sleep(8.0)  # mid-stream: frames and audio arriving
        recorder.send_signal(signal.SIGINT)
        assert recorder.wait(30) == 0
        closing = wait_for_line(recorder, "closed")
    finally:
        for process in (recorder, player):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGINT)
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    process.kill()
    reader = BagReader(out)
    assert reader.problems == []
    counts = {name: topic.count for name, topic in reader.topics.items()}
    assert counts.get("audio", 0) > 25 and counts.get("image_raw", 0) > 10, closing
    assert closing.strip().endswith(", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    assert sum(1 for _ in reader.messages()) == sum(counts.values())


def test_replay_with_clock_recorded_and_stopped_with_ctrl_c(tmp_path, ros_node):
    namespace = f"/t{uuid.uuid4().hex[:6]}"
    clock = TopicRecorder(ros_node, Clock, "/clock", 10)
    out = tmp_path / "rec"
    recorder = omniflow(
        "record",
        "--namespace",
        namespace,
        "-o",
        str(out),
        "--topics",
        "audio",
        "image_raw",
        "played_audio",
    )
    player = None
    try:
        wait_for_line(recorder, "recording into")
        player = omniflow(
            "replay",
            str(sample("session.mcap")),
            "--clock",
            "--namespace",
            namespace,
            "--wait",
            "60",
        )
        assert player.wait(TIMEOUT_S) == 0, player.stdout.read()
        time.sleep(1.0)  # the last messages in flight
        recorder.send_signal(signal.SIGINT)
        assert recorder.wait(30) == 0
        closing = wait_for_line(recorder, "closed")
    finally:
        for process in (recorder, player):
            if process is not None and process.poll() is None:
                process.kill()
    reader = BagReader(out)
    assert reader.problems == [] and (out / "metadata.yaml").is_file()
    counts = {name: topic.count for name, topic in reader.topics.items()}
    # Everything the recorder counted is in the closed bag.
    assert closing.strip().endswith(", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    original = BagReader(sample("session.mcap"))
    assert counts["audio"] >= 0.95 * original.topics["audio"].count  # best effort, loopback
    assert counts["image_raw"] >= 0.9 * original.topics["image_raw"].count
    # The messages are the bag's (header stamps from the session), received in real time.
    recorded = [(m.timestamp_ns, decode(m.raw, m.msgtype)) for m in reader.messages(["audio"])]
    session_stamps = {
        stamp_ns(decode(m.raw, m.msgtype).header.stamp) for m in original.messages(["audio"])
    }
    assert {stamp_ns(msg.header.stamp) for _, msg in recorded} <= session_stamps
    span_s = (recorded[-1][0] - recorded[0][0]) / 1e9
    assert 9.0 < span_s < 20.0, span_s  # 12 s of bag at rate 1 (a loaded machine may lag)
    # /clock ran on the bag's timeline, forwards.
    ticks = [stamp_ns(m.clock) for m in clock.messages]
    assert len(ticks) > 100
    assert ticks == sorted(ticks)
    assert min(session_stamps) <= ticks[-1] <= max(session_stamps) + 10**9


def test_replay_refuses_a_bag_without_messages_on_the_asked_topics(tmp_path):
    player = omniflow("replay", str(sample("session.mcap")), "--topics", "transcript")
    output, _ = player.communicate(timeout=TIMEOUT_S)
    assert player.returncode == 1
    assert "no messages on transcript" in output and "audio (omniflow/msg/AudioChunk" in output
