#!/usr/bin/env python3
"""Cost of the vision encoder per frame on the CPU: objects, hands and the whole encode,
against the previous default (face + palm + pose detectors) measured in the same run.

Frames are real photographs from scikit-image (astronaut, coffee, chelsea, rocket), resized
to each frame size (default 320x240 and 640x480, what a camera node delivers) and cycled. For
each size and each TFLite thread count (``--threads``, default 1 and 2: the fusion node runs
vision on 2 cores beside audio), two encoders run frame by frame in turn, so both see the
same machine load:

- ``default``: :func:`~omniflow.engines.vision.make_default_encoder` as the fusion node
  builds it: Coral's COCO detector on the CPU (``objects``) + MediaPipe's palm detector
  (``hand``) + the frame descriptor and LSH code;
- ``previous``: the previous default, face + palm + pose detectors (no objects).

After ``--warmup`` frames, ``--frames`` frames are timed (the encoder's own stage times,
``time.perf_counter``). Reported: median and p90 in ms per stage and in total, and
``ratio_total`` = default / previous (medians). Target: vision encode (objects + hands)
<= 25 ms per frame on this machine; the source material's vision stage is 63.5 ms on a
Raspberry Pi 5 + Coral. Prints JSON; ``--json PATH`` also writes it. It does not fail on a
slow machine.

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
from _common import ratio, summary, write_result

from omniflow.engines.vision import make_default_encoder, probe_edgetpu

PHOTOS = ("astronaut", "coffee", "chelsea", "rocket")
# What each encoder's figures are made of (the encoder's stage names).
STAGES = {
    "default": ("objects", "hand", "descriptor", "total"),
    "previous": ("face", "hand", "person", "descriptor", "total"),
}


def measure(size: tuple[int, int], frames: int, warmup: int, threads: int) -> dict[str, Any]:
    """Both encoders on ``frames`` photographs resized to ``size`` (w, h), in turn."""
    encoders = {
        "default": make_default_encoder(num_threads=threads, accelerator="cpu"),
        "previous": make_default_encoder(
            ("face", "hand", "person"), num_threads=threads, objects=False
        ),
    }
    images = [
        cv2.resize(getattr(skimage.data, n)(), size, interpolation=cv2.INTER_AREA) for n in PHOTOS
    ]
    times: dict[str, dict[str, list[float]]] = {name: {} for name in encoders}
    for i in range(warmup + frames):
        for name, encoder in encoders.items():
            result = encoder.encode(images[i % len(images)], i + 1)
            if i >= warmup:
                for stage, ms in result.timings_ms.items():
                    times[name].setdefault(stage, []).append(ms)
    report: dict[str, Any] = {
        name: {
            stage: summary(times[name].get(stage, []), 2, suffix="_ms", count=None)
            for stage in STAGES[name]
        }
        for name in encoders
    }
    report["ratio_total"] = ratio(
        report["default"]["total"]["median_ms"], report["previous"]["total"]["median_ms"]
    )
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--threads", default="1,2", help="comma-separated TFLite thread counts")
    parser.add_argument(
        "--sizes", default="320x240,640x480", help="comma-separated WxH frame sizes"
    )
    parser.add_argument("--json", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    sizes = [tuple(int(v) for v in s.split("x")) for s in args.sizes.split(",")]
    threads = [int(t) for t in args.threads.split(",")]
    report: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "numpy": np.__version__,
        },
        "edgetpu_probe": probe_edgetpu().reason,
        "frames": args.frames,
        "target_ms": 25.0,
        "pi5_vision_stage_ms": 63.5,
        "sizes": {
            f"{w}x{h}": {
                f"threads_{n}": measure((w, h), args.frames, args.warmup, n) for n in threads
            }
            for w, h in sizes
        },
    }
    write_result(report, args.json)


if __name__ == "__main__":
    main()
