"""Vision: camera frames -> objects with names, the hand and what it points at, the scene in
words, an embedding and its LSH code, on the Coral Edge TPU or the CPU.

- :mod:`.runtime`: input checks, the Edge TPU probe and backend choice, :class:`TfliteModel`
  (``ai_edge_litert``, CPU or the ``libedgetpu`` delegate), :class:`Observation`.
- :mod:`.files`: model files named by a manifest under ``models/``, installed by ``make setup``.
- :mod:`.objects`: Coral's COCO detector (:class:`ObjectDetector`): pycoral, the LiteRT
  delegate or the CPU; a TPU failing mid-run falls back to the CPU and is retried.
- :mod:`.ssd`: MediaPipe's face, palm and pose detectors (the palm gives the pointing ray).
- :mod:`.encoder`: :class:`VisionEncoder` and :class:`VisionResult` (``labels``, ``pointed``,
  ``summary``); :func:`make_default_encoder` builds the default (objects + palm).

Library errors are translated into :class:`~omniflow.errors.EngineError`; bad frames raise
:class:`~omniflow.errors.ImageFormatError`. No ROS imports.
"""

from omniflow.engines.vision.encoder import (
    DEFAULT_DETECTORS,
    DESCRIPTOR_DIM,
    DetectorVisionEncoder,
    ModelVisionEncoder,
    VisionEncoder,
    VisionResult,
    frame_descriptor,
    make_default_encoder,
)
from omniflow.engines.vision.objects import COCO_MANIFEST, ObjectDetector, read_labels
from omniflow.engines.vision.runtime import (
    ACCELERATORS,
    EDGETPU_LIBRARY,
    BackendChoice,
    EdgeTpuProbe,
    Observation,
    TfliteModel,
    check_rgb,
    choose_backend,
    edgetpu_sibling,
    probe_edgetpu,
)
from omniflow.engines.vision.ssd import (
    MEDIAPIPE_DETECTORS,
    DetectorSpec,
    SsdDetector,
    mediapipe_model_path,
    pointing_region,
    ssd_anchors,
)

__all__ = [
    "ACCELERATORS",
    "COCO_MANIFEST",
    "DEFAULT_DETECTORS",
    "DESCRIPTOR_DIM",
    "EDGETPU_LIBRARY",
    "MEDIAPIPE_DETECTORS",
    "BackendChoice",
    "DetectorSpec",
    "DetectorVisionEncoder",
    "EdgeTpuProbe",
    "ModelVisionEncoder",
    "ObjectDetector",
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
    "read_labels",
    "ssd_anchors",
]
