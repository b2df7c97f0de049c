"""Tier 2: `omniflow replay` publishes a bag with its timing and /clock, `omniflow record`
records it over real DDS, and Ctrl-C leaves a complete, readable bag."""

from __future__ import annotations

import contextlib
import resource
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


def omniflow(*args: str, file_size_limit: int | None = None) -> subprocess.Popen:
    """``file_size_limit``: the child's RLIMIT_FSIZE (``ulimit -f``), a disk filling up
    without root or a shared disk being filled."""
    return subprocess.Popen(
        [sys.executable, "-m", "omniflow.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=None
        if file_size_limit is None
        else lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit,) * 2),
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


@contextlib.contextmanager
def recording_a_looped_session(out, *, file_size_limit: int | None = None):
    """``omniflow record`` of audio and frames, and the session played into it in a loop;
    both stopped at the end if still running. Yields the recorder."""
    namespace = f"/t{uuid.uuid4().hex[:6]}"
    topics = ("--topics", "audio", "image_raw")
    recorder = omniflow(
        "record", "--namespace", namespace, "-o", str(out), *topics, file_size_limit=file_size_limit
    )
    player = None
    try:
        wait_for_line(recorder, "recording into")
        played = ("replay", str(sample("session.mcap")), "--namespace", namespace, "--loop")
        player = omniflow(*played, "--wait", "60", *topics)
        wait_for_line(player, "waiting up to")
        yield recorder
    finally:
        for process in (recorder, player):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGINT)
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    process.kill()


def test_ctrl_c_while_messages_flow_leaves_a_complete_bag(tmp_path):
    out = tmp_path / "rec"
    with recording_a_looped_session(out) as recorder:
        time.sleep(8.0)  # mid-stream: frames and audio arriving
        recorder.send_signal(signal.SIGINT)
        assert recorder.wait(30) == 0
        closing = wait_for_line(recorder, "closed")
    reader = BagReader(out)
    assert reader.problems == []
    counts = {name: topic.count for name, topic in reader.topics.items()}
    assert counts.get("audio", 0) > 25 and counts.get("image_raw", 0) > 10, closing
    assert closing.strip().endswith(", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    assert sum(1 for _ in reader.messages()) == sum(counts.values())


def test_a_full_disk_stops_the_recording_with_the_bag_closed_and_readable(tmp_path):
    out = tmp_path / "rec"
    with recording_a_looped_session(out, file_size_limit=3_000_000) as recorder:
        code = recorder.wait(TIMEOUT_S)
        output = recorder.stdout.read()
    assert code == 1, output
    assert "Traceback" not in output
    error = next(line for line in output.splitlines() if "omniflow record: error:" in line)
    assert "EFBIG" in error and str(out) in error and "closed and readable" in error
    reader = BagReader(out)
    assert reader.problems == [] and (out / "metadata.yaml").is_file()
    counts = {name: topic.count for name, topic in reader.topics.items()}
    assert counts["audio"] > 0 and counts["image_raw"] > 0, error
    total = sum(counts.values())
    summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    assert f"{total} messages ({summary})" in error  # what it says is what the bag holds
    assert sum(1 for _ in reader.messages()) == total


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
    # A tick before each message, and one when none came for 25 ms (40 Hz, as `ros2 bag play
    # --clock`), 0.5 s of them before the first: each tick wakes every node on sim time.
    played = sum(topic.count for topic in original.topics.values())
    assert len(ticks) <= played + 40 * (span_s + 0.5) + 50, (len(ticks), played, span_s)


def test_replay_refuses_a_bag_without_messages_on_the_asked_topics(tmp_path):
    player = omniflow("replay", str(sample("session.mcap")), "--topics", "transcript")
    output, _ = player.communicate(timeout=TIMEOUT_S)
    assert player.returncode == 1
    assert "no messages on transcript" in output and "audio (omniflow/msg/AudioChunk" in output
