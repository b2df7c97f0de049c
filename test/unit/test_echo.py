"""The echo stage (omniflow.core.echo): the robot's own voice out, the user's voice through."""

from __future__ import annotations

import itertools
import math
import subprocess
from pathlib import Path

import numpy as np
import pytest
import soundfile
from hypothesis import given, settings
from hypothesis import strategies as st

from omniflow.core.echo import EchoGate, EchoReference, LinearEcho
from omniflow.core.params import defaults
from omniflow.core.resample import resample_int16
from omniflow.core.room_sounds import pink_noise
from omniflow.core.timing import NS_PER_SAMPLE
from omniflow.engines.fusion_engines import ENGINE_PARAMS
from omniflow.engines.vad import make_vad
from omniflow.errors import AudioFormatError, ConfigError

RATE = 16_000
CHUNK = 640
BLOCK = 320  # the speech node's 20 ms blocks
T0 = 5_000_000_000_000


def espeak(text: str, voice: str, tmp_path: Path) -> np.ndarray:
    wav = tmp_path / f"{voice}.wav"
    subprocess.run(["espeak-ng", "-v", voice, "-w", str(wav), text], check=True)
    data, rate = soundfile.read(wav, dtype="int16")
    return resample_int16(data, rate, RATE)


@pytest.fixture(scope="module")
def voices(tmp_path_factory) -> tuple[np.ndarray, np.ndarray]:
    """(the robot's speech, the user's speech): two espeak-ng voices."""
    tmp = tmp_path_factory.mktemp("voices")
    robot = espeak(
        "The red box on the table is a parcel for the kitchen, and I can carry "
        "it there after charging.",
        "en-us",
        tmp,
    )
    user = espeak("Stop, what is that blue thing?", "en-gb-scotland", tmp)
    return robot, user


def room(
    played: np.ndarray, delay_ms: float, gain_db: float = -6.0, rt60: float = 0.25, seed: int = 0
) -> np.ndarray:
    """The played signal as a microphone in a room hears it: delayed, attenuated,
    reverberant."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(rt60 * RATE)) / RATE
    tail = rng.standard_normal(len(t)) * 10 ** (-3 * t / rt60) * 0.08
    tail[:48] = 0.0
    tail[0] = 1.0
    ir = np.concatenate([np.zeros(int(delay_ms * RATE / 1000)), tail])
    ir *= 10 ** (gain_db / 20) / np.sqrt(np.sum(tail**2))
    return np.convolve(played.astype(np.float64), ir)[: len(played)]


def pcm(x: np.ndarray) -> np.ndarray:
    return np.clip(np.round(x), -32768, 32767).astype(np.int16)


def run(mic: np.ndarray, played: np.ndarray | None, vad: dict | None = None, **options):
    """Feed ``mic`` chunk by chunk (the played blocks first, as the node does) through a gate
    and a webrtc VAD (``vad``: its options); return (gate results, VAD start times in s,
    gate)."""
    reference = EchoReference(history_ms=2000)
    gate = EchoGate(reference, **options)
    vad = make_vad("webrtc", **(vad or {"min_silence_ms": 400.0}))
    results, starts = [], []
    for i in range(len(mic) // CHUNK):
        stamp = T0 + i * CHUNK * NS_PER_SAMPLE
        if played is not None:
            for j in range(i * CHUNK // BLOCK, (i + 1) * CHUNK // BLOCK):
                block = played[j * BLOCK : (j + 1) * BLOCK]
                if np.any(block):
                    reference.add(T0 + j * BLOCK * NS_PER_SAMPLE, block)
        result = gate.process(mic[i * CHUNK : (i + 1) * CHUNK], stamp)
        results.append(result)
        starts += [
            (e.stamp_ns - T0) / 1e9 for e in vad.process(result.samples, stamp) if e.kind == "start"
        ]
    return results, starts, gate


def noise(length: int, seed: int = 1, dbfs: float = -55.0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(length) * 32768 * 10 ** (dbfs / 20)


@pytest.mark.parametrize("delay_ms", [40, 120, 200])
def test_the_robot_alone_starts_no_speech(voices, delay_ms):
    robot, _ = voices
    played = np.concatenate([robot, np.zeros(RATE, np.int16)])
    mic = pcm(room(played, delay_ms) + noise(len(played)))
    raw_starts = run(mic, None)[1]
    results, starts, _ = run(mic, played)
    assert raw_starts, "the echo alone must look like speech to the VAD (else the test is void)"
    assert starts == []
    scores = [r.echo_score for r in results if not math.isnan(r.echo_score)]
    assert np.median(scores) > 0.9


def test_the_user_alone_passes_unchanged_and_starts_speech(voices):
    _, user = voices
    mic = pcm(
        np.concatenate([np.zeros(RATE // 2), user, np.zeros(RATE)])
        + noise(len(user) + 3 * RATE // 2)
    )
    results, starts, _ = run(mic, np.zeros(len(mic), np.int16))
    assert all(math.isnan(r.echo_score) and not r.echo for r in results)
    assert np.array_equal(np.concatenate([r.samples for r in results]), mic[: len(results) * CHUNK])
    assert len(starts) == 1 and 0.4 < starts[0] < 0.9


def test_no_reference_passes_every_chunk_unchanged():
    mic = pcm(noise(10 * CHUNK, dbfs=-20))
    results, _, _ = run(mic, None)
    assert all(math.isnan(r.echo_score) and not r.echo and math.isnan(r.delay_ms) for r in results)
    assert np.array_equal(np.concatenate([r.samples for r in results]), mic)


@pytest.mark.parametrize("user_db", [-3.0, 0.0, 6.0])
def test_the_user_talking_over_the_robot_starts_speech(voices, user_db):
    robot, user = voices
    played = np.concatenate([robot, np.zeros(RATE, np.int16)])
    echo = room(played, 120)
    talk = np.zeros(len(played))
    onset = int(1.5 * RATE)
    level = (
        np.sqrt(np.mean(echo[: len(robot)] ** 2))
        / np.sqrt(np.mean(user[np.abs(user) > 100].astype(np.float64) ** 2))
        * 10 ** (user_db / 20)
    )
    talk[onset : onset + len(user)] = user[: len(played) - onset] * level
    mic = pcm(echo + talk + noise(len(played)))
    _, starts, _ = run(mic, played)
    assert any(1.4 < s < 2.2 for s in starts), starts


@pytest.mark.parametrize("delay_ms", [25, 90, 180, 260])
def test_the_delay_estimate_finds_the_room_delay(voices, delay_ms):
    robot, _ = voices
    mic = pcm(room(robot, delay_ms) + noise(len(robot)))
    results, _, _ = run(mic, robot)
    delays = [r.delay_ms for r in results[-40:]]
    assert abs(np.median(delays) - delay_ms) <= 2.0


def test_delays_beyond_the_search_are_not_taken_for_the_room(voices):
    robot, _ = voices
    mic = pcm(room(robot, 250) + noise(len(robot)))
    results, _, _ = run(mic, robot, max_delay_ms=100)
    assert all(r.delay_ms <= 100 for r in results if not math.isnan(r.delay_ms))


def test_reset_forgets_the_echo_path(voices):
    robot, _ = voices
    mic = pcm(room(robot, 100) + noise(len(robot)))
    _, _, gate = run(mic, robot)
    assert gate._gain is not None
    gate.reset()
    assert gate._gain is None and gate._corr is None


@settings(max_examples=40, deadline=None)
@given(
    blocks=st.lists(st.tuples(st.integers(0, 4000), st.integers(1, 400)), min_size=1, max_size=12),
    start=st.integers(-1000, 4000),
    count=st.integers(1, 2000),
)
def test_reference_window_places_each_block_at_its_stamp(blocks, start, count):
    reference = EchoReference(history_ms=10_000)
    expected = np.zeros(10_000, np.float32)
    for offset, length in sorted(blocks):
        values = np.arange(1, length + 1, dtype=np.float32) + offset
        reference.add(T0 + offset * NS_PER_SAMPLE, values)
        expected[offset : offset + length] = values
    window = reference.window(T0 + start * NS_PER_SAMPLE, count)
    full = np.concatenate([np.zeros(1000, np.float32), expected])
    assert np.array_equal(window, full[start + 1000 : start + 1000 + count])


def test_reference_history_is_bounded_and_cleared_by_a_clock_jump_back():
    reference = EchoReference(history_ms=100)
    for i in range(100):
        reference.add(T0 + i * BLOCK * NS_PER_SAMPLE, np.ones(BLOCK, np.int16))
    assert len(reference) <= 7
    reference.add(T0, np.ones(BLOCK, np.int16))
    assert len(reference) == 1


@pytest.mark.parametrize(
    "bad, why",
    [
        (np.zeros((2, 2), np.int16), "mono"),
        (np.zeros(0, np.int16), "mono"),
        (np.array([np.nan], np.float32), "NaN"),
    ],
)
def test_bad_reference_blocks_are_refused(bad, why):
    with pytest.raises(AudioFormatError, match=why):
        EchoReference().add(T0, bad)


@pytest.mark.parametrize(
    "option",
    [
        {"suppress_score": 0.0},
        {"max_delay_ms": -1.0},
        {"reverb_ms": 5000.0},
        {"over": 0.1},
        {"confirm": 0},
    ],
)
def test_bad_options_are_refused_naming_the_allowed_range(option):
    with pytest.raises(ConfigError, match=next(iter(option))):
        EchoGate(EchoReference(), **option)


def pink_room(played: np.ndarray, seed: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """(the microphone, the room's noise alone): steady pink noise at -40 dBFS, and the
    played signal's echo (120 ms, -12 dB) over it."""
    noise = pink_noise(len(played), np.random.default_rng(seed)) * 32768 * 10 ** (-40 / 20)
    return pcm(noise + room(played, 120, gain_db=-12.0)), noise


def octave_powers(chunks: list[np.ndarray]) -> np.ndarray:
    """Mean power (dB) of the chunks in the octaves from 125 Hz to 8 kHz."""
    spectra = np.mean([np.abs(np.fft.rfft(c.astype(np.float64))) ** 2 for c in chunks], axis=0)
    hz = np.fft.rfftfreq(CHUNK, 1 / RATE)
    edges = [125, 250, 500, 1000, 2000, 4000, 8001]
    return np.array(
        [
            10 * np.log10(spectra[(hz >= lo) & (hz < hi)].sum())
            for lo, hi in itertools.pairwise(edges)
        ]
    )


def spoken_between_pauses(robot: np.ndarray) -> np.ndarray:
    """What the speaker plays: 3 s of nothing, the robot's words, 3 s of nothing."""
    silence = np.zeros(3 * RATE, np.int16)
    return np.concatenate([silence, robot, silence])


def test_echo_chunks_become_noise_with_the_rooms_spectrum_and_level(voices):
    played = spoken_between_pauses(voices[0])
    results, _, _ = run(pink_room(played)[0], played)
    heard = [r.samples for r in results[: 3 * RATE // CHUNK]]
    comfort = [r.samples for r in results if r.echo]
    assert len(comfort) > 20
    # White noise at the room's level was 8 dB off in an octave of this pink room.
    assert np.abs(octave_powers(comfort) - octave_powers(heard)).max() < 2.0


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_the_rooms_own_noise_around_the_robots_voice_starts_no_speech(voices, seed):
    """A VAD gated by the noise floor, as the fusion node's is: quiet through the pink noise
    alone, and through the robot's voice in it and the noise coming back after it (white
    comfort noise started "speech" in one of these rooms, and in the graph the robot's
    answers in 10 dB pink noise were cut short by it)."""
    played = spoken_between_pauses(voices[0])
    mic, noise = pink_room(played, seed)
    node = defaults(ENGINE_PARAMS)
    vad = {
        "noise_margin_db": node["vad.noise.margin_db"],
        "noise_history_s": node["vad.noise.history_s"],
        "min_silence_ms": node["vad.min_silence_ms"],
    }
    assert run(pcm(noise), None, vad=vad)[1] == []
    assert run(mic, None, vad=vad)[1], "the echo must look like speech (else the test is void)"
    assert run(mic, played, vad=vad)[1] == []


def test_comfort_noise_after_the_user_spoke_is_as_loud_as_the_room_not_the_voice(voices):
    """The room, then the user's question, and the robot's answer 0.3 s after it: the noise
    learnt is the room's (-55 dBFS), not the question's (an estimate over the last 3 s took
    the voice for the room, and its 18 dB louder comfort noise started "speech" in a quiet
    room)."""
    robot, user = voices
    before, gap = np.zeros(RATE, np.int16), np.zeros(3 * RATE // 10, np.int16)
    played = np.concatenate([before, np.zeros(len(user) + len(gap), np.int16), robot])
    said = np.concatenate([before, user, gap, np.zeros(len(robot), np.int16)]).astype(np.float64)
    room_noise = noise(len(played))
    results, starts, _ = run(pcm(said + room(played, 120) + room_noise), played)
    comfort = np.concatenate([r.samples for r in results if r.echo]).astype(np.float64)
    level_db = 10 * np.log10(np.mean(comfort**2) / np.mean(room_noise**2))
    assert abs(level_db) < 2.0
    assert len(starts) == 1  # the question


def single_path(played: np.ndarray, delay_ms: float, gain_db: float) -> np.ndarray:
    """The played signal through a loudspeaker near the microphone: delayed and attenuated,
    no room (as in the bundled session)."""
    delayed = np.concatenate([np.zeros(int(delay_ms * RATE / 1000)), played.astype(np.float64)])
    return delayed[: len(played)] * 10 ** (gain_db / 20)


def talk_over(voices, start_s: float):
    """(microphone, played, the user's part of the microphone): the robot's line from 0.5 s
    and the user talking over it from ``start_s``, as loud as the echo."""
    robot, user = voices
    played = np.zeros(len(robot) + RATE, np.int16)
    played[RATE // 2 : RATE // 2 + len(robot)] = robot
    echo = single_path(played, 25.0, -10.0)
    voiced = user[np.abs(user) > 0].astype(np.float64)
    scale = np.sqrt(np.mean(echo[echo != 0] ** 2) / np.mean(voiced**2))
    talk = np.zeros(len(played))
    at = int(start_s * RATE)
    talk[at : at + len(user)] = (user.astype(np.float64) * scale)[: len(played) - at]
    return pcm(echo + talk + noise(len(played), dbfs=-60.0)), played, talk


def snr_db(signal: np.ndarray, clean: np.ndarray) -> float:
    """How far ``signal`` is from ``clean``: clean's power over the difference's (dB)."""
    error = signal.astype(np.float64) - clean
    return 10 * math.log10(np.sum(clean**2) / max(np.sum(error**2), 1e-9))


def test_the_recogniser_hears_the_users_first_word_under_the_robots_voice(voices):
    mic, played, talk = talk_over(voices, start_s=4.0)
    results, starts, _ = run(mic, played)
    # The chunks from the user's onset until the gate lets the user through: "St" of "Stop",
    # quieter than the robot's voice, which the gate takes for the robot's.
    first = int(4.0 * RATE) // CHUNK
    taken = list(itertools.takewhile(lambda r: r.echo, results[first:]))
    span = slice(first * CHUNK, (first + len(taken)) * CHUNK)
    assert len(taken) >= 2, "the gate must take the onset (else the test is void)"
    assert all(r.heard is not None for r in taken), "the canceller learnt the path in time"
    heard = np.concatenate([r.heard for r in taken])
    gated = np.concatenate([r.samples for r in taken])
    assert snr_db(heard, talk[span]) > 10.0
    assert snr_db(gated, talk[span]) < 1.0
    assert starts, "the voice detector still starts on the user"


def test_the_recogniser_gets_the_gates_noise_where_the_robot_talks_alone(voices):
    mic, played, _ = talk_over(voices, start_s=4.0)
    results, starts, _ = run(mic, played)
    alone = results[int(1.0 * RATE) // CHUNK : int(4.0 * RATE) // CHUNK]
    assert all(r.heard is None for r in alone if r.echo), "an echo chunk is the gate's noise"
    assert starts and min(starts) > 3.9


def test_the_canceller_takes_nothing_for_the_recogniser_before_it_has_learnt_the_path(voices):
    mic, played, _ = talk_over(voices, start_s=0.7)
    results, _, _ = run(mic, played)
    assert all(r.heard is None for r in results[: int(1.2 * RATE) // CHUNK])


def test_without_the_linear_canceller_the_recogniser_hears_the_gates_output(voices):
    mic, played, _ = talk_over(voices, start_s=4.0)
    results, _, _ = run(mic, played, linear=False)
    assert all(r.heard is None for r in results)


def test_the_canceller_learns_a_path_that_changed_while_the_robot_talks(voices):
    robot, _ = voices
    played = np.concatenate([robot, robot, np.zeros(RATE, np.int16)]).astype(np.float64)
    reference = EchoReference(history_ms=2000)
    linear = LinearEcho(reference)
    change = len(robot)
    mic = np.concatenate(
        [single_path(played, 25.0, -10.0)[:change], single_path(played, 25.0, -4.0)[change:]]
    )
    converged = []
    for i in range(len(played) // CHUNK):
        stamp = T0 + i * CHUNK * NS_PER_SAMPLE
        block = played[i * CHUNK : (i + 1) * CHUNK]
        reference.add(stamp, block)
        if np.any(block):
            linear.process(mic[i * CHUNK : (i + 1) * CHUNK], stamp, 25 * RATE // 1000, adapt=True)
        converged.append(linear.converged)
    turned = change // CHUNK
    assert converged[turned - 1], "learnt the first path"
    assert not all(converged[turned:]), "the louder path first looked like double talk"
    assert converged[-RATE // CHUNK - 1], "and was learnt anew while the robot talked on"
