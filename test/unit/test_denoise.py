"""The noise suppressors (omniflow.engines.denoise) on real speech in real room noise.

espeak-ng says a question (as test_asr.py makes speech) into the fan and babble noises of
``omniflow.core.room_sounds`` at 5 and 10 dB SNR, after 1 s of the room alone; each engine
cleans it in the fusion node's 40 ms blocks. The SNR gain is measured against the clean
speech (``omniflow.core.denoise.snr_gain_db``), so a suppressor that only turns the level
down gains nothing. Costs are bounded loosely (a shared machine): the benchmark has the
figures (benchmarks/hearing.py --denoise).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.signal import correlate
from test_asr import espeak

from omniflow.core.denoise import snr_gain_db
from omniflow.core.room_sounds import babble_noise, fan_noise, mix_at_snr
from omniflow.engines import denoise
from omniflow.engines.denoise import RnnoiseDenoiser, SpeexDenoiser, make_denoiser
from omniflow.errors import AudioFormatError, ConfigError

RATE = 16_000
BLOCK = 640
WARM = RATE  # the room alone before the voice


@pytest.fixture(scope="module")
def speech(tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    return espeak("what is that animal next to the red cup", tmp_path_factory.mktemp("s") / "q.wav")


@pytest.fixture(scope="module")
def babble_voices(tmp_path_factory: pytest.TempPathFactory) -> list[np.ndarray]:
    tmp = tmp_path_factory.mktemp("babble")
    lines = ("the train was late again this morning", "could you pass me the salt please")
    return [espeak(line, tmp / f"{i}.wav") for i, line in enumerate(lines)]


def run_blocks(engine, mix: np.ndarray) -> np.ndarray:
    """The engine's output for ``mix`` fed a 40 ms block at a time (its cost per block is
    benchmarks/hearing.py's to time, not a test's)."""
    out = []
    for i in range(0, len(mix), BLOCK):
        block = engine.process(mix[i : i + BLOCK])
        assert block.dtype == np.int16 and len(block) == len(mix[i : i + BLOCK])
        out.append(block)
    return np.concatenate(out)


# Least SNR gain (dB) each engine gives in a fan's steady noise (measured here: speex ~3.4,
# rnnoise ~4.7 at 10 dB).
GAINS = {"speex": 2.0, "rnnoise": 3.0}


def fan_room(speech: np.ndarray, snr_db: float) -> tuple[np.ndarray, np.ndarray]:
    """The mix (1 s of fan, then the voice in it, whole 40 ms blocks) and the clean voice
    aligned with it."""
    n = WARM + -(-len(speech) // BLOCK) * BLOCK
    mix, _ = mix_at_snr(speech, fan_noise(n, np.random.default_rng(11)), snr_db, at=WARM)
    clean = np.zeros(n)
    clean[WARM : WARM + len(speech)] = speech
    return mix, clean


@pytest.mark.parametrize("name", sorted(GAINS))
@pytest.mark.parametrize("snr_db", [10.0, 5.0])
def test_suppressor_raises_the_snr_of_speech_in_steady_noise(speech, name, snr_db):
    mix, clean = fan_room(speech, snr_db)
    engine = make_denoiser(name)
    out = run_blocks(engine, mix)
    gain = snr_gain_db(clean[WARM:], mix[WARM:], out[WARM:], max_lag=800)
    assert gain >= GAINS[name], f"{name} in fan noise at {snr_db:g} dB: {gain:.1f} dB"
    # The delay it reports is the one the output has (and is bounded).
    xcorr = correlate(out.astype(np.float64), clean, mode="full", method="fft")
    lag = int(np.argmax(xcorr[len(clean) - 1 :][:1600]))
    assert lag == pytest.approx(engine.latency_ms * RATE / 1000, abs=2)
    assert engine.latency_ms < 40.0


def test_rnnoise_distorts_a_voice_in_babble_so_it_is_not_the_default(speech, babble_voices):
    """Other voices around: RNNoise keeps parts of both and cuts parts of both; what comes
    out is further from the voice than what went in (why audio.denoise stays none)."""
    n = WARM + len(speech)
    room = babble_noise(babble_voices, n, np.random.default_rng(11))
    mix, _ = mix_at_snr(speech, room, 10.0, at=WARM)
    out = run_blocks(RnnoiseDenoiser(), mix)
    clean = np.zeros(n)
    clean[WARM:] = speech
    assert snr_gain_db(clean[WARM:], mix[WARM:], out[WARM:], max_lag=800) < 0.0


def test_speex_adds_no_delay_for_whole_frames_and_resets():
    engine = SpeexDenoiser()
    rng = np.random.default_rng(2)
    noise = (fan_noise(RATE, rng) * 2000).astype(np.int16)
    first = run_blocks(engine, noise)
    assert engine.latency_ms == 20.0  # its frame, nothing more
    engine.reset()
    again = run_blocks(engine, noise)
    assert np.array_equal(first, again)  # the same noise estimate from scratch


def test_rnnoise_delay_is_fixed_from_the_first_block():
    engine = RnnoiseDenoiser()
    engine.process(np.zeros(BLOCK, dtype=np.int16))
    delay = engine.latency_ms
    assert 20.0 < delay < 40.0
    for _ in range(20):
        engine.process(np.zeros(BLOCK, dtype=np.int16))
    assert engine.latency_ms == delay


@pytest.mark.parametrize("name", ["speex", "rnnoise"])
def test_suppressors_refuse_chunks_that_are_not_16k_mono_int16(name):
    engine = make_denoiser(name)
    with pytest.raises(AudioFormatError, match="mono int16"):
        engine.process(np.zeros(BLOCK, dtype=np.float32))
    with pytest.raises(AudioFormatError, match="mono int16"):
        engine.process(np.zeros((BLOCK, 2), dtype=np.int16))


def test_make_denoiser_names_the_choices_and_none_is_no_engine():
    assert make_denoiser("none") is None
    with pytest.raises(ConfigError, match="none, speex, rnnoise"):
        make_denoiser("wiener")


def test_rnnoise_without_its_library_says_how_to_get_it(monkeypatch):
    monkeypatch.setattr(denoise.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match="pyrnnoise.*make setup"):
        RnnoiseDenoiser()
