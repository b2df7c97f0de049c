#!/usr/bin/env python3
"""Make ``test/data/samples/scene.avi``, the small sample video for tests and replay demos.

What it makes: 4 s of 320x240 MJPG video at 15 fps (60 frames). The first half shows
scikit-image's "astronaut" photograph, the second half its "coffee" photograph (a hard
scene cut at 2.0 s, frame 30), and a filled green disc with a dark rim, a stand-in for
a pointing fingertip, sweeps from left to right across the whole clip along a gentle
arc, so every frame differs from the last. The frame number is printed in the top-left
corner so a failing test can say which frame it saw.

The output is deterministic: no randomness, and OpenCV's built-in MJPEG writer
(``cv2.CAP_OPENCV_MJPEG``) instead of whatever FFmpeg build is installed, which is also
the writer that honours ``VIDEOWRITER_PROP_QUALITY``. The script refuses to leave a file
larger than 1.5 MB; lower ``--quality`` if a change of scene makes it grow.

Run it from anywhere, in an environment with opencv-python(-headless) and scikit-image::

    python scripts/make_sample_video.py                       # test/data/samples/scene.avi
    python scripts/make_sample_video.py --out /tmp/scene.avi --quality 60
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np
import skimage.data

WIDTH, HEIGHT = 320, 240
FPS = 15.0
SECONDS = 4.0
FRAME_COUNT = round(FPS * SECONDS)
CUT_FRAME = FRAME_COUNT // 2  # first frame of the second photograph
DEFAULT_QUALITY = 35  # JPEG quality 1-100; 35 gives about 1.3 MB with OpenCV's own encoder
MAX_BYTES = 1_500_000

MARKER_RADIUS = 9
MARKER_FILL = (60, 220, 60)  # BGR green: stands out on both photographs
MARKER_RIM = (20, 20, 20)

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "test" / "data" / "samples" / "scene.avi"


def fit_frame(rgb: np.ndarray, width: int = WIDTH, height: int = HEIGHT) -> np.ndarray:
    """Centre-crop an RGB photograph to width:height and scale it down, as BGR."""
    rows, cols = rgb.shape[:2]
    if cols * height > rows * width:  # too wide: trim the sides
        keep = rows * width // height
        left = (cols - keep) // 2
        rgb = rgb[:, left : left + keep]
    else:  # too tall: trim top and bottom
        keep = cols * height // width
        top = (rows - keep) // 2
        rgb = rgb[top : top + keep]
    resized = cv2.resize(rgb, (width, height), interpolation=cv2.INTER_AREA)
    return cv2.cvtColor(resized, cv2.COLOR_RGB2BGR)


def marker_position(index: int, count: int = FRAME_COUNT) -> tuple[int, int]:
    """Where the pointing marker is in frame ``index``: left to right on a shallow arc."""
    progress = index / (count - 1)
    margin = 2 * MARKER_RADIUS
    x = margin + progress * (WIDTH - 2 * margin)
    y = HEIGHT * 0.62 - 0.18 * HEIGHT * math.sin(math.pi * progress)
    return round(x), round(y)


def render_frames() -> Iterator[np.ndarray]:
    """Yield the FRAME_COUNT BGR frames of the scene."""
    scenes = (fit_frame(skimage.data.astronaut()), fit_frame(skimage.data.coffee()))
    for index in range(FRAME_COUNT):
        frame = scenes[0 if index < CUT_FRAME else 1].copy()
        centre = marker_position(index)
        cv2.circle(frame, centre, MARKER_RADIUS + 2, MARKER_RIM, -1, cv2.LINE_AA)
        cv2.circle(frame, centre, MARKER_RADIUS, MARKER_FILL, -1, cv2.LINE_AA)
        cv2.putText(
            frame, f"{index:02d}", (6, 16), cv2.FONT_HERSHEY_SIMPLEX, 0.45,
            (255, 255, 255), 1, cv2.LINE_AA,
        )  # fmt: skip
        yield frame


def write_video(path: Path, frames: Iterator[np.ndarray], quality: int) -> int:
    """Write ``frames`` as MJPG AVI at FPS; return how many were written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fourcc = cv2.VideoWriter_fourcc(*"MJPG")
    writer = cv2.VideoWriter(str(path), cv2.CAP_OPENCV_MJPEG, fourcc, FPS, (WIDTH, HEIGHT))
    if not writer.isOpened():
        raise OSError(f"OpenCV could not open {path} for writing")
    try:
        writer.set(cv2.VIDEOWRITER_PROP_QUALITY, quality)
        written = 0
        for frame in frames:
            writer.write(frame)
            written += 1
    finally:
        writer.release()
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"output file (default: {DEFAULT_OUT})"
    )
    parser.add_argument(
        "--quality",
        type=int,
        default=DEFAULT_QUALITY,
        choices=range(1, 101),
        metavar="1-100",
        help=f"JPEG quality of each frame (default: {DEFAULT_QUALITY})",
    )
    args = parser.parse_args(argv)

    written = write_video(args.out, render_frames(), args.quality)
    size = args.out.stat().st_size
    print(
        f"wrote {args.out}: {written} frames, {WIDTH}x{HEIGHT} @ {FPS:g} fps, MJPG "
        f"quality {args.quality}, {size / 1e6:.2f} MB"
    )
    if size > MAX_BYTES:
        print(
            f"error: {size} bytes is over the {MAX_BYTES}-byte budget; use a lower --quality",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
