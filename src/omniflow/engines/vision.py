"""Vision encoders: camera frames -> semantic observations, an embedding and its LSH code.

A :class:`VisionEncoder` turns one RGB frame (``uint8``, ``H x W x 3``) and its capture stamp
into a :class:`VisionResult`: what is in the frame (:class:`Observation`: face, hand and where
it points, person), a compact embedding whose 32-bit LSH code (:class:`LshEncoder`) lets the
fusion core associate frames with speech, and per-stage times. Two implementations:

- :class:`DetectorVisionEncoder` (the default, :func:`make_default_encoder`): real TFLite
  detectors shipped inside ``mediapipe==0.10.14`` (installed with ``--no-deps``; only its
  model files are used, never its Python code) - BlazeFace short range, palm detection, pose
  detection - plus a cheap whole-frame descriptor for scene change.
- :class:`ModelVisionEncoder`: a configurable robot model (a MobileNet/MobileViT-style
  classifier or embedding network, Edge TPU build where available): its output vector is the
  embedding, its arg-max a ``class`` observation.

Models run through :class:`TfliteModel` on ``ai_edge_litert`` (TFLite that works with numpy 2).
**Coral path**: :func:`probe_edgetpu` looks for ``libedgetpu.so.1`` (``ctypes.util`` then a
``CDLL`` load); if it loads and the ``*_edgetpu.tflite`` sibling of the configured model
exists, :func:`choose_backend` picks ``edgetpu`` and the model is opened with
``load_delegate('libedgetpu.so.1')``; any failure falls back to the CPU model with the reason
logged and kept in :attr:`TfliteModel.reason`.

Detector decoding is deliberately simplified: the SSD anchors are generated as MediaPipe's
``SsdAnchorsCalculator`` does (fixed anchor size, offset 0.5), scores are sigmoids of the
clipped logits, and each detector reports only its **best** anchor above a threshold (plus how
many anchors passed), with no non-maximum suppression and no landmark refinement. That answers
"is there a face / hand / person, and where?", which is what association needs; counting
several people or hands would need weighted NMS. The hand's pointing region is coarse: the
ray from the palm's wrist key point through its middle-finger knuckle, followed to the frame
border, names one of nine regions (``top-left`` .. ``bottom-right``).

Library errors are translated into :class:`~omniflow.errors.EngineError`; bad frames raise
:class:`~omniflow.errors.ImageFormatError`. No ROS imports.
"""

from __future__ import annotations

import abc
import ctypes
import ctypes.util
import importlib.util
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import cv2
import numpy as np

from omniflow.core.semantic import LshEncoder
from omniflow.errors import ConfigError, EngineError, ImageFormatError

__all__ = [
    "EDGETPU_LIBRARY",
    "BackendChoice",
    "DetectorSpec",
    "DESCRIPTOR_DIM",
    "DetectorVisionEncoder",
    "EdgeTpuProbe",
    "MEDIAPIPE_DETECTORS",
    "ModelVisionEncoder",
    "Observation",
    "SsdDetector",
    "TfliteModel",
    "VisionEncoder",
    "VisionResult",
    "check_rgb",
    "choose_backend",
    "edgetpu_sibling",
    "frame_descriptor",
    "make_default_encoder",
    "mediapipe_model_path",
    "pointing_region",
    "probe_edgetpu",
    "ssd_anchors",
]

_LOG = logging.getLogger(__name__)

#: The Edge TPU runtime's shared library (Coral's apt package ``libedgetpu1-std``/``-max``).
EDGETPU_LIBRARY = "libedgetpu.so.1"

Backend = Literal["cpu", "edgetpu"]


# ---------------------------------------------------------------------------- input checks
def check_rgb(rgb: object) -> np.ndarray:
    """Return ``rgb`` if it is a non-empty ``uint8`` ``H x W x 3`` array, else raise.

    Why: every encoder assumes this layout; a BGR/float/grey frame would give silently wrong
    detections, so it is rejected with a message that says what was received.
    """
    if not isinstance(rgb, np.ndarray):
        raise ImageFormatError(f"expected a numpy array, got {type(rgb).__name__}")
    if rgb.dtype != np.uint8:
        raise ImageFormatError(f"expected a uint8 RGB image, got dtype {rgb.dtype}")
    if rgb.ndim != 3 or rgb.shape[2] != 3:
        raise ImageFormatError(f"expected shape (H, W, 3), got {rgb.shape}")
    if rgb.shape[0] == 0 or rgb.shape[1] == 0:
        raise ImageFormatError(f"empty image: shape {rgb.shape}")
    return rgb


# ---------------------------------------------------------------------------- Coral probe
@dataclass(frozen=True)
class EdgeTpuProbe:
    """Whether the Edge TPU runtime library can be loaded here, and why (not)."""

    available: bool
    library: str | None
    reason: str


def probe_edgetpu(
    find_library: Callable[[str], str | None] = ctypes.util.find_library,
    load: Callable[[str], object] = ctypes.CDLL,
) -> EdgeTpuProbe:
    """Look for ``libedgetpu.so.1`` without touching the TFLite runtime.

    ``find_library('edgetpu')`` finds it through the linker cache; when that fails the exact
    soname is still tried with ``CDLL`` (LD_LIBRARY_PATH installs). The functions are
    parameters so the decision is testable on machines with and without the library.
    """
    found = find_library("edgetpu")
    candidates = [c for c in (found, EDGETPU_LIBRARY) if c]
    errors: list[str] = []
    for name in dict.fromkeys(candidates):
        try:
            load(name)
        except OSError as err:
            errors.append(f"{name}: {err}")
            continue
        return EdgeTpuProbe(True, name, f"{name} loaded")
    return EdgeTpuProbe(False, None, f"{EDGETPU_LIBRARY} not loadable ({'; '.join(errors)})")


def edgetpu_sibling(model_path: str | Path) -> Path:
    """``foo.tflite`` -> ``foo_edgetpu.tflite`` (the Edge TPU compiler's naming); a path that
    already ends in ``_edgetpu.tflite`` is returned unchanged."""
    path = Path(model_path)
    if path.stem.endswith("_edgetpu"):
        return path
    return path.with_name(f"{path.stem}_edgetpu{path.suffix}")


@dataclass(frozen=True)
class BackendChoice:
    """Which backend and model file to load, and the reason (logged by the caller)."""

    backend: Backend
    model_path: Path
    reason: str


def choose_backend(
    model_path: str | Path,
    accelerator: str = "auto",
    probe: EdgeTpuProbe | None = None,
    exists: Callable[[Path], bool] = Path.is_file,
) -> BackendChoice:
    """Decide between the Edge TPU and the CPU for ``model_path`` (a pure function).

    ``accelerator``: ``cpu`` (never probe), ``auto`` (Edge TPU when the library loads and the
    ``*_edgetpu.tflite`` sibling exists, else CPU) or ``edgetpu`` (same, but a missing piece is
    an :class:`EngineError`, for robots where falling back would hide a broken install).
    """
    if accelerator not in ("auto", "cpu", "edgetpu"):
        raise ConfigError(f"accelerator must be one of auto, cpu, edgetpu; got {accelerator!r}")
    cpu_path = Path(model_path)
    if accelerator == "cpu":
        return BackendChoice("cpu", cpu_path, "accelerator=cpu")
    probe = probe if probe is not None else probe_edgetpu()
    tpu_path = edgetpu_sibling(cpu_path)
    if not probe.available:
        reason = f"falling back to the CPU: {probe.reason}"
    elif not exists(tpu_path):
        reason = f"falling back to the CPU: no Edge TPU model {tpu_path}"
    else:
        return BackendChoice("edgetpu", tpu_path, f"Edge TPU: {probe.reason}, model {tpu_path}")
    if accelerator == "edgetpu":
        missing = reason.removeprefix("falling back to the CPU: ")
        raise EngineError(f"accelerator=edgetpu but {missing}")
    return BackendChoice("cpu", cpu_path, reason)


# ---------------------------------------------------------------------------- TFLite runner
class TfliteModel:
    """One TFLite model on ``ai_edge_litert``, on the Edge TPU when :func:`choose_backend` says
    so, else on the CPU (XNNPACK, ``num_threads``).

    :meth:`run` takes a float32 batch in the model's input shape, quantises it when the model
    wants integers, and returns every output dequantised to float32 (so callers never handle
    quantisation). ``backend`` and ``reason`` say what was loaded and why.
    """

    def __init__(
        self,
        model_path: str | Path,
        accelerator: str = "auto",
        num_threads: int = 2,
        probe: EdgeTpuProbe | None = None,
    ) -> None:
        path = Path(model_path)
        if not path.is_file():
            raise EngineError(f"vision model not found: {path}")
        if num_threads < 1:
            raise ConfigError(f"num_threads must be >= 1, got {num_threads}")
        try:
            from ai_edge_litert.interpreter import Interpreter, load_delegate
        except ImportError as err:  # pragma: no cover - the dependency is in runtime.txt
            raise EngineError("ai-edge-litert is not installed (requirements/runtime.txt)") from err
        choice = choose_backend(path, accelerator, probe)
        self.interpreter: Any = None
        if choice.backend == "edgetpu":
            try:
                delegate = load_delegate(EDGETPU_LIBRARY)
                self.interpreter = Interpreter(
                    model_path=str(choice.model_path), experimental_delegates=[delegate]
                )
                self.interpreter.allocate_tensors()
            except (ValueError, RuntimeError, OSError) as err:
                if accelerator == "edgetpu":
                    raise EngineError(
                        f"Edge TPU delegate failed for {choice.model_path}: {err}"
                    ) from err
                choice = BackendChoice(
                    "cpu", path, f"falling back to the CPU: Edge TPU delegate failed: {err}"
                )
                self.interpreter = None
        if self.interpreter is None:
            try:
                self.interpreter = Interpreter(model_path=str(path), num_threads=num_threads)
                self.interpreter.allocate_tensors()
            except (ValueError, RuntimeError) as err:
                raise EngineError(f"cannot load TFLite model {path}: {err}") from err
        self.backend: Backend = choice.backend
        self.reason = choice.reason
        self.model_path = choice.model_path
        # accelerator=cpu is a configured choice; otherwise the decision (and any fallback's
        # reason) is worth a line in the log of every start.
        (_LOG.debug if accelerator == "cpu" else _LOG.info)(
            "vision model %s on %s (%s)", path.name, choice.backend, choice.reason
        )
        self._input = self.interpreter.get_input_details()[0]
        self._outputs = self.interpreter.get_output_details()
        self.input_shape: tuple[int, ...] = tuple(int(d) for d in self._input["shape"])
        self.output_shapes: list[tuple[int, ...]] = [
            tuple(int(d) for d in out["shape"]) for out in self._outputs
        ]

    def run(self, batch: np.ndarray) -> list[np.ndarray]:
        """Run one inference; ``batch`` is float32 in the input's shape (before quantisation)."""
        detail = self._input
        dtype = detail["dtype"]
        if np.issubdtype(dtype, np.integer):
            scale, zero = detail["quantization"]
            info = np.iinfo(dtype)
            q = np.round(batch / (scale or 1.0) + zero)
            batch = np.clip(q, info.min, info.max).astype(dtype)
        else:
            batch = batch.astype(dtype, copy=False)
        try:
            self.interpreter.set_tensor(detail["index"], batch)
            self.interpreter.invoke()
            outs = []
            for out in self._outputs:
                value = self.interpreter.get_tensor(out["index"])
                if np.issubdtype(value.dtype, np.integer):
                    scale, zero = out["quantization"]
                    value = (value.astype(np.float32) - zero) * (scale or 1.0)
                outs.append(value.astype(np.float32, copy=False))
        except (ValueError, RuntimeError) as err:
            raise EngineError(f"inference failed in {self.model_path.name}: {err}") from err
        return outs


# ---------------------------------------------------------------------------- SSD detectors
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


@dataclass(frozen=True)
class Observation:
    """One semantic observation of a frame; coordinates are normalised to the frame (0..1).

    ``box`` is (x0, y0, x1, y1); ``point`` a representative point (face centre, palm centre,
    hips); ``region`` a coarse name (hand: where it points); ``count`` how many anchors passed
    the threshold (several can belong to one object: no NMS).
    """

    kind: str
    score: float
    box: tuple[float, float, float, float] | None = None
    point: tuple[float, float] | None = None
    region: str | None = None
    count: int = 1
    value: int | None = None


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
            return Observation(kind, score, box, centre, region, count)
        if kind == "person":
            # pose key points: 0 mid-hip, 1 a point on the circle enclosing the whole body.
            (hx, hy), (sx, sy) = points[0], points[1]
            r = float(np.hypot(sx - hx, sy - hy))
            body = (max(0.0, hx - r), max(0.0, hy - r), min(1.0, hx + r), min(1.0, hy + r))
            return Observation(kind, score, body, (hx, hy), None, count)
        centre = ((box[0] + box[2]) / 2, (box[1] + box[3]) / 2)
        return Observation(kind, score, box, centre, None, count)


# ---------------------------------------------------------------------------- descriptor
_THUMB = 8
_HIST_BINS = 4
DESCRIPTOR_DIM = _THUMB * _THUMB + _HIST_BINS**3


def frame_descriptor(rgb: np.ndarray) -> np.ndarray:
    """A cheap whole-frame descriptor: an 8 x 8 grey thumbnail and a 4 x 4 x 4 RGB histogram.

    Each half is centred (the thumbnail on its own mean, so a brighter frame looks the same;
    the square-rooted histogram on the uniform histogram) and scaled to unit length, then the
    two are concatenated (128 float32). Centring matters: sign-random-projection codes of
    all-positive vectors all look alike. Similar frames give nearby vectors, hence nearby LSH
    codes; the cosine between consecutive descriptors is the scene-change signal.
    """
    rgb = check_rgb(rgb)
    grey = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
    thumb = cv2.resize(grey, (_THUMB, _THUMB), interpolation=cv2.INTER_AREA)
    thumb = thumb.astype(np.float32).ravel()
    thumb -= thumb.mean()
    small = cv2.resize(rgb, (64, 48), interpolation=cv2.INTER_AREA)
    q = (small >> 6).reshape(-1, 3).astype(np.int32)  # 4 bins per channel
    idx = (q[:, 0] * _HIST_BINS + q[:, 1]) * _HIST_BINS + q[:, 2]
    hist = np.bincount(idx, minlength=_HIST_BINS**3).astype(np.float32)
    hist = np.sqrt(hist / hist.sum()) - np.float32(np.sqrt(1.0 / hist.size))
    parts = []
    for part in (thumb, hist):
        norm = float(np.linalg.norm(part))
        parts.append(part / norm if norm > 1e-9 else part)
    return np.concatenate(parts).astype(np.float32)


# ---------------------------------------------------------------------------- encoders
@dataclass(frozen=True)
class VisionResult:
    """What an encoder made of one frame.

    ``embedding`` is what the LSH ``code`` hashes; ``scene_change`` is 1 - cosine between this
    frame's descriptor and the previous frame's (0 = same view; 1.0 for the first frame);
    ``timings_ms`` has one entry per stage plus ``total``.
    """

    stamp_ns: int
    observations: tuple[Observation, ...]
    embedding: np.ndarray
    code: int
    scene_change: float
    timings_ms: dict[str, float] = field(default_factory=dict)

    def find(self, kind: str) -> Observation | None:
        """The observation of ``kind`` (``face``, ``hand``, ``person``, ``class``) or None."""
        return next((o for o in self.observations if o.kind == kind), None)


class VisionEncoder(abc.ABC):
    """Frame -> :class:`VisionResult`. Subclasses implement :meth:`_observe`.

    Not thread-safe (TFLite interpreters are not): one encoder per worker.
    """

    def __init__(self, embedding_dim: int, lsh_seed: int = 0) -> None:
        self.lsh = LshEncoder(embedding_dim, seed=lsh_seed)
        self._previous: np.ndarray | None = None

    def encode(self, rgb: np.ndarray, stamp_ns: int) -> VisionResult:
        """Encode one ``uint8`` RGB frame captured at ``stamp_ns`` (stream time, ns)."""
        rgb = check_rgb(rgb)
        if isinstance(stamp_ns, bool) or not isinstance(stamp_ns, (int, np.integer)):
            raise ConfigError(f"stamp_ns must be an integer, got {stamp_ns!r}")
        timings: dict[str, float] = {}
        start = time.perf_counter()
        observations, embedding, descriptor = self._observe(rgb, timings)
        t = time.perf_counter()
        code = self.lsh.encode(embedding)
        timings["lsh"] = (time.perf_counter() - t) * 1e3
        if self._previous is None:
            change = 1.0
        else:
            denom = float(np.linalg.norm(descriptor) * np.linalg.norm(self._previous))
            cos = float(descriptor @ self._previous) / denom if denom > 1e-12 else 0.0
            change = float(np.clip(1.0 - cos, 0.0, 2.0))
        self._previous = descriptor
        timings["total"] = (time.perf_counter() - start) * 1e3
        return VisionResult(int(stamp_ns), tuple(observations), embedding, code, change, timings)

    @abc.abstractmethod
    def _observe(
        self, rgb: np.ndarray, timings: dict[str, float]
    ) -> tuple[list[Observation], np.ndarray, np.ndarray]:
        """(observations, embedding, scene descriptor) for a checked frame; record stage
        times in ``timings`` (ms)."""


class DetectorVisionEncoder(VisionEncoder):
    """The default encoder: MediaPipe detectors for observations, :func:`frame_descriptor` for
    the embedding (so the LSH code tracks the view, and similar frames get close codes)."""

    def __init__(self, detectors: Sequence[SsdDetector], lsh_seed: int = 0) -> None:
        super().__init__(DESCRIPTOR_DIM, lsh_seed)
        self.detectors = list(detectors)

    def _observe(
        self, rgb: np.ndarray, timings: dict[str, float]
    ) -> tuple[list[Observation], np.ndarray, np.ndarray]:
        observations = []
        for det in self.detectors:
            t = time.perf_counter()
            obs = det.detect(rgb)
            timings[det.spec.name] = (time.perf_counter() - t) * 1e3
            if obs is not None:
                observations.append(obs)
        t = time.perf_counter()
        descriptor = frame_descriptor(rgb)
        timings["descriptor"] = (time.perf_counter() - t) * 1e3
        return observations, descriptor, descriptor


def make_default_encoder(
    kinds: Sequence[str] = ("face", "hand", "person"),
    thresholds: dict[str, float] | None = None,
    num_threads: int = 2,
    lsh_seed: int = 0,
) -> DetectorVisionEncoder:
    """The default encoder from mediapipe's bundled detectors (CPU: they have no Edge TPU
    builds). ``kinds`` picks detectors from :data:`MEDIAPIPE_DETECTORS`; ``thresholds``
    overrides their score thresholds (0..1)."""
    unknown = [k for k in kinds if k not in MEDIAPIPE_DETECTORS]
    if unknown:
        raise ConfigError(f"unknown detector(s) {unknown}; allowed: {sorted(MEDIAPIPE_DETECTORS)}")
    detectors = []
    for kind in kinds:
        spec = MEDIAPIPE_DETECTORS[kind]
        if thresholds and kind in thresholds:
            spec = replace(spec, threshold=float(thresholds[kind]))
        detectors.append(SsdDetector(spec, accelerator="cpu", num_threads=num_threads))
    return DetectorVisionEncoder(detectors, lsh_seed)


class ModelVisionEncoder(VisionEncoder):
    """A robot's own model (MobileNet/MobileViT-style classifier or embedding network).

    The frame is resized (no letterbox) to the model input, scaled to ``input_range``
    (MobileNet float models: -1..1; quantised models get the same floats, quantised by
    :class:`TfliteModel`), and output ``output_index`` flattened is the embedding. A ``class``
    observation carries its arg-max (``value``) and that entry as ``score``. On a Coral the
    ``*_edgetpu.tflite`` sibling is used when ``accelerator`` allows it.
    """

    def __init__(
        self,
        model_path: str | Path,
        accelerator: str = "auto",
        input_range: tuple[float, float] = (-1.0, 1.0),
        output_index: int = 0,
        num_threads: int = 2,
        lsh_seed: int = 0,
        probe: EdgeTpuProbe | None = None,
    ) -> None:
        self.model = TfliteModel(model_path, accelerator, num_threads, probe)
        shape = self.model.input_shape
        if len(shape) != 4 or shape[0] != 1 or shape[3] != 3:
            raise EngineError(f"{model_path}: expected a (1, H, W, 3) image input, got {shape}")
        outputs = self.model.output_shapes
        if not 0 <= output_index < len(outputs):
            raise ConfigError(
                f"output_index must be in [0, {len(outputs) - 1}], got {output_index}"
            )
        self.output_index = output_index
        dim = int(np.prod(outputs[output_index]))
        super().__init__(dim, lsh_seed)
        lo, hi = input_range
        self._scale, self._offset = (hi - lo) / 255.0, lo

    def _observe(
        self, rgb: np.ndarray, timings: dict[str, float]
    ) -> tuple[list[Observation], np.ndarray, np.ndarray]:
        t = time.perf_counter()
        _, h, w, _ = self.model.input_shape
        resized = cv2.resize(rgb, (w, h), interpolation=cv2.INTER_AREA)
        batch = (resized.astype(np.float32) * self._scale + self._offset)[None]
        vector = self.model.run(batch)[self.output_index].ravel()
        timings["model"] = (time.perf_counter() - t) * 1e3
        top = int(np.argmax(vector))
        obs = Observation("class", float(vector[top]), value=top)
        return [obs], vector, vector
