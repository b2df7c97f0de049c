"""Tier 1: bags with rosbags: write and read back, single MCAP files, truncated and unfinished
recordings, missing topics, unknown types; the bytes are those rclpy sends."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from rclpy.serialization import deserialize_message, serialize_message

from omniflow import bag
from omniflow.bag import BagMessage, BagReader, BagWriter, write_mcap_file
from omniflow.errors import BagError
from omniflow.msg import AudioChunk, Transcript

START = 1_767_225_600 * 10**9


def chunk_bytes(sequence: int, size: int = 1280) -> bytes:
    data = np.random.default_rng(sequence).integers(0, 256, size, dtype=np.uint8).tobytes()
    msg = AudioChunk(sample_rate=16000, channels=1, format=1, sequence=sequence, data=data)
    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(START + sequence * 40_000_000, 10**9)
    return serialize_message(msg)


def audio_messages(count: int, size: int = 1280) -> list[BagMessage]:
    return [
        BagMessage("audio", "omniflow/msg/AudioChunk", START + k * 40_000_000, chunk_bytes(k, size))
        for k in range(count)
    ]


def transcript(text: str) -> bytes:
    return serialize_message(Transcript(utterance_id=1, text=text, is_final=True))


def test_written_bag_reads_back_in_order_with_rclpys_bytes(tmp_path):
    written = audio_messages(50)
    with BagWriter(tmp_path / "bag") as writer:
        writer.add_topic("audio", "omniflow/msg/AudioChunk")
        writer.add_topic("transcript", "omniflow/msg/Transcript")
        for message in written:
            writer.write(message.topic, message.timestamp_ns, message.raw)
        writer.write("transcript", START + 10, transcript("what is this"))
    assert (tmp_path / "bag" / "metadata.yaml").is_file()
    reader = BagReader(tmp_path / "bag")
    assert reader.problems == []
    assert {n: (t.msgtype, t.count) for n, t in reader.topics.items()} == {
        "audio": ("omniflow/msg/AudioChunk", 50),
        "transcript": ("omniflow/msg/Transcript", 1),
    }
    messages = list(reader.messages())
    assert [m.timestamp_ns for m in messages] == sorted(m.timestamp_ns for m in messages)
    audio = [m for m in messages if m.topic == "audio"]
    assert [m.raw for m in audio] == [m.raw for m in written]  # byte for byte
    decoded = deserialize_message(audio[7].raw, AudioChunk)
    assert decoded.sequence == 7 and len(decoded.data) == 1280
    assert bytes(decoded.data) == bytes(deserialize_message(written[7].raw, AudioChunk).data)
    ((_, text),) = [(m, d) for m, d in reader.decoded(["transcript"])]
    assert text.text == "what is this" and text.is_final


def test_a_single_mcap_file_is_a_bag(tmp_path):
    path = write_mcap_file(tmp_path / "one.mcap", audio_messages(20))
    reader = BagReader(path)
    assert reader.topics["audio"].count == 20
    assert [bag.decode(m.raw, m.msgtype).sequence for m in reader.messages()] == list(range(20))


def test_a_truncated_mcap_is_read_up_to_its_last_complete_record(tmp_path):
    # 3 MB of audio: several 1 MiB chunks, then cut in the middle of the file.
    path = write_mcap_file(tmp_path / "full.mcap", audio_messages(300, size=10_000))
    data = path.read_bytes()
    cut = tmp_path / "cut.mcap"
    cut.write_bytes(data[: len(data) * 2 // 3])
    reader = BagReader(cut)
    sequences = [bag.decode(m.raw, m.msgtype).sequence for m in reader.messages()]
    assert 0 < len(sequences) < 300
    assert sequences == list(range(len(sequences)))  # nothing before the cut is lost
    assert reader.topics["audio"].count == len(sequences)
    (problem,) = reader.problems
    assert "truncated" in problem and f"read {len(sequences)} complete messages" in problem


def test_an_unfinished_recording_without_metadata_is_read_from_its_files(tmp_path):
    with BagWriter(tmp_path / "bag") as writer:
        writer.add_topic("audio", "omniflow/msg/AudioChunk")
        for message in audio_messages(30):
            writer.write(message.topic, message.timestamp_ns, message.raw)
    (tmp_path / "bag" / "metadata.yaml").unlink()
    reader = BagReader(tmp_path / "bag")
    assert len(list(reader.messages())) == 30
    assert any("no metadata.yaml" in p for p in reader.problems)


def test_require_names_what_is_missing_and_what_is_there(tmp_path):
    reader = BagReader(write_mcap_file(tmp_path / "a.mcap", audio_messages(3)))
    reader.require(["audio"])
    with pytest.raises(
        BagError,
        match=r"no messages on image_raw.*audio \(omniflow/msg/"
        r"AudioChunk, 3\)",
    ):
        reader.require(["audio", "image_raw"])


def test_unknown_types_are_reported_and_skipped_when_decoding(tmp_path):
    from rosbags.rosbag2 import StoragePlugin, Writer

    with Writer(tmp_path / "bag", version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        odd = writer.add_connection(
            "odd", "acme/msg/Gizmo", msgdef="int32 x", rihs01="RIHS01_" + "0" * 64
        )
        audio = writer.add_connection("audio", "omniflow/msg/AudioChunk", typestore=bag.typestore())
        writer.write(odd, START, b"\x00\x01\x00\x00\x07\x00\x00\x00")
        writer.write(audio, START + 1, chunk_bytes(0))
    reader = BagReader(tmp_path / "bag")
    assert reader.unknown_types() == {"odd": "acme/msg/Gizmo"}
    assert [m.topic for m, _ in reader.decoded()] == ["audio"]
    with pytest.raises(BagError, match="acme/msg/Gizmo"):
        bag.decode(b"", "acme/msg/Gizmo")
    with pytest.raises(BagError, match="cannot be decoded"):
        bag.decode(b"\x07\x07", "omniflow/msg/AudioChunk")
    with pytest.raises(BagError, match="not installed here"):
        bag.message_class("acme/msg/Gizmo")


def test_the_writer_refuses_unknown_types_and_existing_paths(tmp_path):
    with BagWriter(tmp_path / "bag") as writer, pytest.raises(BagError, match="unknown here"):
        writer.add_topic("odd", "acme/msg/Gizmo")
    with pytest.raises(BagError, match="exists already"):
        BagWriter(tmp_path / "bag")


@pytest.mark.parametrize("content", [b"", b"not a bag at all", b"\x89MCAP0\r\n"])
def test_files_that_are_not_mcap_are_refused_clearly(tmp_path, content):
    path = tmp_path / "x.mcap"
    path.write_bytes(content)
    with pytest.raises(BagError, match="not a readable MCAP file"):
        BagReader(path)


def test_missing_paths_and_empty_directories_are_refused(tmp_path):
    with pytest.raises(BagError, match="does not exist"):
        BagReader(tmp_path / "nothing")
    with pytest.raises(BagError, match="neither an MCAP file nor a rosbag2 directory"):
        BagReader(tmp_path)


def test_the_bundled_session_holds_the_inputs_and_the_echo_reference():
    from omniflow.resources import sample

    path = sample("session.mcap")
    assert path.stat().st_size < 10_000_000
    reader = BagReader(path)
    reader.require(["audio", "image_raw", "played_audio"])
    assert reader.unknown_types() == {}
    first = next(reader.decoded(["image_raw"]))[1]
    assert (first.width, first.height, first.encoding) == (320, 240, "rgb8")
    counts = {n: t.count for n, t in reader.topics.items()}
    assert counts["audio"] == 300 and counts["image_raw"] == 180  # 12 s, 40 ms, 15 fps


def test_the_session_script_is_deterministic(tmp_path):
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed")
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "s.mcap"
    subprocess.run(
        [sys.executable, str(root / "scripts" / "make_sample_session.py"), "--out", str(out)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    assert out.read_bytes() == (root / "test" / "data" / "samples" / "session.mcap").read_bytes()


def test_topics_recorded_by_ros2_bag_are_found_by_their_graph_names(tmp_path):
    messages = [
        BagMessage("/robot1/audio", m.msgtype, m.timestamp_ns, m.raw) for m in audio_messages(3)
    ]
    messages.append(
        BagMessage("/transcript", "omniflow/msg/Transcript", START + 1, transcript("hi"))
    )
    reader = BagReader(write_mcap_file(tmp_path / "ros2.mcap", messages))
    assert reader.resolve(["audio", "transcript", "image_raw"]) == {
        "audio": "/robot1/audio",
        "transcript": "/transcript",
    }
    reader.require(["audio"])
    with pytest.raises(BagError, match="no messages on image_raw"):
        reader.require(["audio", "image_raw"])
    from omniflow.report import Run

    run = Run.from_bags(reader.path)
    assert set(run.messages) == {"audio", "transcript"}


@pytest.mark.parametrize(
    ("name", "namespace", "expanded"),
    [
        ("audio", "", "/audio"),
        ("audio", "/", "/audio"),
        ("audio", "/robot1", "/robot1/audio"),
        ("audio", "robot1", "/robot1/audio"),  # namespace:=robot1 from a launch file
        ("audio", "/robot1/", "/robot1/audio"),
        ("/diagnostics", "robot1", "/diagnostics"),
    ],
)
def test_the_player_and_recorder_expand_names_as_ros_does(name, namespace, expanded) -> None:
    """A namespace without its leading slash published into /robot1/robot1/audio (relative
    to the player node's own /robot1), where no node listens."""
    from omniflow.ros.bag_io import _absolute

    assert _absolute(name, namespace) == expanded
