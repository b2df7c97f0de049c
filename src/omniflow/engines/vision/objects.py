"""Objects with names: Coral's COCO detector (SSD MobileNet v2, quantised, with the TFLite
detection post-processing) on the Edge TPU or the CPU.

:class:`ObjectDetector` resizes a frame to the model's 300 x 300 input and reports each
object above a score threshold as an :class:`~.runtime.Observation` of kind ``object`` with
its COCO label (``cup``, ``dining table``, ``cat``, ``person``), score and box.

Where it runs (``accelerator``, :data:`~.runtime.ACCELERATORS`):

- ``auto``: Google's ``pycoral`` API when it imports and lists an Edge TPU
  (``pycoral.utils.edgetpu.list_edge_tpus``/``make_interpreter``,
  ``pycoral.adapters.common.set_input``/``input_size``, ``pycoral.adapters.detect.get_objects``);
  else ``ai_edge_litert`` with the ``libedgetpu.so.1`` delegate (:func:`~.runtime.probe_edgetpu`);
  else the CPU model. Each step's reason is kept in :attr:`ObjectDetector.reason` and logged.
- ``edgetpu``: the same, but no Edge TPU at start is an EngineError (a robot whose Coral
  must be used); ``cpu``: the CPU model only.

An Edge TPU that fails mid-run (an exception from invoke: unplugged) is replaced by the CPU
model within the same frame; the TPU is tried again every ``retry_s`` seconds. Failures,
retries and recoveries are counted (:meth:`ObjectDetector.diagnostics`). Not thread-safe.
No ROS imports.
"""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

import cv2
import numpy as np

from omniflow.engines.vision.files import installed_manifest, model_files
from omniflow.engines.vision.runtime import (
    ACCELERATORS,
    EdgeTpuProbe,
    Observation,
    TfliteModel,
    check_rgb,
    probe_edgetpu,
)
from omniflow.errors import ConfigError, EngineError

__all__ = ["COCO_MANIFEST", "ObjectDetector", "read_labels"]

_LOG = logging.getLogger(__name__)

#: The manifest of the COCO detector's files (``models/coco_detector.toml``).
COCO_MANIFEST = "coco_detector.toml"

# What a failing Edge TPU raises from invoke (the runtime's errors, and ours around them).
_TPU_ERRORS = (RuntimeError, ValueError, OSError, EngineError)


def read_labels(path: Path) -> dict[int, str]:
    """``coco_labels.txt`` (``<id>  <name>`` per line; ids have gaps) -> {id: name}."""
    labels = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise EngineError(f"cannot read the labels {path}: {err}") from err
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        key, _, name = line.strip().partition(" ")
        if not key.isdigit() or not name.strip():
            raise EngineError(f"{path} line {number}: expected '<id> <name>', got {line!r}")
        labels[int(key)] = name.strip()
    return labels


@dataclass(frozen=True)
class _Raw:
    """One inference: boxes (N x 4: x0, y0, x1, y1 normalised), class ids and scores."""

    boxes: np.ndarray
    classes: np.ndarray
    scores: np.ndarray


class _Runner(Protocol):
    name: str

    def run(self, square: np.ndarray) -> _Raw: ...


class _LiteRtRunner:
    """The detector on ``ai_edge_litert`` (CPU, or the Edge TPU model through the delegate)."""

    def __init__(self, model: TfliteModel) -> None:
        self.model = model
        self.name = model.backend  # "cpu" or "edgetpu"

    def run(self, square: np.ndarray) -> _Raw:
        outputs = self.model.run(square[None])
        if len(outputs) != 4:
            raise EngineError(
                f"{self.model.model_path.name}: expected the 4 outputs of the detection "
                f"post-processing (boxes, classes, scores, count), got {len(outputs)}"
            )
        boxes, classes, scores, count = (o.reshape(o.shape[1:]) for o in outputs)
        n = int(count.reshape(-1)[0]) if count.size else len(scores)
        return _Raw(boxes[:n, [1, 0, 3, 2]], classes[:n], scores[:n])


class _PycoralRunner:
    """The detector through Google's pycoral API (``make_interpreter``, ``set_input``,
    ``get_objects``), exactly the documented calls."""

    name = "pycoral"

    def __init__(self, modules: dict[str, ModuleType], model_path: Path) -> None:
        self._common, self._detect = modules["common"], modules["detect"]
        self.interpreter = modules["edgetpu"].make_interpreter(str(model_path))
        self.interpreter.allocate_tensors()
        self._width, self._height = self._common.input_size(self.interpreter)

    def run(self, square: np.ndarray) -> _Raw:
        self._common.set_input(self.interpreter, square)
        self.interpreter.invoke()
        objects = self._detect.get_objects(self.interpreter, score_threshold=0.0)
        boxes = np.array(
            [
                (
                    o.bbox.xmin / self._width,
                    o.bbox.ymin / self._height,
                    o.bbox.xmax / self._width,
                    o.bbox.ymax / self._height,
                )
                for o in objects
            ],
            np.float32,
        ).reshape(-1, 4)
        classes = np.array([o.id for o in objects], np.float32)
        scores = np.array([o.score for o in objects], np.float32)
        return _Raw(boxes, classes, scores)


def _import_pycoral(
    import_module: Callable[[str], ModuleType],
) -> tuple[dict[str, ModuleType] | None, str]:
    try:
        return {
            "edgetpu": import_module("pycoral.utils.edgetpu"),
            "common": import_module("pycoral.adapters.common"),
            "detect": import_module("pycoral.adapters.detect"),
        }, "pycoral imported"
    except ImportError as err:
        return None, f"pycoral not importable ({err})"


class ObjectDetector:
    """COCO objects in a frame, on the Edge TPU or the CPU (see the module docstring).

    ``model_dir`` empty: the files ``make setup`` installed (checked against
    ``models/coco_detector.toml``); else a folder holding the manifest's file names.
    ``threshold``: lowest score reported; ``max_objects``: most objects per frame (most
    confident first). ``probe``, ``import_module``, ``load_delegate``, ``make_interpreter`` (the
    Edge TPU model's interpreter) and ``clock`` replace the real ones (tests on machines
    without a Coral).
    """

    def __init__(
        self,
        model_dir: str | Path = "",
        accelerator: str = "auto",
        num_threads: int = 2,
        threshold: float = 0.4,
        max_objects: int = 6,
        retry_s: float = 30.0,
        *,
        probe: EdgeTpuProbe | None = None,
        import_module: Callable[[str], ModuleType] = importlib.import_module,
        load_delegate: Callable[[str], object] | None = None,
        make_interpreter: Callable[..., Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if accelerator not in ACCELERATORS:
            raise ConfigError(
                f"vision.accelerator must be one of {', '.join(ACCELERATORS)}; got {accelerator!r}"
            )
        if not 0.0 < threshold < 1.0:
            raise ConfigError(f"object threshold must be in (0, 1), got {threshold}")
        if max_objects < 1 or num_threads < 1 or retry_s <= 0:
            raise ConfigError("max_objects and num_threads must be >= 1 and retry_s > 0")
        self.files = model_files(installed_manifest(COCO_MANIFEST), model_dir)
        self.labels = read_labels(self.files["labels"])
        self.accelerator = accelerator
        self.threshold = float(threshold)
        self.max_objects = int(max_objects)
        self.retry_s = float(retry_s)
        self.num_threads = int(num_threads)
        self._probe = probe
        self._import_module = import_module
        self._load_delegate = load_delegate
        self._make_interpreter = make_interpreter
        self._clock = clock
        self.failures = 0  # Edge TPU errors mid-run (each one fell back to the CPU)
        self.retries = 0  # attempts to get the Edge TPU back
        self.recoveries = 0  # attempts that succeeded
        self._retry_at: float | None = None
        self._cpu: _Runner | None = None
        runner, reason = (None, "accelerator=cpu") if accelerator == "cpu" else self._open_tpu()
        if runner is None:
            if accelerator == "edgetpu":
                raise EngineError(
                    f"vision.accelerator=edgetpu but no Edge TPU could be used: {reason} "
                    "(auto falls back to the CPU)"
                )
            runner = self._cpu_runner()
            reason = f"CPU: {reason}"
        self._runner: _Runner = runner
        self.reason = reason
        (_LOG.debug if accelerator == "cpu" else _LOG.info)(
            "objects on %s (%s)", self.backend, self.reason
        )

    @property
    def backend(self) -> str:
        """``pycoral``, ``edgetpu`` (LiteRT + delegate) or ``cpu``."""
        return self._runner.name

    # ----------------------------------------------------------------- backends
    def _open_tpu(self) -> tuple[_Runner | None, str]:
        """The Edge TPU runner (pycoral first, then the LiteRT delegate), or None and why."""
        tpu_model = self.files["edgetpu"]
        reasons = []
        modules, why = _import_pycoral(self._import_module)
        if modules is not None:
            try:
                tpus = list(modules["edgetpu"].list_edge_tpus())
                if tpus:
                    runner = _PycoralRunner(modules, tpu_model)
                    return runner, f"Edge TPU through pycoral ({tpus[0]}), model {tpu_model.name}"
                why = "pycoral lists no Edge TPU"
            except _TPU_ERRORS as err:
                why = f"pycoral failed: {err}"
        reasons.append(why)
        probe = self._probe if self._probe is not None else probe_edgetpu()
        if not probe.available:
            reasons.append(probe.reason)
            return None, "; ".join(reasons)
        try:
            model = TfliteModel(
                tpu_model,
                accelerator="edgetpu",
                probe=probe,
                load_delegate=self._load_delegate,
                make_interpreter=self._make_interpreter,
            )
        except EngineError as err:
            reasons.append(str(err))
            return None, "; ".join(reasons)
        return _LiteRtRunner(model), f"Edge TPU through the {probe.library} delegate ({why})"

    def _cpu_runner(self) -> _Runner:
        if self._cpu is None:
            model = TfliteModel(self.files["cpu"], accelerator="cpu", num_threads=self.num_threads)
            self._cpu = _LiteRtRunner(model)
        return self._cpu

    def _maybe_retry(self) -> None:
        """After a mid-run failure, try the Edge TPU again once ``retry_s`` has passed."""
        if self._retry_at is None or self._clock() < self._retry_at:
            return
        self.retries += 1
        runner, reason = self._open_tpu()
        if runner is None:
            self._retry_at = self._clock() + self.retry_s
            _LOG.info("Edge TPU still unavailable (%s); next try in %g s", reason, self.retry_s)
            return
        self._runner, self.reason, self._retry_at = runner, reason, None
        self.recoveries += 1
        _LOG.warning("objects back on the Edge TPU: %s", reason)

    # ----------------------------------------------------------------- detection
    def detect(self, rgb: np.ndarray) -> list[Observation]:
        """The objects in ``rgb`` (checked), most confident first."""
        rgb = check_rgb(rgb)
        self._maybe_retry()
        square = cv2.resize(rgb, (300, 300), interpolation=cv2.INTER_AREA)
        try:
            raw = self._runner.run(square)
        except _TPU_ERRORS as err:
            if self._runner.name == "cpu":
                raise
            self.failures += 1
            self._retry_at = self._clock() + self.retry_s
            self.reason = f"CPU: the Edge TPU failed mid-run ({type(err).__name__}: {err})"
            _LOG.warning("objects fall back to the CPU: %s; retry in %g s", err, self.retry_s)
            self._runner = self._cpu_runner()
            raw = self._runner.run(square)
        return self._observations(raw)

    def _observations(self, raw: _Raw) -> list[Observation]:
        order = np.argsort(-raw.scores, kind="stable")
        out = []
        for i in order[: self.max_objects]:
            score = float(raw.scores[i])
            if score < self.threshold:
                break
            x0, y0, x1, y1 = (float(v) for v in np.clip(raw.boxes[i], 0.0, 1.0))
            if x1 <= x0 or y1 <= y0:
                continue
            key = int(raw.classes[i])
            label = self.labels.get(key, f"class {key}")
            centre = ((x0 + x1) / 2, (y0 + y1) / 2)
            out.append(Observation("object", score, (x0, y0, x1, y1), centre, label=label))
        return out

    def diagnostics(self) -> dict[str, object]:
        """Backend, the reason for it, and the Edge TPU failure/retry/recovery counts."""
        return {
            "backend": self.backend,
            "backend_reason": self.reason,
            "edgetpu_failures": self.failures,
            "edgetpu_retries": self.retries,
            "edgetpu_recoveries": self.recoveries,
        }
