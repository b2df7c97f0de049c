"""Tests of omniflow.engines.asr: pocketsphinx on real synthetic speech, streaming partials.

The speech is espeak-ng's (Debian package, installed by scripts/install_system_deps.sh),
written to a temporary WAV and resampled 22.05 kHz -> 16 kHz with scipy, as
scripts/make_sample_audio.py does for the committed sample. Open-vocabulary recognition with
pocketsphinx's bundled language model is weak, so that test only asks for some text; the
command grammar must be exact, also with white noise at 20 dB SNR.
"""

from __future__ import annotations

import math
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import soundfile
from scipy.signal import resample_poly

from omniflow.core.timing import NS_PER_SAMPLE
from omniflow.engines.asr import PocketsphinxRecognizer, RecognitionResult
from omniflow.errors import AudioFormatError, ConfigError, EngineError

HELLO = Path(__file__).resolve().parents[1] / "data" / "samples" / "hello.wav"
COMMANDS = ("what is this red box", "hello robot", "stop")
GRAMMAR = """#JSGF V1.0;
grammar commands;
public <command> = what is this red box | hello robot | stop;
"""
START_NS = 42_000_000_000
CHUNK = 640  # 40 ms at 16 kHz


def espeak(text: str, out: Path) -> np.ndarray:
    """16 kHz int16 speech of ``text`` with 0.3 s of silence around it."""
    exe = shutil.which("espeak-ng")
    if exe is None:
        pytest.skip("espeak-ng is not installed")
    subprocess.run([exe, "-w", str(out), "-v", "en-us", "-s", "150", text], check=True, timeout=30)
    data, rate = soundfile.read(str(out), dtype="float64")
    assert rate == 22_050
    speech = resample_poly(data, 320, 441)  # 22050 * 320 / 441 = 16000
    pad = np.zeros(4800)
    return np.rint(np.clip(np.concatenate([pad, speech, pad]), -1, 1) * 32767).astype(np.int16)


@pytest.fixture(scope="module")
def phrases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, np.ndarray]:
    tmp = tmp_path_factory.mktemp("speech")
    return {text: espeak(text, tmp / f"{i}.wav") for i, text in enumerate(COMMANDS)}


@pytest.fixture(scope="module")
def commands_recognizer(tmp_path_factory: pytest.TempPathFactory) -> PocketsphinxRecognizer:
    path = tmp_path_factory.mktemp("grammar") / "commands.jsgf"
    path.write_text(GRAMMAR, encoding="utf-8")
    return PocketsphinxRecognizer(grammar_path=path)


def recognise(
    rec: PocketsphinxRecognizer, samples: np.ndarray
) -> tuple[RecognitionResult, list[tuple[int, str]]]:
    """Stream ``samples`` in 40 ms chunks; return the result and (chunk index, partial)s."""
    rec.start(START_NS)
    partials = []
    for n, i in enumerate(range(0, len(samples), CHUNK)):
        partial = rec.feed(samples[i : i + CHUNK])
        if partial is not None:
            partials.append((n, partial))
    return rec.finish(), partials


def add_noise(samples: np.ndarray, snr_db: float, seed: int = 3) -> np.ndarray:
    speech = samples.astype(np.float64)
    voiced = speech[np.abs(speech) > 0]
    noise_rms = math.sqrt(np.mean(voiced**2)) / 10 ** (snr_db / 20)
    noisy = speech + np.random.default_rng(seed).normal(0.0, noise_rms, len(speech))
    return np.clip(np.rint(noisy), -32768, 32767).astype(np.int16)


@pytest.mark.parametrize("text", COMMANDS)
def test_commands_are_recognised_exactly_with_the_grammar(
    commands_recognizer: PocketsphinxRecognizer, phrases: dict[str, np.ndarray], text: str
) -> None:
    result, _ = recognise(commands_recognizer, phrases[text])
    assert result.text == text
    assert [w.text for w in result.words] == text.split()
    # the hypothesis' posterior per word (the dialogue's clarify.below reads it)
    posterior = commands_recognizer._decoder.hyp().prob
    assert result.confidence == pytest.approx(posterior ** (1 / len(text.split())))
    assert 0.0 <= result.confidence <= 1.0


@pytest.mark.parametrize("text", COMMANDS)
def test_commands_survive_white_noise_at_20_db_snr(
    commands_recognizer: PocketsphinxRecognizer, phrases: dict[str, np.ndarray], text: str
) -> None:
    result, _ = recognise(commands_recognizer, add_noise(phrases[text], 20.0))
    assert result.text == text


def test_partials_come_while_speaking_before_finish(
    commands_recognizer: PocketsphinxRecognizer, phrases: dict[str, np.ndarray]
) -> None:
    samples = phrases["what is this red box"]
    result, partials = recognise(commands_recognizer, samples)
    chunks = math.ceil(len(samples) / CHUNK)
    assert partials, "no partial hypothesis before finish()"
    assert partials[0][0] < chunks // 2  # the first one comes early in the utterance
    texts = [p for _, p in partials]
    assert len(set(texts)) == len(texts)  # only reported when it changed
    assert result.text == "what is this red box"


def test_word_times_are_in_stream_time_and_ordered(
    commands_recognizer: PocketsphinxRecognizer, phrases: dict[str, np.ndarray]
) -> None:
    samples = phrases["what is this red box"]
    result, _ = recognise(commands_recognizer, samples)
    end_ns = START_NS + len(samples) * NS_PER_SAMPLE
    previous = START_NS
    for _, start, end, _ in result.words:
        assert previous <= start < end <= end_ns
        previous = end
    # 0.3 s of silence was put before the speech
    assert result.words[0][1] - START_NS == pytest.approx(300_000_000, abs=150_000_000)


@pytest.mark.parametrize("second_pass", [True, False])
def test_open_vocabulary_gives_some_text(second_pass: bool) -> None:
    samples, rate = soundfile.read(str(HELLO), dtype="int16")
    result, partials = recognise(PocketsphinxRecognizer(second_pass=second_pass), samples)
    assert rate == 16_000
    assert result.text.strip()
    assert partials
    assert all(not w.startswith(("<", "[")) and "(" not in w for w, *_ in result.words)
    assert all(0.0 <= w.confidence <= 1.0 for w in result.words)  # each word's posterior


def test_an_utterance_of_silence_gives_empty_text(
    commands_recognizer: PocketsphinxRecognizer,
) -> None:
    commands_recognizer.start(0)
    commands_recognizer.feed(np.zeros(8000, dtype=np.int16))
    result = commands_recognizer.finish()
    assert result.text == "" or result.text in COMMANDS  # grammars force a path; never junk
    if not result.text:
        assert math.isnan(result.confidence) and result.words == []


def test_misuse_and_bad_input_are_typed_errors(commands_recognizer: PocketsphinxRecognizer) -> None:
    with pytest.raises(EngineError, match="start"):
        commands_recognizer.feed(np.zeros(640, dtype=np.int16))
    with pytest.raises(EngineError, match="start"):
        commands_recognizer.finish()
    commands_recognizer.start(0)
    with pytest.raises(AudioFormatError, match="float32"):
        commands_recognizer.feed(np.zeros(640, dtype=np.float32))
    with pytest.raises(AudioFormatError, match="NaN"):
        commands_recognizer.feed(np.full(640, np.nan))
    assert commands_recognizer.active  # the utterance survives a refused chunk
    commands_recognizer.finish()
    assert not commands_recognizer.active


def test_bad_grammars_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        PocketsphinxRecognizer(grammar_path=tmp_path / "missing.jsgf")
    with pytest.raises(ConfigError, match="JSGF"):
        PocketsphinxRecognizer(grammar="this is not jsgf")
    with pytest.raises(ConfigError, match="not both"):
        PocketsphinxRecognizer(tmp_path / "a.jsgf", grammar=GRAMMAR)


def test_a_missing_engine_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_pocketsphinx(name: str, *args: object, **kwargs: object) -> object:
        if name == "pocketsphinx":
            raise ImportError("No module named 'pocketsphinx'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pocketsphinx)
    with pytest.raises(EngineError, match="pip install pocketsphinx"):
        PocketsphinxRecognizer()
