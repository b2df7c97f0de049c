"""Tests of omniflow.engines.vad: real engines on real speech, stream-time stamps, bad input.

``hello.wav`` is espeak-ng's "Hello robot. What is this red box?" with 0.5 s of digital
silence before and after (scripts/make_sample_audio.py). The webrtc engine is a runtime
requirement; silero is optional (its package is installed with --no-deps), so its cases are
skipped when the model or onnxruntime is missing.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import soundfile

from omniflow.core.room_sounds import fan_noise, mix_at_snr, pink_noise
from omniflow.core.timing import NS_PER_SAMPLE
from omniflow.engines.vad import (
    VAD_ENGINES,
    VadEvent,
    VoiceActivityDetector,
    make_vad,
)
from omniflow.errors import AudioFormatError, ConfigError

HELLO = Path(__file__).resolve().parents[1] / "data" / "samples" / "hello.wav"
BASE_NS = 1_700_000_000_123_456_789  # an arbitrary capture clock, far from zero


def _has_silero() -> bool:
    if importlib.util.find_spec("onnxruntime") is None:
        return False
    spec = importlib.util.find_spec("silero_vad")
    return spec is not None and bool(spec.submodule_search_locations)


ENGINES = [
    "webrtc",
    pytest.param(
        "silero",
        marks=pytest.mark.skipif(
            not _has_silero(), reason="silero-vad (--no-deps) and onnxruntime not installed"
        ),
    ),
]


@pytest.fixture(scope="module")
def hello() -> np.ndarray:
    samples, rate = soundfile.read(str(HELLO), dtype="int16")
    assert rate == 16_000
    return samples


def run(
    vad: VoiceActivityDetector,
    samples: np.ndarray,
    chunk: int = 640,
    base_ns: int = BASE_NS,
    tail_s: float = 1.0,
) -> list[VadEvent]:
    """Feed ``samples`` in chunks stamped from ``base_ns``, then ``tail_s`` of silence."""
    tail = np.zeros(round(16_000 * tail_s), dtype=np.int16)
    stream = np.concatenate([samples, tail])
    events: list[VadEvent] = []
    for i in range(0, len(stream), chunk):
        events += vad.process(stream[i : i + chunk], base_ns + i * NS_PER_SAMPLE)
    return events


def seconds(events: list[VadEvent], base_ns: int = BASE_NS) -> list[tuple[str, float]]:
    return [(e.kind, (e.stamp_ns - base_ns) / 1e9) for e in events]


@pytest.mark.parametrize("engine", ENGINES)
def test_speech_in_hello_wav_is_found_in_stream_time(engine: str, hello: np.ndarray) -> None:
    vad = make_vad(engine)
    events = run(vad, hello)
    kinds = [e.kind for e in events]
    assert kinds and kinds == ["start", "end"] * (len(kinds) // 2), seconds(events)
    first, last = seconds(events)[0][1], seconds(events)[-1][1]
    assert first == pytest.approx(0.5, abs=0.15)
    assert last == pytest.approx(3.25, abs=0.2)
    assert not vad.is_speech


@pytest.mark.parametrize("engine", ENGINES)
def test_a_long_min_silence_keeps_the_two_sentences_in_one_utterance(
    engine: str, hello: np.ndarray
) -> None:
    events = run(make_vad(engine, min_silence_ms=600, hangover_ms=100), hello)
    assert [e.kind for e in events] == ["start", "end"], seconds(events)


@pytest.mark.parametrize("engine", ENGINES)
def test_events_do_not_depend_on_the_chunk_size(engine: str, hello: np.ndarray) -> None:
    by_chunk = {n: run(make_vad(engine), hello, chunk=n) for n in (640, 1600, 333)}
    assert by_chunk[640] == by_chunk[1600] == by_chunk[333]


@pytest.mark.parametrize("engine", ENGINES)
def test_stamps_follow_the_chunk_stamps_not_a_clock(engine: str, hello: np.ndarray) -> None:
    early = run(make_vad(engine), hello, base_ns=5_000_000_000)
    late = run(make_vad(engine), hello, base_ns=BASE_NS)
    assert seconds(early, 5_000_000_000) == seconds(late)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("level", [0.0, 100.0, 300.0])
def test_silence_and_quiet_white_noise_are_not_speech(engine: str, level: float) -> None:
    noise = np.random.default_rng(7).normal(0.0, level, 3 * 16_000)
    vad = make_vad(engine)
    assert run(vad, np.rint(noise).astype(np.int16)) == []
    assert not vad.is_speech


@pytest.mark.parametrize("engine", ENGINES)
def test_is_speech_and_reset(engine: str, hello: np.ndarray) -> None:
    vad = make_vad(engine)
    events = []
    for i in range(0, 16_000, 640):  # the first second: speech starts at ~0.5 s
        events += vad.process(hello[i : i + 640], i * NS_PER_SAMPLE)
    assert [e.kind for e in events] == ["start"]
    assert vad.is_speech
    vad.reset()
    assert not vad.is_speech
    assert seconds(run(vad, hello)) == seconds(run(make_vad(engine), hello))


@pytest.mark.parametrize(
    ("samples", "kwargs", "message"),
    [
        (np.zeros(640, dtype=np.int16), {"sample_rate": 48_000}, "48000 Hz"),
        (np.zeros(640, dtype=np.float32), {}, "float32"),
        (np.full(640, np.nan, dtype=np.float32), {}, "NaN"),
        (np.zeros(640, dtype=np.int32), {}, "int32"),
        (np.zeros((640, 2), dtype=np.int16), {}, "mono"),
        (np.zeros(0, dtype=np.int16), {}, "empty"),
        ([0] * 640, {}, "numpy"),
    ],
)
def test_bad_chunks_are_refused_naming_the_problem(
    samples: object, kwargs: dict, message: str
) -> None:
    vad = make_vad("webrtc")
    with pytest.raises(AudioFormatError, match=message):
        vad.process(samples, 0, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("stamp", [-1, 1.5, None])
def test_bad_stamps_are_refused(stamp: object) -> None:
    with pytest.raises(AudioFormatError, match="stamp_ns"):
        make_vad("webrtc").process(np.zeros(640, dtype=np.int16), stamp)  # type: ignore[arg-type]


def test_a_mono_column_is_accepted(hello: np.ndarray) -> None:
    flat, column = make_vad("webrtc"), make_vad("webrtc")
    for i in range(0, len(hello), 640):
        stamp = i * NS_PER_SAMPLE
        assert flat.process(hello[i : i + 640], stamp) == column.process(
            hello[i : i + 640, None], stamp
        )
    assert flat.is_speech == column.is_speech


@pytest.mark.parametrize(
    ("engine", "options", "message"),
    [
        ("vosk", {}, "allowed: webrtc, silero"),
        ("webrtc", {"aggressiveness": 5}, "aggressiveness"),
        ("webrtc", {"frame_ms": 40}, "frame_ms"),
        ("webrtc", {"min_silence_ms": -1}, "min_silence_ms"),
        ("webrtc", {"hangover_ms": 500, "min_silence_ms": 300}, "hangover_ms"),
        ("webrtc", {"no_such_option": 1}, "no_such_option"),
    ],
)
def test_bad_configuration_is_a_config_error(engine: str, options: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make_vad(engine, **options)


def test_engine_names_are_listed() -> None:
    assert VAD_ENGINES == ("webrtc", "silero")


@pytest.mark.parametrize("engine", ENGINES)
def test_speech_with_white_noise_at_20_db_snr_is_still_found(
    engine: str, hello: np.ndarray
) -> None:
    speech = hello.astype(np.float64)
    rms = float(np.sqrt(np.mean(speech[speech != 0] ** 2)))
    noise = np.random.default_rng(1).normal(0.0, rms / 10.0, len(speech))  # 20 dB below
    noisy = np.clip(np.rint(speech + noise), -32768, 32767).astype(np.int16)
    events = seconds(run(make_vad(engine), noisy))
    assert events[0] == ("start", pytest.approx(0.5, abs=0.15))
    assert events[-1] == ("end", pytest.approx(3.2, abs=0.2))


def test_a_gap_in_the_chunk_stamps_moves_later_events_but_not_leftover_samples(
    hello: np.ndarray,
) -> None:
    """Chunk stamps are followed, not integrated: lost chunks shift what comes after them.

    333-sample chunks leave remainders in the 480-sample webrtc frames; the samples left over
    from before the gap keep their own stamps.
    """
    gap_ns = 1_000_000_000
    reference, shifted = make_vad("webrtc"), make_vad("webrtc")
    expected: list[VadEvent] = []
    got: list[VadEvent] = []
    for i in range(0, len(hello), 333):
        stamp = i * NS_PER_SAMPLE
        expected += reference.process(hello[i : i + 333], stamp)
        got += shifted.process(hello[i : i + 333], stamp + (gap_ns if i >= 4 * 333 else 0))
    assert expected and len(got) == len(expected)
    # speech starts at ~0.5 s, long after the gap: every event moved by exactly the gap
    assert [e.stamp_ns - gap_ns for e in got] == [e.stamp_ns for e in expected]


def test_a_window_straddling_two_chunks_is_stamped_from_its_first_sample() -> None:
    """A start in a window that began in the previous chunk carries that chunk's stamp."""

    class EveryWindow(VoiceActivityDetector):
        def _window_is_speech(self, window: np.ndarray) -> bool:
            return bool(window.any())

    vad = EveryWindow(480, min_speech_ms=0, min_silence_ms=30, hangover_ms=0)
    tone = np.ones(640, dtype=np.int16)
    assert vad.process(np.zeros(640, dtype=np.int16), 1_000) == []  # 160 samples left over
    # the leftover 160 zeros and 320 ones make the window starting at sample 480 of chunk 1
    assert vad.process(tone, 90_000_000) == [VadEvent("start", 1_000 + 480 * NS_PER_SAMPLE)]


# ----------------------------------------------------------------------------- steady noise
def in_noise(hello: np.ndarray, make_noise, snr_db: float, seed: int) -> np.ndarray:
    """hello.wav's speech (0.5-3.2 s) from 2.5 s into 7 s of room noise at ``snr_db``."""
    noise = make_noise(7 * 16_000, np.random.default_rng(seed))
    mix, measured = mix_at_snr(hello, noise, snr_db, at=2 * 16_000)
    assert measured == pytest.approx(snr_db, abs=0.5)
    return mix


@pytest.mark.parametrize("make_noise", [pink_noise, fan_noise], ids=["pink", "fan"])
def test_webrtc_alone_takes_steady_noise_at_10_db_for_speech_without_end(
    make_noise, hello: np.ndarray
) -> None:
    """What the floor gate is for: no end event after the question, however long the noise."""
    vad = make_vad("webrtc", min_speech_ms=60, min_silence_ms=400)
    events = seconds(run(vad, in_noise(hello, make_noise, 10.0, 1), tail_s=0.0))
    assert events[0][0] == "start" and events[0][1] < 2.0, events  # long before the question
    assert vad.is_speech, events  # and still open at the end of the noise


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("make_noise", [pink_noise, fan_noise], ids=["pink", "fan"])
@pytest.mark.parametrize("engine", ENGINES)
def test_with_the_floor_gate_only_the_question_in_10_db_noise_is_speech(
    engine: str, make_noise, seed: int, hello: np.ndarray
) -> None:
    vad = make_vad(engine, min_speech_ms=60, min_silence_ms=400, noise_margin_db=6.0)
    events = seconds(run(vad, in_noise(hello, make_noise, 10.0, seed), tail_s=0.0))
    # Its two sentences, as one utterance or two; nothing before or after them.
    assert [kind for kind, _ in events] in (["start", "end"], ["start", "end"] * 2), events
    assert events[0][1] == pytest.approx(2.5, abs=0.2), events
    assert events[-1][1] == pytest.approx(5.2, abs=0.4), events
    assert not vad.is_speech and vad.noise_floor_dbfs is not None


@pytest.mark.parametrize("gain", [1.0, 0.03])  # 0.03: about -40 dBFS, a voice across a room
@pytest.mark.parametrize("engine", ENGINES)
def test_the_floor_gate_keeps_clean_and_quiet_speech_as_it_was(
    engine: str, gain: float, hello: np.ndarray
) -> None:
    quiet = np.rint(hello * gain).astype(np.int16)
    quiet = np.concatenate([np.zeros(8000, dtype=np.int16), quiet])  # 1 s before the voice
    plain = seconds(run(make_vad(engine), quiet))
    gated = seconds(run(make_vad(engine, noise_margin_db=6.0), quiet))
    # The same onset and end; the pause between the sentences (digital silence) may split it.
    assert gated[0] == ("start", pytest.approx(plain[0][1], abs=0.05)), (gated, plain)
    assert gated[-1] == ("end", pytest.approx(plain[-1][1], abs=0.15)), (gated, plain)
    assert len(gated) <= 4


def test_a_bad_noise_margin_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="margin_db"):
        make_vad("webrtc", noise_margin_db=-1.0)


class AlwaysSpeech(VoiceActivityDetector):
    """An engine that takes everything for speech (as webrtcvad does steady noise)."""

    def _window_is_speech(self, window: np.ndarray) -> bool:
        return True


def levels_stream(levels: list[tuple[float, float]]) -> np.ndarray:
    """White noise of the given (seconds, RMS) runs, 16 kHz int16."""
    rng = np.random.default_rng(0)
    parts = [rng.normal(0.0, rms, round(s * 16_000)) for s, rms in levels]
    return np.rint(np.concatenate(parts)).astype(np.int16)


def test_the_floor_gate_ends_speech_the_engine_never_ends_and_starts_it_only_when_loud() -> None:
    vad = AlwaysSpeech(480, min_speech_ms=60, min_silence_ms=300, noise_margin_db=6.0)
    # 2 s of steady noise, 1 s of a voice 20 dB above it, 2 s of the noise again.
    stream = levels_stream([(2.0, 100.0), (1.0, 1000.0), (2.0, 100.0)])
    events = seconds(run(vad, stream, tail_s=0.0))
    # The start reaches back at most min_speech_ms (+ a window) before the loud voice at 2 s,
    # not into the noise before it (the engine called all of it speech).
    assert [kind for kind, _ in events] == ["start", "end"], events
    assert 2.0 - 0.09 <= events[0][1] <= 2.0, events
    assert events[1][1] == pytest.approx(3.06, abs=0.04), events
    assert not vad.is_speech
