#!/usr/bin/env python3
"""Freshness at live rates: how many bytes of frames the token ring holds, with and without it.

The fusion node's pipeline (:class:`~omniflow.core.fusion_pipeline.FusionPipeline`, the
node's default settings: a 256-slot ring, 40 ms slices, the onset ring) with the webrtc VAD
and the default vision encoder (mediapipe detectors) on a simulated stream: hello.wav and
``--gap`` s of quiet in a loop, and scene.avi's frames resized to ``--size`` at the camera's
15 frames/s, encoded at ``--vision-rate``. Each vision token holds its frame; every newly
encoded frame is a freshness round, and a token left out of ``association.unused_limit`` (3)
rounds keeps a quarter-size frame (half width and height).

Two runs in one process, on the same stream: ``freshness`` (limit 3, the default) and the
``baseline`` (a limit that never fires within the ring's span: every held token keeps its
full frame, the behaviour before freshness ran per frame). Once a simulated second the bytes
of the frames held by the ring's vision tokens are read; printed: median and p90 in MB for
both, their ratio, and the downgrades counted. The onset ring's raw frames (``--onset-ms``)
are the same in both runs and not counted. A benchmark prints figures; it does not fail.

    .venv/bin/python benchmarks/token_freshness.py --seconds 60 \
        --json build/bench/token_freshness.json
"""

from __future__ import annotations

import argparse
from pathlib import Path

import cv2
from _common import ratio, summary, write_result
from fusion_memory import audio_loop, video_frames

from omniflow.core.fusion_pipeline import FusionConfig, FusionPipeline
from omniflow.core.timing import CHUNK_SAMPLES, NS_PER_MS, NS_PER_S, NS_PER_SAMPLE
from omniflow.core.tokens import Modality
from omniflow.engines.fusion_engines import make_fusion_engines
from omniflow.engines.vision import make_default_encoder

CAMERA_FPS = 15.0


def held_mb(pipeline: FusionPipeline) -> tuple[float, int]:
    """(MB of frames held by the ring's vision tokens, vision tokens held)."""
    tokens = pipeline.ring.query(0, 2**62, Modality.VISION)
    return sum(t.payload.nbytes for t in tokens) / 1e6, len(tokens)


def run(seconds: float, rate_hz: float, size: tuple[int, int], unused_limit: int) -> dict:
    engines = make_fusion_engines(
        vad_engine="webrtc", min_speech_ms=60, min_silence_ms=400, vision=make_default_encoder
    )
    config = FusionConfig(
        ring_capacity=256,
        window_before_ns=80 * NS_PER_MS,
        window_after_ns=120 * NS_PER_MS,
        slice_ns=40 * NS_PER_MS,
        max_utterance_ns=15 * NS_PER_S,
        vision_rate_hz=rate_hz,
        echo_wait_ns=60 * NS_PER_MS,
        max_future_ns=NS_PER_S,
        unused_limit=unused_limit,
    )
    pipeline = FusionPipeline(config, engines)
    audio = audio_loop(gap_s=3.0)
    frames = [cv2.resize(f, size, interpolation=cv2.INTER_AREA) for f in video_frames()]
    chunk_ns = CHUNK_SAMPLES * NS_PER_SAMPLE
    frame_ns = int(NS_PER_S / CAMERA_FPS)
    start = 1_000 * NS_PER_S
    next_frame, frame_index = start, 0
    samples_mb, samples_tokens = [], []
    for i in range(int(seconds * NS_PER_S / chunk_ns)):
        stamp = start + i * chunk_ns
        offset = (i * CHUNK_SAMPLES) % len(audio)
        frame = None
        if next_frame <= stamp:
            frame = (next_frame, frames[frame_index % len(frames)])
            next_frame += frame_ns
            frame_index += 1
        pipeline.step(
            stamp + chunk_ns,
            audio=[(stamp, audio[offset : offset + CHUNK_SAMPLES])],
            frame=frame,
        )
        if i % 25 == 24 and i * chunk_ns > 10 * NS_PER_S:  # once a second, after the ring fills
            mb, count = held_mb(pipeline)
            samples_mb.append(mb)
            samples_tokens.append(count)
    return {
        "frames_mb": summary(samples_mb, 2),
        "vision_tokens": summary(samples_tokens, 1),
        "downgraded": pipeline.associator.stats.downgraded,
        "retired": pipeline.associator.stats.retired,
        "speech_starts": pipeline.stats.speech_starts,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="simulated stream length")
    parser.add_argument("--vision-rate", type=float, default=5.0, help="frames encoded per s")
    parser.add_argument("--size", default="640x480", help="frame size WxH")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args(argv)
    size = tuple(int(v) for v in args.size.split("x"))
    fresh = run(args.seconds, args.vision_rate, size, unused_limit=3)
    baseline = run(args.seconds, args.vision_rate, size, unused_limit=100)
    result = {
        "seconds": args.seconds,
        "vision_rate_hz": args.vision_rate,
        "size": args.size,
        "freshness": fresh,
        "baseline": baseline,
        "ratio_median": ratio(fresh["frames_mb"]["median"], baseline["frames_mb"]["median"]),
        "ratio_p90": ratio(fresh["frames_mb"]["p90"], baseline["frames_mb"]["p90"]),
    }
    write_result(result, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
