"""Tests of omniflow.engines.moonshine: the Moonshine base recogniser on real speech.

The base-en model that ``moonshine-cpp`` ships, read back as ONNX with int8 products
(omniflow.engines.ort_format) and decoded on ONNX Runtime. Speech: the bundled hello.wav and
espeak-ng sentences, as in test_asr_whisper.py. No timing asserts (benchmarks/asr.py and
benchmarks/hearing.py measure it).
"""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest
import soundfile
from test_asr import CHUNK, HELLO, START_NS, espeak
from test_asr_whisper import stream

from omniflow.core.text import edit_distance, words
from omniflow.engines import moonshine
from omniflow.engines.asr import make_recognizer
from omniflow.engines.moonshine import (
    MoonshineModel,
    MoonshineRecognizer,
    bundled_moonshine_model,
    read_vocabulary,
)
from omniflow.errors import AudioFormatError, ConfigError, EngineError


@pytest.fixture(scope="module")
def rec() -> MoonshineRecognizer:
    recognizer = MoonshineRecognizer(threads=2)
    yield recognizer
    recognizer.close()


def hello() -> np.ndarray:
    samples, rate = soundfile.read(HELLO, dtype="int16")
    assert rate == 16000
    return samples


def test_the_helpers_examples_hold() -> None:
    assert doctest.testmod(moonshine).failed == 0


def test_hello_is_heard_word_for_word_with_times_inside_the_speech(rec) -> None:
    samples = hello()
    _, result = stream(rec, samples)
    assert words(result.text) == words("Hello robot! What is this red box?")
    assert 0.0 < result.confidence <= 1.0
    assert [w.text for w in result.words] == result.text.split()
    starts = [w.start_ns for w in result.words]
    assert starts == sorted(starts)
    end_ns = START_NS + len(samples) * 1_000_000_000 // 16000
    for _, a, b, _ in result.words:
        assert START_NS <= a < b <= end_ns


def test_the_final_is_the_decode_of_the_whole_utterance(rec) -> None:
    samples = hello()
    _, streamed = stream(rec, samples)
    assert rec.decode_once(samples).text == streamed.text


@pytest.mark.parametrize(
    "text", ["turn left and stop at the door", "please put the green bottle on the table"]
)
def test_espeak_sentences_are_heard(rec, tmp_path, text) -> None:
    # At twice real time: the worker decodes drafts while the sentence is fed.
    partials, result = stream(rec, espeak(text, tmp_path / "s.wav"), pace_s=0.02)
    assert edit_distance(words(text), words(result.text)) <= 1, result.text
    assert partials, "a sentence of 2 s or more gets a partial on the way"


def test_silence_gives_an_empty_final(rec) -> None:
    rec.start(START_NS)
    rec.feed(np.zeros(CHUNK * 10, np.int16))
    result = rec.finish()
    assert result.text == "" and result.words == [] and math.isnan(result.confidence)


def test_a_short_snapshot_is_padded_not_refused(rec) -> None:
    assert isinstance(rec.decode_once(hello()[:320]).text, str)


def test_wrong_audio_is_refused_and_the_utterance_stays_open(rec) -> None:
    rec.start(START_NS)
    with pytest.raises(AudioFormatError):
        rec.feed(np.zeros(CHUNK, np.float32))
    assert rec.active
    samples = hello()
    for i in range(0, len(samples), CHUNK):
        rec.feed(samples[i : i + CHUNK])
    assert words(rec.finish().text) == words("Hello robot! What is this red box?")


def test_bad_settings_and_missing_files_say_what_to_do(tmp_path) -> None:
    with pytest.raises(ConfigError, match="threads"):
        MoonshineRecognizer(threads=0)
    with pytest.raises(ConfigError, match="no Moonshine model directory"):
        MoonshineModel(tmp_path / "absent")
    with pytest.raises(ConfigError, match="encoder_model"):
        MoonshineModel(tmp_path)
    with pytest.raises(ConfigError, match="grammar_path is for pocketsphinx"):
        make_recognizer("moonshine", grammar_path="commands.jsgf")


def test_a_malformed_tokenizer_is_refused(tmp_path) -> None:
    bad = tmp_path / "tokenizer.bin"
    bad.write_bytes(b"\x05<unk>\x03<s>\x09</s")
    with pytest.raises(ConfigError, match="ends inside token 2"):
        read_vocabulary(bad)
    pieces = read_vocabulary(bundled_moonshine_model() / "tokenizer.bin")
    assert pieces[:3] == [b"<unk>", b"<s>", b"</s>"] and len(pieces) == 32000


def test_a_model_that_does_not_load_is_an_engine_error(tmp_path) -> None:
    source = bundled_moonshine_model()
    (tmp_path / "tokenizer.bin").write_bytes((source / "tokenizer.bin").read_bytes())
    (tmp_path / "encoder_model.onnx").write_bytes(b"not a model")
    (tmp_path / "decoder_model_merged.onnx").write_bytes(b"not a model")
    with pytest.raises(EngineError, match="cannot"):
        MoonshineModel(tmp_path)


class _EndsAtOnce:
    """A model that ends the first decode at once (as Moonshine does on some short
    utterances) and hears words in the second."""

    def __init__(self) -> None:
        self.lengths: list[int] = []

    def decode(self, audio: np.ndarray) -> tuple[list[int], float]:
        self.lengths.append(len(audio))
        return ([], math.nan) if len(self.lengths) == 1 else ([7, 8], -0.1)

    def text(self, tokens: list[int]) -> str:
        return "red cup" if tokens else ""


def test_an_utterance_decoded_to_nothing_is_decoded_again_with_silence_after_it() -> None:
    from omniflow.engines.asr import DecodeJob

    model = _EndsAtOnce()
    decode = MoonshineRecognizer._decode_fn(model)
    speech = np.concatenate([np.zeros(3200), np.full(8000, 3000), np.zeros(1600)])
    result = decode(DecodeJob(1, speech.astype(np.int16)))
    assert result.text == "red cup"
    assert model.lengths == [len(speech), len(speech) + 4000]  # 0.25 s of silence after it
    assert result.words[0][1] == 3200 * 62_500  # from the voiced audio's start
    # Silence is not decoded again: nothing was said.
    quiet = _EndsAtOnce()
    assert MoonshineRecognizer._decode_fn(quiet)(DecodeJob(1, np.zeros(16000, np.int16))).text == ""
    assert len(quiet.lengths) == 1
