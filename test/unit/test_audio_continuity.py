"""Continuity of the audio input (tier 1, no ROS): gaps by sequence, chunks sent twice,
chunks stamped inside audio already received, restarts, and jitter that is none of these."""

from __future__ import annotations

import numpy as np
import pytest

from omniflow.core.audio_continuity import JITTER_NS, AudioContinuity
from omniflow.core.timing import CHUNK_SAMPLES, NS_PER_MS, NS_PER_S, NS_PER_SAMPLE

CHUNK_NS = CHUNK_SAMPLES * NS_PER_SAMPLE
T0 = 100 * NS_PER_S


def samples(n: int = CHUNK_SAMPLES, first: int = 0) -> np.ndarray:
    return np.arange(first, first + n, dtype=np.int16)


def stream(continuity: AudioContinuity, count: int, first_sequence: int = 0):
    """``count`` contiguous chunks; returns the verdicts."""
    return [
        continuity.observe(first_sequence + i, T0 + i * CHUNK_NS, samples()) for i in range(count)
    ]


def test_a_contiguous_stream_passes_untouched():
    continuity = AudioContinuity()
    verdicts = stream(continuity, 50)
    assert all(v.samples is not None and len(v.samples) == CHUNK_SAMPLES for v in verdicts)
    assert not any(v.problems for v in verdicts)
    assert continuity.counts.gaps == continuity.counts.overlaps == 0


def test_the_first_chunk_of_the_stream_followed_is_named():
    continuity = AudioContinuity()
    assert continuity.counts.first_sequence == -1
    stream(continuity, 5, first_sequence=7)  # chunks 0-6 were sent before it matched
    assert continuity.counts.first_sequence == 7
    continuity.observe(3, T0 + 20 * CHUNK_NS, samples())  # a restarted source
    assert continuity.counts.first_sequence == 3


@pytest.mark.parametrize("jump", [2, 50, 1000])
def test_a_jump_in_sequence_is_a_gap_with_its_missing_chunks_named(jump):
    continuity = AudioContinuity()
    stream(continuity, 5)
    verdict = continuity.observe(4 + jump, T0 + (4 + jump) * CHUNK_NS, samples())
    assert verdict.samples is not None  # the chunk after the gap is kept
    assert continuity.counts.gaps == 1 and continuity.counts.missing == jump - 1
    assert verdict.problems == (
        f"gap in the audio input: {jump - 1} chunk(s) missing before chunk {4 + jump}",
    )


@pytest.mark.parametrize("back", [0, 1, 3])
def test_a_chunk_sent_twice_is_dropped_and_counted(back):
    continuity = AudioContinuity()
    stream(continuity, 5)
    again = 4 - back
    verdict = continuity.observe(again, T0 + again * CHUNK_NS, samples())
    assert verdict.samples is None
    assert continuity.counts.duplicates == 1
    assert verdict.problems == (
        f"audio chunk {again} received twice (same sequence and stamp): dropped",
    )
    # the stream goes on where it was, without a gap or a restart
    assert not continuity.observe(5, T0 + 5 * CHUNK_NS, samples()).problems
    assert continuity.counts.gaps == continuity.counts.restarts == 0


def test_a_chunk_stamped_wholly_inside_audio_received_is_dropped():
    continuity = AudioContinuity()
    stream(continuity, 20)  # 800 ms
    verdict = continuity.observe(20, T0 + 300 * NS_PER_MS, samples(6400))  # 400 ms in 0..800
    assert verdict.samples is None
    assert continuity.counts.overlaps == 1
    assert continuity.counts.overlap_ms == pytest.approx(400)
    assert (
        "stamped inside audio already received (500 ms before its end): dropped"
        in (verdict.problems[0])
    )


def test_a_chunk_overlapping_the_end_keeps_only_its_new_part():
    continuity = AudioContinuity()
    stream(continuity, 10)  # ends at T0 + 400 ms
    verdict = continuity.observe(10, T0 + 200 * NS_PER_MS, samples(6400))  # 200..600 ms
    assert verdict.stamp_ns == T0 + 400 * NS_PER_MS
    assert len(verdict.samples) == 3200 and verdict.samples[0] == 3200  # samples 200 ms on
    assert continuity.counts.overlaps == 1
    assert continuity.counts.overlap_ms == pytest.approx(200)
    assert verdict.problems == (
        "audio chunk 10 overlaps audio already received by 200 ms: only its new part is kept",
    )


@pytest.mark.parametrize("early_ms", [1, 10, JITTER_NS // NS_PER_MS])
def test_jitter_of_the_stamps_is_no_overlap(early_ms):
    continuity = AudioContinuity()
    stream(continuity, 5)
    verdict = continuity.observe(5, T0 + 5 * CHUNK_NS - early_ms * NS_PER_MS, samples())
    assert verdict.samples is not None and len(verdict.samples) == CHUNK_SAMPLES
    assert not verdict.problems and continuity.counts.overlaps == 0


def test_a_stream_that_goes_back_in_time_is_a_new_stream_taken_whole():
    continuity = AudioContinuity()
    stream(continuity, 50)  # 2 s
    verdict = continuity.observe(0, T0, samples())  # the bag looped
    assert verdict.samples is not None and verdict.stamp_ns == T0
    assert continuity.counts.restarts == 1
    assert "audio stream went back 2.0 s at chunk 0" in verdict.problems[0]
    # the loop's chunks follow each other as a stream of their own
    later = [continuity.observe(i, T0 + i * CHUNK_NS, samples()) for i in range(1, 10)]
    assert not any(v.problems for v in later)
    assert continuity.counts.overlaps == continuity.counts.duplicates == 0


def test_a_sequence_that_goes_back_with_stamps_going_on_restarts_the_tracking():
    continuity = AudioContinuity()
    stream(continuity, 10, first_sequence=500)
    verdict = continuity.observe(0, T0 + 10 * CHUNK_NS, samples())  # a restarted capture
    assert verdict.samples is not None
    assert continuity.counts.restarts == 1 and continuity.counts.gaps == 0
    assert not continuity.observe(1, T0 + 11 * CHUNK_NS, samples()).problems
