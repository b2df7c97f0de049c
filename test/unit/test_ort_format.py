"""Tests of omniflow.engines.ort_format on the real .ort models moonshine-cpp ships.

The rebuilt ONNX model must compute what ONNX Runtime computes from the .ort file itself;
the int8 products must stay close to it (they quantise the activations on the fly) and keep
the weights int8; the converted file is made once and found again.
"""

from __future__ import annotations

import os

import numpy as np
import onnxruntime as ort
import pytest

from omniflow.engines.moonshine import bundled_moonshine_model
from omniflow.engines.ort_format import int8_matmuls, int8_onnx_file, onnx_from_ort
from omniflow.errors import ConfigError, EngineError

ENCODER = bundled_moonshine_model() / "encoder_model.ort"


def encode(model: str | bytes, audio: np.ndarray) -> np.ndarray:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # shared cores
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    return session.run(None, {"input_values": audio})[0]


@pytest.fixture(scope="module")
def audio() -> np.ndarray:
    rng = np.random.default_rng(5)
    t = np.arange(16000) / 16000
    tone = 0.3 * np.sin(2 * np.pi * 220 * t) + 0.02 * rng.standard_normal(16000)
    return tone.astype(np.float32)[np.newaxis, :]


def test_the_rebuilt_model_computes_what_the_ort_file_does(audio) -> None:
    saved = encode(str(ENCODER), audio)
    rebuilt = encode(onnx_from_ort(ENCODER), audio)
    assert rebuilt.shape == saved.shape
    np.testing.assert_allclose(rebuilt, saved, rtol=1e-4, atol=1e-4)


def test_int8_products_keep_the_weights_int8_and_the_output_close(audio) -> None:
    import onnx

    rebuilt = onnx_from_ort(ENCODER)
    small, count = int8_matmuls(rebuilt)
    assert count == 48  # every MatMul on an int8 weight; the 3 convolutions keep float
    model = onnx.load_from_string(small)
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("DynamicQuantizeMatMul") == 48
    int8 = {t.name for t in model.graph.initializer if t.data_type == onnx.TensorProto.INT8}
    cast = [n for n in model.graph.node if n.op_type == "Cast" and n.input[0] in int8]
    assert len(cast) == 3  # the convolutions' weights, folded into float at load
    float_out, int8_out = encode(rebuilt, audio), encode(small, audio)
    cosine = float(
        np.sum(float_out * int8_out) / np.linalg.norm(float_out) / np.linalg.norm(int8_out)
    )
    assert cosine > 0.99


def test_the_converted_file_is_made_once_and_remade_when_the_source_changes(tmp_path) -> None:
    source = tmp_path / "encoder_model.ort"
    source.write_bytes(ENCODER.read_bytes())
    first = int8_onnx_file(source, tmp_path / "cache")
    made = first.stat().st_mtime_ns
    assert int8_onnx_file(source, tmp_path / "cache") == first
    assert first.stat().st_mtime_ns == made
    os.utime(source, ns=(made, made + 1_000_000_000))
    again = int8_onnx_file(source, tmp_path / "cache")
    assert again != first and again.is_file()
    assert [p.name for p in (tmp_path / "cache").iterdir() if p.name.startswith(".")] == []


def test_bad_files_say_what_is_wrong(tmp_path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        onnx_from_ort(tmp_path / "absent.ort")
    text = tmp_path / "model.ort"
    text.write_bytes(b"this is not a flatbuffer at all")
    with pytest.raises(ConfigError, match="not an ONNX Runtime"):
        onnx_from_ort(text)
    with pytest.raises(EngineError, match="cannot read an ONNX model"):
        int8_matmuls(b"not a model")
    with pytest.raises(ConfigError, match="cannot read the model"):
        int8_onnx_file(tmp_path / "absent.onnx", tmp_path)


def test_an_unwritable_cache_is_an_engine_error(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(EngineError, match="writable"):
        int8_onnx_file(ENCODER, blocker / "cache")
