"""The two-object session through the fusion pipeline (no ROS): the semantic gate picks the
frame of the object a question names, where the choice by time alone does not.

``test/data/samples/two_objects.mcap`` (scripts/make_sample_session.py --scenario
two-objects): the cat until 2.5 s, then the cup; at 3.2 s, with the cup on screen, the user
asks "What colour is the cat?"; at 5.8 s, a hand pointing at the cup, "What is this?". The
audio and frames go through :class:`FusionPipeline` with the real webrtc VAD, Whisper tiny.en,
the default vision encoder (Coral's COCO detector on the CPU, MediaPipe's palm detector) and
the shipped word space.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from omniflow.bag import BagReader
from omniflow.core.association import Decision
from omniflow.core.fusion_events import TranscriptEvent
from omniflow.core.fusion_pipeline import FusionConfig, FusionPipeline
from omniflow.core.timing import NS_PER_MS, NS_PER_S
from omniflow.engines.asr import make_recognizer
from omniflow.engines.fusion_engines import make_fusion_engines, word_space
from omniflow.engines.vision import make_default_encoder

SESSION = Path(__file__).resolve().parents[1] / "data" / "samples" / "two_objects.mcap"


def _chosen_labels(decision: Decision) -> tuple[str, ...]:
    return decision.chosen[0].labels if decision.chosen else ()


@pytest.fixture(scope="module")
def run() -> dict[int, list[Decision | TranscriptEvent]]:
    """Every decision and final of the session, by utterance id."""
    engines = make_fusion_engines(
        vad_engine="webrtc",
        min_speech_ms=60,
        min_silence_ms=400,
        recognizer=lambda: make_recognizer("whisper"),
        vision=make_default_encoder,
        words=word_space,
    )
    config = FusionConfig(
        ring_capacity=256,
        window_before_ns=80 * NS_PER_MS,
        window_after_ns=120 * NS_PER_MS,
        slice_ns=40 * NS_PER_MS,
        max_utterance_ns=15 * NS_PER_S,
        vision_rate_hz=2.0,  # the live rate in LISTEN: the onset frame is encoded anyway
        echo_wait_ns=60 * NS_PER_MS,
        max_future_ns=NS_PER_S,
    )
    pipeline = FusionPipeline(config, engines)
    events: list = []
    now = 0

    def step(audio=()) -> None:
        events.extend(pipeline.step(now, audio=audio))
        deadline = time.monotonic() + 120
        while pipeline.finals_due:  # a recogniser as fast as the stream: wait for Whisper
            assert time.monotonic() < deadline, "no final from Whisper within 120 s"
            time.sleep(0.02)
            events.extend(pipeline.step(now))

    for message, msg in BagReader(SESSION).decoded(["audio", "image_raw"]):
        now = message.timestamp_ns
        stamp = msg.header.stamp.sec * NS_PER_S + msg.header.stamp.nanosec
        if message.topic == "image_raw":
            rgb = np.asarray(msg.data, dtype=np.uint8).reshape(msg.height, msg.width, 3)
            pipeline.push_frame(stamp, rgb)
        else:
            step([(stamp, np.frombuffer(bytes(msg.data), dtype="<i2"))])
    for _ in range(50):  # 2 s of silence: the last utterance ends, its final comes
        now += 40 * NS_PER_MS
        step([(now - 40 * NS_PER_MS, np.zeros(640, dtype=np.int16))])
    by_utterance: dict[int, list] = {}
    for event in events:
        if isinstance(event, Decision | TranscriptEvent) and event.utterance_id:
            by_utterance.setdefault(event.utterance_id, []).append(event)
    return by_utterance


def test_both_questions_are_heard_and_decided_twice(run):
    assert sorted(run) == [1, 2]
    for events in run.values():
        kinds = [type(e).__name__ for e in events if isinstance(e, Decision) or e.final]
        # START (time only), then the words' decision, then the final transcript after it
        assert kinds == ["Decision", "Decision", "TranscriptEvent"], kinds


def test_the_named_object_is_chosen_where_time_alone_picks_the_other(run):
    by_time, by_words, final = (e for e in run[1] if isinstance(e, Decision) or e.final)
    assert "cat" in final.text.lower()
    assert by_time.query == "" and _chosen_labels(by_time) == ("cup", "dining table")
    assert by_words.query == "cat"
    assert _chosen_labels(by_words) == ("cat",)
    chosen = by_words.chosen[0]
    assert chosen.bloom_hit and chosen.hamming == 0 and chosen.score == 1.0
    assert chosen.time_offset_ns < 0  # seen before the question
    cup_frames = [c for c in by_words.candidates if "cup" in c.labels]
    assert cup_frames and all(not c.bloom_hit and not c.chosen for c in cup_frames)
    assert all("no word of 'cat'" in c.reason for c in cup_frames)


def test_this_resolves_to_the_object_pointed_at(run):
    by_time, by_words, final = (e for e in run[2] if isinstance(e, Decision) or e.final)
    assert "this" in final.text.lower()
    assert by_words.query == "this -> cup"
    chosen = by_words.chosen[0]
    assert chosen.pointed == "cup" and chosen.bloom_hit
    # the onset frame was encoded though the vision rate is 2 Hz: one within a frame period
    assert abs(by_time.chosen[0].time_offset_ns) <= 100 * NS_PER_MS
