#!/usr/bin/env python3
"""Cost of the vision encoder per frame on the CPU: each detector and the whole encoder.

Frames are real photographs from scikit-image (astronaut, coffee, chelsea, rocket), resized
to each frame size (default 320x240 and 640x480, i.e. what a camera node would deliver) and
cycled. For each size, after ``--warmup`` frames, each of ``--frames`` frames is encoded by
the default :class:`~omniflow.engines.vision.DetectorVisionEncoder` (face, hand/palm, person
detectors, frame descriptor, LSH code); the stage times it records (``time.perf_counter``)
give per-detector figures, ``total`` the whole encoder. Reported: median and p90 in ms.
Target: <= 20 ms per detector used on this machine; the source material's vision stage costs
63.5 ms on a Raspberry Pi 5. TFLite runs with ``--threads`` XNNPACK threads (default 2, the
encoder's default). Prints JSON; ``--json PATH`` also writes it. It does not fail on a slow
machine.

    .venv/bin/python benchmarks/vision_encoder.py --json build/bench/vision_encoder.json
"""

from __future__ import annotations

import argparse
import os
import platform
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import skimage.data
from _common import summary, write_result

from omniflow.engines.vision import make_default_encoder, probe_edgetpu

PHOTOS = ("astronaut", "coffee", "chelsea", "rocket")


def measure(size: tuple[int, int], frames: int, warmup: int, threads: int) -> dict[str, Any]:
    """Encode ``frames`` photographs resized to ``size`` (w, h); per-stage median/p90 in ms."""
    encoder = make_default_encoder(num_threads=threads)
    images = [
        cv2.resize(getattr(skimage.data, n)(), size, interpolation=cv2.INTER_AREA) for n in PHOTOS
    ]
    for i in range(warmup):
        encoder.encode(images[i % len(images)], i + 1)
    stages: dict[str, list[float]] = {}
    for i in range(frames):
        result = encoder.encode(images[i % len(images)], warmup + i + 1)
        for stage, ms in result.timings_ms.items():
            stages.setdefault(stage, []).append(ms)
    return {stage: summary(v, 2, suffix="_ms", count=None) for stage, v in stages.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--sizes", default="320x240,640x480", help="comma-separated WxH frame sizes"
    )
    parser.add_argument("--json", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    sizes = [tuple(int(v) for v in s.split("x")) for s in args.sizes.split(",")]
    report: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "numpy": np.__version__,
        },
        "edgetpu_probe": probe_edgetpu().reason,
        "frames": args.frames,
        "threads": args.threads,
        "target_ms_per_detector": 20.0,
        "pi5_vision_stage_ms": 63.5,
        "sizes": {
            f"{w}x{h}": measure((w, h), args.frames, args.warmup, args.threads) for w, h in sizes
        },
    }
    write_result(report, args.json)


if __name__ == "__main__":
    main()
