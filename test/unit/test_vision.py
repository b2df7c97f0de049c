"""Tests of omniflow.engines.vision: real detectors on real photographs, LSH codes of frames,
the Coral probe and fallback decision, and bad inputs (the COCO object detector and where it
runs: test_vision_objects.py).

The detectors are the .tflite files mediapipe 0.10.14 ships (installed with --no-deps from
requirements/no-deps.txt); the photographs come with scikit-image. The Edge TPU cannot run
here, so its probe and the backend choice are tested as pure functions.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from omniflow.core.semantic import hamming
from omniflow.engines import vision
from omniflow.engines.vision import (
    MEDIAPIPE_DETECTORS,
    DetectorVisionEncoder,
    EdgeTpuProbe,
    ModelVisionEncoder,
    SsdDetector,
    TfliteModel,
    check_rgb,
    choose_backend,
    edgetpu_sibling,
    frame_descriptor,
    make_default_encoder,
    mediapipe_model_path,
    pointing_region,
    probe_edgetpu,
    ssd_anchors,
)
from omniflow.errors import ConfigError, EngineError, ImageFormatError

data = pytest.importorskip("skimage.data", reason="scikit-image (requirements/dev.txt)")


def _model_or_skip(kind: str) -> Path:
    try:
        return mediapipe_model_path(MEDIAPIPE_DETECTORS[kind].model)
    except EngineError as err:
        pytest.skip(f"{MEDIAPIPE_DETECTORS[kind].model} not available: {err}")


@pytest.fixture(scope="module")
def encoder() -> DetectorVisionEncoder:
    for kind in MEDIAPIPE_DETECTORS:
        _model_or_skip(kind)
    # every MediaPipe detector (the default runs only the palm beside the objects)
    return make_default_encoder(kinds=tuple(MEDIAPIPE_DETECTORS), accelerator="cpu")


@pytest.fixture(scope="module")
def photos() -> dict[str, np.ndarray]:
    return {name: getattr(data, name)() for name in ("astronaut", "coffee", "chelsea", "rocket")}


# ---------------------------------------------------------------------------- detectors
def test_face_found_in_astronaut_at_her_face(encoder, photos) -> None:
    face = encoder.encode(photos["astronaut"], 1).find("face")
    assert face is not None and face.score > 0.8
    x0, y0, x1, y1 = face.box
    # Eileen Collins' face spans about x 180-275, y 80-180 px of the 512 x 512 photograph.
    assert 0.30 < x0 < 0.40 and 0.50 < x1 < 0.58
    assert 0.12 < y0 < 0.22 and 0.30 < y1 < 0.38
    assert encoder.encode(photos["astronaut"], 2).find("person") is not None


@pytest.mark.parametrize("name", ["coffee", "rocket", "chelsea"])
def test_no_face_in_photos_without_people(encoder, photos, name) -> None:
    result = encoder.encode(photos[name], 1)
    assert result.find("face") is None
    assert result.find("person") is None


def test_face_box_is_in_frame_coordinates_for_wide_frames(encoder, photos) -> None:
    """Letterboxing is undone: the face in a narrower crop (padded left and right) and in a
    wider frame (padded top and bottom) gets the same pixel box as in the square photograph."""
    img = photos["astronaut"]
    square = encoder.encode(img, 1).find("face")
    assert square is not None
    px_square = np.array(square.box) * 512
    tall = img[:, 60:460]
    wide = np.zeros((512, 600, 3), np.uint8)
    wide[:, 40:552] = img
    for frame, x_offset in ((tall, -60), (wide, 40)):
        h, w = frame.shape[:2]
        face = encoder.encode(frame, 2).find("face")
        assert face is not None
        px = np.array(face.box) * [w, h, w, h] - [x_offset, 0, x_offset, 0]
        np.testing.assert_allclose(px, px_square, atol=8)


def test_anchor_counts_match_the_models() -> None:
    assert len(ssd_anchors(128, (8, 16), (2, 6))) == 896
    assert len(ssd_anchors(192, (8, 16), (2, 6))) == 2016
    assert len(ssd_anchors(224, (8, 16, 32), (2, 2, 6))) == 2254


@pytest.mark.parametrize(
    ("origin", "toward", "region"),
    [
        ((0.5, 0.5), (0.4, 0.4), "top-left"),
        ((0.5, 0.5), (0.6, 0.5), "middle-right"),
        ((0.5, 0.8), (0.5, 0.7), "top-center"),
        ((0.2, 0.2), (0.3, 0.3), "bottom-right"),
        ((0.5, 0.5), (0.5, 0.5), "middle-center"),
    ],
)
def test_pointing_region(origin, toward, region) -> None:
    assert pointing_region(origin, toward) == region


def test_result_fields_and_timings(encoder, photos) -> None:
    result = encoder.encode(photos["coffee"], 123)
    assert result.stamp_ns == 123
    assert 0 <= result.code < 2**32
    assert result.embedding.shape == (vision.DESCRIPTOR_DIM,)
    stages = {"objects", "face", "hand", "person", "descriptor", "lsh", "total"}
    assert stages <= set(result.timings_ms)
    assert result.labels[0] == "cup" and result.summary[0][0] == "object"


# ---------------------------------------------------------------------------- embedding
def _perturb(img: np.ndarray) -> np.ndarray:
    """The same view a moment later: 6 px to the right, a little brighter."""
    moved = np.roll(img, 6, axis=1)
    return np.clip(moved.astype(np.int16) + 12, 0, 255).astype(np.uint8)


def test_lsh_codes_of_similar_frames_are_closer_than_of_different_photos(encoder, photos) -> None:
    codes = {n: encoder.encode(img, 1).code for n, img in photos.items()}
    near = {
        n: hamming(codes[n], encoder.encode(_perturb(img), 2).code) for n, img in photos.items()
    }
    names = list(photos)
    far = [hamming(codes[a], codes[b]) for i, a in enumerate(names) for b in names[i + 1 :]]
    assert max(near.values()) < min(far), (near, far)


def test_scene_change_is_small_for_the_same_view(encoder, photos) -> None:
    enc = make_default_encoder(kinds=())
    assert enc.encode(photos["coffee"], 1).scene_change == 1.0
    same = enc.encode(_perturb(photos["coffee"]), 2).scene_change
    other = enc.encode(photos["rocket"], 3).scene_change
    assert same < 0.1 < other


def test_descriptor_ignores_brightness_of_the_thumbnail() -> None:
    img = data.coffee()
    a = frame_descriptor(img)[:64]
    b = frame_descriptor(np.clip(img.astype(np.int16) + 20, 0, 255).astype(np.uint8))[:64]
    assert float(a @ b) > 0.98


# ---------------------------------------------------------------------------- Coral path
def _absent(name: str) -> object:
    raise OSError(f"{name}: cannot open shared object file: No such file or directory")


def test_probe_without_libedgetpu_says_why() -> None:
    probe = probe_edgetpu(find_library=lambda _name: None, load=_absent)
    assert not probe.available and "libedgetpu.so.1" in probe.reason


def test_probe_on_this_machine_falls_back_to_cpu_with_a_reason(tmp_path) -> None:
    probe = probe_edgetpu()
    model = tmp_path / "mobilenet.tflite"
    model.write_bytes(b"")
    choice = choose_backend(model, "auto", probe)
    if probe.available:  # a Coral machine: only the decision's consistency is checked
        assert choice.backend in ("cpu", "edgetpu")
    else:
        assert choice.backend == "cpu" and choice.model_path == model
        assert "falling back to the CPU" in choice.reason and "libedgetpu" in choice.reason


def test_probe_with_library_present() -> None:
    probe = probe_edgetpu(find_library=lambda _name: "libedgetpu.so.1", load=lambda _n: object())
    assert probe.available and probe.library == "libedgetpu.so.1"


def test_choose_backend_decisions(tmp_path) -> None:
    model = tmp_path / "mobilenet_v2.tflite"
    present = EdgeTpuProbe(True, "libedgetpu.so.1", "loaded")
    absent = EdgeTpuProbe(False, None, "libedgetpu.so.1 not loadable")
    assert edgetpu_sibling(model).name == "mobilenet_v2_edgetpu.tflite"
    assert edgetpu_sibling(edgetpu_sibling(model)) == edgetpu_sibling(model)
    # library but no compiled model: CPU, and the reason names the missing file
    choice = choose_backend(model, "auto", present)
    assert choice.backend == "cpu" and "mobilenet_v2_edgetpu.tflite" in choice.reason
    edgetpu_sibling(model).write_bytes(b"")
    choice = choose_backend(model, "auto", present)
    assert choice.backend == "edgetpu" and choice.model_path == edgetpu_sibling(model)
    assert choose_backend(model, "cpu", present).backend == "cpu"
    assert choose_backend(model, "auto", absent).backend == "cpu"
    with pytest.raises(EngineError, match="libedgetpu"):
        choose_backend(model, "edgetpu", absent)
    with pytest.raises(ConfigError, match="auto, edgetpu, cpu"):
        choose_backend(model, "gpu", absent)


def test_model_runner_without_coral_runs_on_cpu() -> None:
    path = _model_or_skip("face")
    model = TfliteModel(
        path, accelerator="auto", probe=EdgeTpuProbe(False, None, "libedgetpu.so.1 not loadable")
    )
    assert model.backend == "cpu" and "falling back" in model.reason
    outs = model.run(np.zeros((1, 128, 128, 3), np.float32))
    assert sorted(o.shape for o in outs) == [(1, 896, 1), (1, 896, 16)]


def test_delegate_failure_falls_back_to_the_cpu_model(tmp_path, monkeypatch, caplog) -> None:
    """Library and *_edgetpu.tflite present but the delegate fails (no TPU plugged in): the
    CPU model is loaded and the reason logged; with accelerator=edgetpu it is an error."""
    import shutil

    from ai_edge_litert import interpreter as litert

    model = tmp_path / "robot.tflite"
    shutil.copy(_model_or_skip("face"), model)
    shutil.copy(model, edgetpu_sibling(model))
    loaded: list[str] = []

    def failing_delegate(library: str, *args: object, **kwargs: object) -> None:
        loaded.append(library)
        raise ValueError(f"Failed to load delegate from {library}")

    monkeypatch.setattr(litert, "load_delegate", failing_delegate)
    present = EdgeTpuProbe(True, "libedgetpu.so.1", "loaded")
    with caplog.at_level("INFO", logger="omniflow.engines.vision.runtime"):
        runner = TfliteModel(model, accelerator="auto", probe=present)
    assert loaded == ["libedgetpu.so.1"]
    assert runner.backend == "cpu" and runner.model_path == model
    assert "delegate failed" in runner.reason and "delegate failed" in caplog.text
    with pytest.raises(EngineError, match="Edge TPU delegate failed"):
        TfliteModel(model, accelerator="edgetpu", probe=present)


def test_robot_model_output_is_the_embedding() -> None:
    """A configurable model path: any (1, H, W, 3) model; here the face detector stands in
    for a MobileNet (no classifier ships here), its score output as the vector."""
    path = _model_or_skip("face")
    enc = ModelVisionEncoder(path, accelerator="cpu", output_index=1)
    result = enc.encode(data.astronaut(), 5)
    assert result.embedding.shape == (896,)
    assert result.find("class") is not None and 0 <= result.code < 2**32


# ---------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "bad",
    [
        np.zeros((240, 320), np.uint8),
        np.zeros((240, 320, 4), np.uint8),
        np.zeros((240, 320, 3), np.float32),
        np.zeros((0, 320, 3), np.uint8),
        [[0, 0, 0]],
    ],
)
def test_bad_images_raise(encoder, bad) -> None:
    with pytest.raises(ImageFormatError):
        encoder.encode(bad, 1)
    with pytest.raises(ImageFormatError):
        check_rgb(bad)


def test_bad_stamp_raises(encoder) -> None:
    with pytest.raises(ConfigError):
        encoder.encode(np.zeros((8, 8, 3), np.uint8), 1.5)


def test_missing_model_names_the_path(tmp_path) -> None:
    missing = tmp_path / "robot" / "mobilenet_v2.tflite"
    with pytest.raises(EngineError, match=str(missing)):
        ModelVisionEncoder(missing)
    with pytest.raises(EngineError, match=str(missing)):
        SsdDetector(MEDIAPIPE_DETECTORS["face"], model_path=missing)
    with pytest.raises(EngineError, match="nowhere.tflite"):
        mediapipe_model_path("modules/nowhere.tflite")


def test_corrupt_model_and_wrong_detector_model(tmp_path) -> None:
    junk = tmp_path / "junk.tflite"
    junk.write_bytes(b"not a flatbuffer")
    with pytest.raises(EngineError, match="junk.tflite"):
        TfliteModel(junk, accelerator="cpu")
    with pytest.raises(EngineError, match="expects"):
        SsdDetector(MEDIAPIPE_DETECTORS["face"], model_path=_model_or_skip("hand"))


def test_unknown_detector_kind() -> None:
    with pytest.raises(ConfigError, match="allowed"):
        make_default_encoder(kinds=("face", "cat"))
