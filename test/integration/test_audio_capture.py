"""The audio capture node in its own process, received over real DDS (tier 2)."""

from __future__ import annotations

import time

import numpy as np
import pytest
import soundfile
from diagnostic_msgs.msg import DiagnosticArray
from lifecycle_msgs.msg import State, Transition

from omniflow.msg import AudioChunk
from omniflow.ros.conversions import audio_samples, ns_from_time
from omniflow.ros.monitor import TopicRecorder, wait_for_publishers
from omniflow.ros.qos import SENSOR_DATA
from ros_helpers import change_state, get_parameter, lifecycle_state, set_parameters, topic

MODULE = "omniflow.nodes.audio_capture"
RATE = 16000
CHUNK = 640  # 40 ms


@pytest.fixture
def speech_file(tmp_path):
    """2 s of a chirp, so each 40 ms block differs from the next."""
    t = np.arange(2 * RATE) / RATE
    samples = (0.4 * np.sin(2 * np.pi * (200 + 400 * t) * t) * 32767).astype(np.int16)
    path = tmp_path / "chirp.wav"
    soundfile.write(path, samples, RATE, subtype="PCM_16")
    return path, samples


def start_audio(start_node, path, **extra):
    return start_node(
        MODULE,
        "audio_capture",
        {"source": "file", "file.path": str(path), "autostart": False, **extra},
    )


def activate(ros_node, process, wait_for_match=False):
    """Configure and activate; optionally first wait until our subscription is matched, so
    that not one block is missed (an inactive node has its publisher but sends nothing)."""
    assert change_state(ros_node, process, Transition.TRANSITION_CONFIGURE)
    if wait_for_match:
        wait_for_publishers(ros_node, topic(process, "audio"), 1, timeout=10)
        time.sleep(0.5)  # the publisher's side of the match
    assert change_state(ros_node, process, Transition.TRANSITION_ACTIVATE)


def wait_for_whole_file(recorder, samples):
    """Wait for the file's last block; best-effort delivery may lose one on a busy machine,
    so checks go by each block's sequence number rather than by arrival order."""
    last = len(samples) // CHUNK - 1
    return recorder.wait_until(
        lambda chunks: any(c.sequence == last for c in chunks), timeout=15, what=f"block {last}"
    )


def test_file_blocks_are_stamped_40ms_apart_and_carry_the_file(ros_node, start_node, speech_file):
    path, samples = speech_file
    process = start_audio(start_node, path)
    recorder = TopicRecorder(ros_node, AudioChunk, topic(process, "audio"), SENSOR_DATA)
    activate(ros_node, process, wait_for_match=True)
    chunks = wait_for_whole_file(recorder, samples)

    assert len(chunks) >= 0.9 * len(samples) // CHUNK
    sequences = np.array([c.sequence for c in chunks])
    assert np.all(np.diff(sequences) > 0)
    stamps = np.array([ns_from_time(c.header.stamp) for c in chunks])
    # Stream time: exactly one 40 ms period per block.
    np.testing.assert_array_equal(np.diff(stamps), np.diff(sequences) * 40_000_000)
    first = chunks[0]
    assert (first.sample_rate, first.channels, first.format) == (RATE, 1, AudioChunk.FORMAT_S16LE)
    assert first.header.frame_id == "microphone"
    for chunk in chunks:
        start = chunk.sequence * CHUNK
        np.testing.assert_array_equal(audio_samples(chunk)[:, 0], samples[start : start + CHUNK])


def test_pause_and_resume_is_reported_as_a_gap(ros_node, start_node, speech_file):
    path, _ = speech_file
    process = start_audio(start_node, path, **{"file.loop": True})
    recorder = TopicRecorder(ros_node, AudioChunk, topic(process, "audio"), SENSOR_DATA)
    diagnostics = TopicRecorder(ros_node, DiagnosticArray, "/diagnostics", 10)
    activate(ros_node, process)
    recorder.wait_for(5, timeout=10)
    assert change_state(ros_node, process, Transition.TRANSITION_DEACTIVATE)
    paused = len(recorder.messages)
    time.sleep(0.5)
    assert change_state(ros_node, process, Transition.TRANSITION_ACTIVATE)
    chunks = recorder.wait_for(paused + 5, timeout=10)

    steps = np.diff([c.sequence for c in chunks])
    assert steps.max() >= 10  # ~0.5 s paused = 12 blocks missing in stream time
    name = f"omniflow: {topic(process, 'audio_capture')}"

    def gap_reported(arrays):
        return any(
            s.name == name and dict((kv.key, kv.value) for kv in s.values)["gaps"] != "0"
            for a in arrays
            for s in a.status
        )

    diagnostics.wait_until(gap_reported, timeout=5, what="a gap in the diagnostics")


def test_rate_factor_speeds_up_delivery_not_stream_time(ros_node, start_node, speech_file):
    path, samples = speech_file
    process = start_audio(start_node, path, **{"file.rate": 4.0})
    recorder = TopicRecorder(ros_node, AudioChunk, topic(process, "audio"), SENSOR_DATA)
    activate(ros_node, process, wait_for_match=True)
    wait_for_whole_file(recorder, samples)
    received = recorder.received
    first, last = received[0], received[-1]
    wall_s = (last.monotonic_ns - first.monotonic_ns) / 1e9
    audio_s = (last.msg.sequence - first.msg.sequence) * 0.040
    assert wall_s < audio_s / 2  # 4x: about a quarter of the audio's duration
    stamps = [ns_from_time(r.msg.header.stamp) for r in received]
    sequences = [r.msg.sequence for r in received]
    np.testing.assert_array_equal(np.diff(stamps), np.diff(sequences) * 40_000_000)


def test_unknown_source_is_refused_at_start_up_naming_the_allowed_values(start_node):
    process = start_node(MODULE, "audio_capture", {"source": "microphone"})
    assert process.wait(timeout=20) == 2
    assert "allowed values: device, file" in process.output()


def test_chunk_that_is_not_whole_samples_is_refused_at_start_up(start_node, speech_file):
    process = start_node(
        MODULE,
        "audio_capture",
        {"source": "file", "file.path": str(speech_file[0]), "sample_rate": 22050, "chunk_ms": 15},
    )
    assert process.wait(timeout=20) == 2
    assert "not a whole number of samples" in process.output()


def test_bad_values_at_run_time_are_refused_and_the_node_keeps_going(
    ros_node, start_node, speech_file
):
    path, _ = speech_file
    process = start_audio(start_node, path, **{"file.loop": True, "autostart": True})
    recorder = TopicRecorder(ros_node, AudioChunk, topic(process, "audio"), SENSOR_DATA)
    recorder.wait_for(3, timeout=10)

    (out_of_range,) = set_parameters(ros_node, process, **{"file.rate": 1000.0})
    assert not out_of_range.successful
    assert "100" in out_of_range.reason  # names the upper bound
    (while_active,) = set_parameters(ros_node, process, source="device")
    assert not while_active.successful
    assert "applied on configure" in while_active.reason
    assert get_parameter(ros_node, process, "source") == "file"
    count = len(recorder.messages)
    recorder.wait_for(count + 5, timeout=5)  # still publishing


def test_missing_file_leaves_the_node_up_and_unconfigured_with_the_path_named(ros_node, start_node):
    process = start_node(
        MODULE, "audio_capture", {"source": "file", "file.path": "/no/such/recording.wav"}
    )
    time.sleep(0.5)
    assert lifecycle_state(ros_node, process) == State.PRIMARY_STATE_UNCONFIGURED
    assert process.running
    assert "/no/such/recording.wav" in process.output()


def test_unknown_device_lists_what_exists(ros_node, start_node):
    process = start_node(
        MODULE, "audio_capture", {"source": "device", "device": "no-such-microphone"}
    )
    assert lifecycle_state(ros_node, process) == State.PRIMARY_STATE_UNCONFIGURED
    output = process.output()
    assert "no-such-microphone" in output
    assert "input device" in output
