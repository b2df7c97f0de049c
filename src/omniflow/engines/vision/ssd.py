"""MediaPipe's SSD detectors (face, palm, pose) on :class:`~.runtime.TfliteModel`.

The models are the ``.tflite`` files shipped inside ``mediapipe==0.10.14`` (installed with
``--no-deps``; only its model files are used, never its Python code). Decoding is
deliberately simplified: the SSD anchors are generated as MediaPipe's ``SsdAnchorsCalculator``
does (fixed anchor size, offset 0.5), scores are sigmoids of the clipped logits, and each
detector reports only its **best** anchor above a threshold (plus how many anchors passed),
with no non-maximum suppression and no landmark refinement. That answers "is there a face /
hand / person, and where?". The hand's pointing direction is the ray from the palm's wrist
key point through its middle-finger knuckle (:attr:`Observation.ray`); followed to the frame
border it names one of nine regions (``top-left`` .. ``bottom-right``). No ROS imports.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from omniflow.engines.vision.runtime import Observation, TfliteModel, check_rgb
from omniflow.errors import ConfigError, EngineError


def ssd_anchors(
    input_size: int, strides: Sequence[int], anchors_per_stride: Sequence[int]
) -> np.ndarray:
    """Anchor centres (N x 2, normalised x, y) in MediaPipe's ``SsdAnchorsCalculator`` order.

    With ``fixed_anchor_size`` every anchor is 1 x 1, so only the centres and their order
    matter: consecutive layers of equal stride share one grid; for each cell (row-major) its
    anchors follow each other. ``anchors_per_stride[i]`` is the total for the i-th distinct
    stride (2 per layer: aspect ratio 1 and the interpolated scale).
    """
    centres: list[np.ndarray] = []
    for stride, count in zip(strides, anchors_per_stride, strict=True):
        size = int(np.ceil(input_size / stride))
        ys, xs = np.mgrid[0:size, 0:size]
        grid = np.stack([(xs + 0.5) / size, (ys + 0.5) / size], axis=-1).reshape(-1, 2)
        centres.append(np.repeat(grid, count, axis=0))
    return np.concatenate(centres).astype(np.float32)


@dataclass(frozen=True)
class DetectorSpec:
    """A MediaPipe SSD detector: model file, input range, anchors and how to read its output."""

    name: str
    model: str  # path relative to the mediapipe package directory
    input_size: int
    input_range: tuple[float, float]
    strides: tuple[int, ...]
    anchors_per_stride: tuple[int, ...]
    num_keypoints: int
    threshold: float = 0.5


#: The detectors the default encoder runs, with the anchor settings of their MediaPipe graphs.
#: Thresholds: MediaPipe uses 0.5 everywhere, but it confirms palms with the hand-landmark
#: model and faces with tracking; a single detector pass needs stricter ones. On scikit-image's
#: photographs the cat's face scores 0.58 as a human face and textures (Hubble field, retina)
#: 0.51-0.61 as palms, while the astronaut's and the cameraman's faces score 0.92 and 0.79.
MEDIAPIPE_DETECTORS: dict[str, DetectorSpec] = {
    "face": DetectorSpec(
        "face",
        "modules/face_detection/face_detection_short_range.tflite",
        128,
        (-1.0, 1.0),
        (8, 16),
        (2, 6),
        6,
        threshold=0.65,
    ),
    "hand": DetectorSpec(
        "hand",
        "modules/palm_detection/palm_detection_lite.tflite",
        192,
        (0.0, 1.0),
        (8, 16),
        (2, 6),
        7,
        threshold=0.7,
    ),
    "person": DetectorSpec(
        "person",
        "modules/pose_detection/pose_detection.tflite",
        224,
        (-1.0, 1.0),
        (8, 16, 32),
        (2, 2, 6),
        4,
    ),
}


def mediapipe_model_path(relative: str) -> Path:
    """Absolute path of a model file inside the installed ``mediapipe`` package.

    The package is located without importing it (its Python code needs dependencies we do not
    install); a missing package or file is an :class:`EngineError` naming the path.
    """
    spec = importlib.util.find_spec("mediapipe")
    if spec is None or not spec.submodule_search_locations:
        raise EngineError(
            "mediapipe is not installed: pip install --no-deps -r "
            "requirements/no-deps.txt (it carries the detector models)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / relative
    if not path.is_file():
        raise EngineError(f"vision model not found: {path}")
    return path


def _letterbox(rgb: np.ndarray, size: int) -> tuple[np.ndarray, float, float, float]:
    """Pad ``rgb`` to a centred square (black borders, like MediaPipe's keep-aspect-ratio
    transform) and resize to ``size``; returns the image, the square's side in pixels and the
    x, y padding in pixels (to map detections back)."""
    h, w = rgb.shape[:2]
    side = max(h, w)
    pad_x, pad_y = (side - w) / 2.0, (side - h) / 2.0
    canvas = np.zeros((side, side, 3), np.uint8)
    canvas[int(pad_y) : int(pad_y) + h, int(pad_x) : int(pad_x) + w] = rgb
    interp = cv2.INTER_AREA if side > size else cv2.INTER_LINEAR
    return cv2.resize(canvas, (size, size), interpolation=interp), float(side), pad_x, pad_y


_REGION_ROWS = ("top", "middle", "bottom")
_REGION_COLS = ("left", "center", "right")


def pointing_region(origin: tuple[float, float], toward: tuple[float, float]) -> str:
    """Name the 3 x 3 frame region where the ray ``origin`` -> ``toward`` (normalised frame
    coordinates) leaves the frame, e.g. ``top-left``; ``middle-center`` for a zero vector.

    Why: a pointing hand refers to something along its direction, not at the hand; the cell
    where that ray meets the border is a cheap, stable token for "pointing up-left".
    """
    ox, oy = origin
    dx, dy = toward[0] - ox, toward[1] - oy
    norm = float(np.hypot(dx, dy))
    if norm < 1e-6:
        return "middle-center"
    dx, dy = dx / norm, dy / norm
    ts = []
    for d, o in ((dx, ox), (dy, oy)):
        if d > 1e-9:
            ts.append((1.0 - o) / d)
        elif d < -1e-9:
            ts.append(-o / d)
    t = max(0.0, min(ts))
    x, y = float(np.clip(ox + t * dx, 0, 1)), float(np.clip(oy + t * dy, 0, 1))
    col = _REGION_COLS[min(2, int(x * 3))]
    row = _REGION_ROWS[min(2, int(y * 3))]
    return f"{row}-{col}"


class SsdDetector:
    """A MediaPipe SSD detector (face, palm or pose) on a :class:`TfliteModel`.

    :meth:`detect` letterboxes the frame to the model's square input, runs it, decodes the
    best anchor above ``spec.threshold`` (see the module docstring for the simplification) and
    returns one :class:`Observation` or None.
    """

    def __init__(
        self,
        spec: DetectorSpec,
        model_path: str | Path | None = None,
        accelerator: str = "cpu",
        num_threads: int = 2,
    ) -> None:
        if not 0.0 < spec.threshold < 1.0:
            raise ConfigError(f"{spec.name} threshold must be in (0, 1), got {spec.threshold}")
        self.spec = spec
        path = Path(model_path) if model_path is not None else mediapipe_model_path(spec.model)
        self.model = TfliteModel(path, accelerator=accelerator, num_threads=num_threads)
        expected = (1, spec.input_size, spec.input_size, 3)
        if self.model.input_shape != expected:
            raise EngineError(
                f"{path} has input {self.model.input_shape}, the {spec.name} "
                f"detector expects {expected}"
            )
        self.anchors = ssd_anchors(spec.input_size, spec.strides, spec.anchors_per_stride)
        lo, hi = spec.input_range
        self._scale = (hi - lo) / 255.0
        self._offset = lo
        logit = float(np.log(spec.threshold / (1.0 - spec.threshold)))
        self._logit_threshold = logit

    def detect(self, rgb: np.ndarray) -> Observation | None:
        """The best detection in ``rgb`` (checked), or None when no anchor passes."""
        rgb = check_rgb(rgb)
        size = self.spec.input_size
        square, side, pad_x, pad_y = _letterbox(rgb, size)
        batch = (square.astype(np.float32) * self._scale + self._offset)[None]
        outputs = self.model.run(batch)
        boxes, scores = self._split(outputs)
        logits = np.clip(scores, -100.0, 100.0)
        passed = logits > self._logit_threshold
        count = int(passed.sum())
        if count == 0:
            return None
        best = int(np.argmax(logits))
        score = float(1.0 / (1.0 + np.exp(-logits[best])))
        raw = boxes[best] / size
        ax, ay = self.anchors[best]
        cx, cy, bw, bh = raw[0] + ax, raw[1] + ay, raw[2], raw[3]
        kps = raw[4 : 4 + 2 * self.spec.num_keypoints].reshape(-1, 2) + (ax, ay)
        h, w = rgb.shape[:2]

        def to_frame(x: float, y: float) -> tuple[float, float]:
            return (
                float(np.clip((x * side - pad_x) / w, 0, 1)),
                float(np.clip((y * side - pad_y) / h, 0, 1)),
            )

        x0, y0 = to_frame(cx - bw / 2, cy - bh / 2)
        x1, y1 = to_frame(cx + bw / 2, cy + bh / 2)
        points = [to_frame(float(x), float(y)) for x, y in kps]
        return self._observation(score, (x0, y0, x1, y1), points, count)

    def _split(self, outputs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(N x K box regressors, N score logits) whatever the output order."""
        n = len(self.anchors)
        boxes = scores = None
        for out in outputs:
            flat = out.reshape(n, -1)
            if flat.shape[1] == 1:
                scores = flat[:, 0]
            else:
                boxes = flat
        if boxes is None or scores is None:
            raise EngineError(
                f"{self.spec.name} model outputs {[o.shape for o in outputs]} "
                f"do not match {n} anchors"
            )
        return boxes, scores

    def _observation(
        self,
        score: float,
        box: tuple[float, float, float, float],
        points: list[tuple[float, float]],
        count: int,
    ) -> Observation:
        kind = self.spec.name
        if kind == "hand":
            # palm key points: 0 wrist, 2 middle-finger knuckle; the palm centre is the box's.
            centre = ((box[0] + box[2]) / 2, (box[1] + box[3]) / 2)
            region = pointing_region(points[0], points[2])
            ray = (points[0], points[2])
            return Observation(kind, score, box, centre, region, count, ray=ray)
        if kind == "person":
            # pose key points: 0 mid-hip, 1 a point on the circle enclosing the whole body.
            (hx, hy), (sx, sy) = points[0], points[1]
            r = float(np.hypot(sx - hx, sy - hy))
            body = (max(0.0, hx - r), max(0.0, hy - r), min(1.0, hx + r), min(1.0, hy + r))
            return Observation(kind, score, body, (hx, hy), None, count)
        centre = ((box[0] + box[2]) / 2, (box[1] + box[3]) / 2)
        return Observation(kind, score, box, centre, None, count)
