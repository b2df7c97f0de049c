"""The TFLite runtime under every vision model: input checks, the Coral probe, the backend
decision and :class:`TfliteModel` (``ai_edge_litert``, on the CPU or through the Edge TPU
delegate), and the :class:`Observation` every detector reports.

**Coral path**: :func:`probe_edgetpu` looks for ``libedgetpu.so.1`` (``ctypes.util`` then a
``CDLL`` load); if it loads and the ``*_edgetpu.tflite`` sibling of the configured model
exists, :func:`choose_backend` picks ``edgetpu`` and the model is opened with
``load_delegate('libedgetpu.so.1')``; any failure falls back to the CPU model with the reason
logged and kept in :attr:`TfliteModel.reason`. No ROS imports.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from omniflow.core.params import ACCELERATORS
from omniflow.errors import ConfigError, EngineError, ImageFormatError

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
    if accelerator not in ACCELERATORS:
        raise ConfigError(
            f"accelerator must be one of {', '.join(ACCELERATORS)}; got {accelerator!r}"
        )
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
    wants integers (a batch already of the input's dtype goes in as it is), and returns every
    output dequantised to float32 (so callers never handle quantisation). ``backend`` and
    ``reason`` say what was loaded and why. ``load_delegate`` and ``make_interpreter`` replace
    ``ai_edge_litert``'s (tests of the Edge TPU path on machines without one).
    """

    def __init__(
        self,
        model_path: str | Path,
        accelerator: str = "auto",
        num_threads: int = 2,
        probe: EdgeTpuProbe | None = None,
        load_delegate: Callable[[str], object] | None = None,
        make_interpreter: Callable[..., Any] | None = None,
    ) -> None:
        path = Path(model_path)
        if not path.is_file():
            raise EngineError(f"vision model not found: {path}")
        if num_threads < 1:
            raise ConfigError(f"num_threads must be >= 1, got {num_threads}")
        try:
            from ai_edge_litert import interpreter as litert
        except ImportError as err:  # pragma: no cover - the dependency is in runtime.txt
            raise EngineError("ai-edge-litert is not installed (requirements/runtime.txt)") from err
        Interpreter = make_interpreter or litert.Interpreter  # noqa: N806 - a class by default
        load_delegate = load_delegate or litert.load_delegate
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
        if batch.dtype == dtype:
            pass
        elif np.issubdtype(dtype, np.integer):
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
        except (ValueError, RuntimeError, OSError) as err:
            raise EngineError(f"inference failed in {self.model_path.name}: {err}") from err
        return outs


@dataclass(frozen=True)
class Observation:
    """One semantic observation of a frame; coordinates are normalised to the frame (0..1).

    ``box`` is (x0, y0, x1, y1); ``point`` a representative point (face centre, palm centre,
    hips, object centre); ``region`` a coarse name (hand: where it points); ``count`` how many
    anchors passed the threshold (several can belong to one object: no NMS); ``label`` an
    object's name (``kind`` ``object``: a COCO label such as ``cup``); ``ray`` a hand's
    pointing direction as two points, wrist -> middle-finger knuckle.
    """

    kind: str
    score: float
    box: tuple[float, float, float, float] | None = None
    point: tuple[float, float] | None = None
    region: str | None = None
    count: int = 1
    value: int | None = None
    label: str | None = None
    ray: tuple[tuple[float, float], tuple[float, float]] | None = None
