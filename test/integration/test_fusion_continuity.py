"""Gaps, duplicates and overlaps in the fusion node's audio input (tier 2, real DDS): a chunk
sent twice, a jump of 50 in ``sequence`` and a 400 ms chunk stamped inside audio already
received are each counted in ``~/status`` and named in a warning."""

from __future__ import annotations

import time
import uuid

import numpy as np

from omniflow.core.timing import CHUNK_SAMPLES, NS_PER_MS
from omniflow.msg import AudioChunk
from omniflow.ros import conversions
from omniflow.ros.qos import SENSOR_DATA
from ros_helpers import last_status, wait_active, wait_status

CHUNK_NS = 40 * NS_PER_MS


def test_gaps_duplicates_and_overlaps_in_the_audio_input_are_counted_and_named(
    ros_node, start_node
):
    namespace = f"/t{uuid.uuid4().hex[:6]}"
    fusion = start_node(
        "omniflow.nodes.fusion",
        "fusion",
        {"vision.enabled": False, "asr.engine": "pocketsphinx"},
        namespace=namespace,
    )
    fusion_status = wait_active(ros_node, fusion)
    publisher = ros_node.create_publisher(AudioChunk, f"{namespace}/audio", SENSOR_DATA)
    origin_ns = ros_node.get_clock().now().nanoseconds

    def send(sequence: int, stamp_ns: int, samples: int = CHUNK_SAMPLES) -> None:
        publisher.publish(
            conversions.audio_chunk(
                np.zeros(samples, np.int16),
                stamp_ns=stamp_ns,
                frame_id="microphone",
                sample_rate=16000,
                sequence=sequence,
            )
        )
        time.sleep(CHUNK_NS / 1e9)  # at the microphone's pace

    # A clean stream until fusion has heard some of it (the subscription has matched); the
    # stamps follow the clock (fusion refuses stamps ahead of it), the sequence is scripted.
    sequence, stamp_ns = 0, origin_ns
    deadline = time.monotonic() + 30
    while not fusion_status.messages or last_status(fusion_status)["audio_chunks"] < 5:
        assert time.monotonic() < deadline, "fusion heard none of the audio within 30 s"
        send(sequence, stamp_ns)
        sequence, stamp_ns = sequence + 1, stamp_ns + CHUNK_NS
    send(sequence - 1, stamp_ns - CHUNK_NS)  # the last chunk again
    duplicate = sequence - 1
    sequence = duplicate + 50  # a jump of 50 in sequence: 49 chunks missing
    send(sequence, stamp_ns)
    stamp_ns += CHUNK_NS
    overlapping = sequence + 1
    send(overlapping, stamp_ns - 200 * NS_PER_MS, samples=6400)  # 400 ms, 200 ms inside
    send(overlapping + 1, stamp_ns + 200 * NS_PER_MS)

    # Chunks sent before the subscription matched may never reach fusion, so the number it has
    # received says nothing; each special chunk moves a counter of its own (or, if DDS lost one
    # of them, the lost count).
    counts = wait_status(
        fusion_status,
        lambda status: (
            status["audio_lost"] > 0
            or min(status["audio_duplicates"], status["audio_gaps"], status["audio_overlaps"]) > 0
        ),
        "the duplicate, the gap and the overlap counted",
        timeout=10,
    )
    report = f"status: {counts}\nfusion said:\n{fusion.output()[-3000:]}"
    assert counts["audio_lost"] == 0, f"DDS lost chunks on the way: {report}"
    assert counts["audio_duplicates"] == 1, report
    assert (counts["audio_gaps"], counts["audio_missing"]) == (1, 49), report
    assert counts["audio_overlaps"] == 1 and counts["audio_overlap_ms"] == 200, report
    assert counts["audio_restarts"] == 0, report
    output = fusion.output()
    assert f"audio chunk {duplicate} received twice (same sequence and stamp): dropped" in output
    assert f"gap in the audio input: 49 chunk(s) missing before chunk {sequence}" in output
    assert f"audio chunk {overlapping} overlaps audio already received by 200 ms" in output
