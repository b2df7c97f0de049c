"""Vision encoders: a camera frame -> what is in it (objects with names, the hand and what it
points at, faces), the scene in words, an embedding and its LSH code.

:class:`DetectorVisionEncoder` (the default, :func:`make_default_encoder`) runs Coral's COCO
detector (:class:`~.objects.ObjectDetector`, Edge TPU or CPU) and MediaPipe's palm detector
(:class:`~.ssd.SsdDetector`) for pointing, optionally the face and pose detectors, plus a
cheap whole-frame descriptor for scene change. :class:`ModelVisionEncoder` runs a robot's own
classifier or embedding network instead. Both give a :class:`VisionResult`. No ROS imports.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import cv2
import numpy as np

from omniflow.core.scene import SeenObject, scene_pairs
from omniflow.core.semantic import LshEncoder
from omniflow.engines.vision.objects import ObjectDetector
from omniflow.engines.vision.runtime import EdgeTpuProbe, Observation, TfliteModel, check_rgb
from omniflow.engines.vision.ssd import MEDIAPIPE_DETECTORS, SsdDetector
from omniflow.errors import ConfigError, EngineError

#: MediaPipe detectors of the default encoder beside the objects: the palm, for pointing
#: (people come from the COCO detector; face and pose cost time for little: see
#: benchmarks/vision_encoder.py and docs/benchmarks.md).
DEFAULT_DETECTORS = ("hand",)


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
    ``timings_ms`` has one entry per stage plus ``total``. ``labels``: the object labels seen
    (COCO names such as ``cup``, ``dining table``, ``person``), most confident first, each
    once; ``pointed``: the label the hand points at (None: no hand, or no target);
    ``summary``: the frame as ``(kind, detail)`` pairs (:func:`omniflow.core.scene.scene_pairs`;
    :func:`omniflow.core.scene.describe` makes the words).
    """

    stamp_ns: int
    observations: tuple[Observation, ...]
    embedding: np.ndarray
    code: int
    scene_change: float
    timings_ms: dict[str, float] = field(default_factory=dict)
    labels: tuple[str, ...] = ()
    pointed: str | None = None
    summary: tuple[tuple[str, str | None], ...] = ()

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
        summary, pointed = _summarise(observations)
        labels = tuple(
            dict.fromkeys(o.label for o in observations if o.kind == "object" and o.label)
        )
        timings["total"] = (time.perf_counter() - start) * 1e3
        return VisionResult(
            int(stamp_ns),
            tuple(observations),
            embedding,
            code,
            change,
            timings,
            labels,
            pointed,
            summary,
        )

    def diagnostics(self) -> dict[str, object]:
        """Where the models run and why, and their error counts (empty: nothing to say)."""
        return {}

    @abc.abstractmethod
    def _observe(
        self, rgb: np.ndarray, timings: dict[str, float]
    ) -> tuple[list[Observation], np.ndarray, np.ndarray]:
        """(observations, embedding, scene descriptor) for a checked frame; record stage
        times in ``timings`` (ms)."""


class DetectorVisionEncoder(VisionEncoder):
    """The default encoder: the COCO object detector (``objects``; None: none) and MediaPipe
    detectors for observations, :func:`frame_descriptor` for the embedding (so the LSH code
    tracks the view, and similar frames get close codes)."""

    def __init__(
        self,
        detectors: Sequence[SsdDetector],
        lsh_seed: int = 0,
        objects: ObjectDetector | None = None,
    ) -> None:
        super().__init__(DESCRIPTOR_DIM, lsh_seed)
        self.detectors = list(detectors)
        self.objects = objects

    def diagnostics(self) -> dict[str, object]:
        return self.objects.diagnostics() if self.objects is not None else {}

    def _observe(
        self, rgb: np.ndarray, timings: dict[str, float]
    ) -> tuple[list[Observation], np.ndarray, np.ndarray]:
        observations: list[Observation] = []
        if self.objects is not None:
            t = time.perf_counter()
            observations.extend(self.objects.detect(rgb))
            timings["objects"] = (time.perf_counter() - t) * 1e3
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
    kinds: Sequence[str] = DEFAULT_DETECTORS,
    thresholds: dict[str, float] | None = None,
    num_threads: int = 2,
    lsh_seed: int = 0,
    *,
    objects: bool = True,
    accelerator: str = "auto",
    model_dir: str | Path = "",
    object_threshold: float = 0.4,
    retry_s: float = 30.0,
) -> DetectorVisionEncoder:
    """The default encoder: Coral's COCO detector (``objects``; on the Edge TPU or the CPU as
    ``accelerator`` says, files from ``model_dir`` or the installed ones) and the MediaPipe
    detectors ``kinds`` (CPU: they have no Edge TPU builds) from :data:`MEDIAPIPE_DETECTORS`;
    ``thresholds`` overrides their score thresholds (0..1)."""
    unknown = [k for k in kinds if k not in MEDIAPIPE_DETECTORS]
    if unknown:
        raise ConfigError(f"unknown detector(s) {unknown}; allowed: {sorted(MEDIAPIPE_DETECTORS)}")
    detectors = []
    for kind in kinds:
        spec = MEDIAPIPE_DETECTORS[kind]
        if thresholds and kind in thresholds:
            spec = replace(spec, threshold=float(thresholds[kind]))
        detectors.append(SsdDetector(spec, accelerator="cpu", num_threads=num_threads))
    detector = (
        ObjectDetector(model_dir, accelerator, num_threads, object_threshold, retry_s=retry_s)
        if objects
        else None
    )
    return DetectorVisionEncoder(detectors, lsh_seed, detector)


def _summarise(
    observations: Sequence[Observation],
) -> tuple[tuple[tuple[str, str | None], ...], str | None]:
    """The frame's (kind, detail) pairs and the pointed-at label (omniflow.core.scene)."""
    objects = [
        SeenObject(o.label, o.score, o.box)
        for o in observations
        if o.kind == "object" and o.label and o.box
    ]
    hand = next((o for o in observations if o.kind == "hand" and o.box), None)
    others = [
        (o.kind, o.region if o.value is None else str(o.value))
        for o in observations
        if o.kind not in ("object", "hand")
    ]
    return scene_pairs(objects, (hand.box, hand.ray, hand.region) if hand else None, others)


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
