"""Tier 1 tests of omniflow.devices.playback: timing, flush, bounded queue, WAV output, errors.

The null and WAV sinks run for real (their own paced thread). The device sink's
queue and callback logic runs against a fake ``sounddevice`` module whose
callback the test drives by hand; the real PortAudio path is covered by
test/integration/test_pulseaudio_sink.py.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import threading
import time
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np
import pytest
import soundfile

from omniflow.devices import playback
from omniflow.devices.playback import (
    NullSink,
    SoundDeviceSink,
    WavFileSink,
    describe_output_devices,
    open_audio_sink,
    resolve_output_device,
)
from omniflow.errors import AudioFormatError, ConfigError, DeviceNotFoundError, SinkError

RATE = 16000
BLOCK = 320
BLOCK_S = BLOCK / RATE
SLACK_S = 0.010  # scheduling slack on a loaded 2-core machine


class Recorder:
    """An on_played callback keeping (samples, stamp, monotonic time of the call)."""

    def __init__(self) -> None:
        self.calls: list[tuple[np.ndarray, float, float]] = []
        self._lock = threading.Lock()

    def __call__(self, samples: np.ndarray, stamp: float) -> None:
        with self._lock:
            self.calls.append((samples, stamp, time.monotonic()))

    @property
    def samples(self) -> np.ndarray:
        with self._lock:
            blocks = [c[0] for c in self.calls]
        return np.concatenate(blocks) if blocks else np.zeros(0, np.int16)

    @property
    def stamps(self) -> np.ndarray:
        with self._lock:
            return np.array([c[1] for c in self.calls])


def ramp(frames: int) -> np.ndarray:
    """Distinct non-zero samples, so any reordering, loss or duplication shows."""
    return (np.arange(frames) % 30000 + 1).astype(np.int16)


def padded(samples: np.ndarray, block: int = BLOCK) -> np.ndarray:
    return np.concatenate([samples, np.zeros(-len(samples) % block, np.int16)])


def wait_until(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


# --------------------------------------------------------------------------- null sink


def test_null_sink_plays_one_second_in_about_one_second(recorder: Recorder) -> None:
    with NullSink(RATE, BLOCK, on_played=recorder) as sink:
        start = time.monotonic()
        assert sink.write(ramp(RATE), timeout=1.0) == RATE
        assert sink.playing
        assert sink.wait_idle(timeout=3.0)
        elapsed = time.monotonic() - start
        assert not sink.playing
    assert 0.8 <= elapsed <= 1.5
    assert len(recorder.calls) == RATE // BLOCK
    np.testing.assert_array_equal(recorder.samples, ramp(RATE))
    # Stamps follow the block schedule exactly (only a stall of > 3 blocks restarts it).
    spacing = np.diff(recorder.stamps)
    assert np.count_nonzero(np.abs(spacing - BLOCK_S) > 1e-9) <= 1, spacing
    assert sink.blocks_played == RATE // BLOCK
    assert sink.underruns == 0


def test_flush_stops_within_one_block(recorder: Recorder) -> None:
    with NullSink(RATE, BLOCK, on_played=recorder) as sink:
        sink.write(ramp(RATE), timeout=1.0)
        assert wait_until(lambda: len(recorder.calls) >= 10, timeout=2.0)
        dropped = sink.flush()
        flushed_at = time.monotonic()
        assert wait_until(lambda: not sink.playing, timeout=1.0)
        silent_after = time.monotonic() - flushed_at
        time.sleep(3 * BLOCK_S)  # nothing else may come out
        calls = list(recorder.calls)
        last_call = calls[-1][2] - flushed_at
        played = len(calls) * BLOCK
        assert dropped + played >= RATE - BLOCK  # dropped, or played before the flush
        assert last_call <= BLOCK_S + SLACK_S
        assert silent_after <= BLOCK_S + SLACK_S
        assert sink.wait_idle(0.0)
        # The sink plays again after a flush, only the new audio.
        assert sink.write(np.full(BLOCK, 7, np.int16), timeout=1.0) == BLOCK
        assert sink.wait_idle(timeout=1.0)
    np.testing.assert_array_equal(recorder.calls[-1][0], np.full(BLOCK, 7, np.int16))
    np.testing.assert_array_equal(recorder.samples[:played], ramp(played))


def test_bounded_queue_write_times_out_with_fewer_frames() -> None:
    with NullSink(RATE, BLOCK, max_queue_s=1.0) as sink:
        start = time.monotonic()
        accepted = sink.write(ramp(5 * RATE), timeout=0.1)
        elapsed = time.monotonic() - start
        assert RATE <= accepted < 2 * RATE  # the queue plus what played meanwhile
        assert 0.09 <= elapsed < 0.5
        assert sink.queued_frames <= RATE
        assert sink.flush() > 0


def test_flush_ends_a_write_blocked_on_the_full_queue(recorder: Recorder) -> None:
    with NullSink(RATE, BLOCK, max_queue_s=0.2, on_played=recorder) as sink:
        result: list[int] = []
        writer = threading.Thread(target=lambda: result.append(sink.write(ramp(5 * RATE), 5.0)))
        writer.start()
        assert wait_until(lambda: len(recorder.calls) >= 3, timeout=2.0)
        sink.flush()
        writer.join(timeout=1.0)
        assert not writer.is_alive(), "a flush must end a blocked write"
        assert result[0] < RATE
        assert wait_until(lambda: not sink.playing, timeout=BLOCK_S + SLACK_S)
        played = len(recorder.calls)
        time.sleep(3 * BLOCK_S)
        assert len(recorder.calls) == played, "stale audio played after the flush"


def test_gap_inside_an_utterance_counts_as_underrun() -> None:
    # Margins of a few hundred ms each side of UNDERRUN_GAP_S: the sink's thread notes the
    # queue ran dry at its next tick, which a loaded machine may run late.
    assert playback.UNDERRUN_GAP_S == 0.5
    with NullSink(RATE, BLOCK) as sink:
        sink.write(ramp(BLOCK), timeout=1.0)
        assert sink.wait_idle(1.0)
        time.sleep(0.2)  # the thread notices the queue ran dry
        sink.write(ramp(BLOCK), timeout=1.0)  # within the gap: a stutter
        assert sink.wait_idle(1.0)
        time.sleep(1.0)  # longer than the gap: a pause between utterances
        sink.write(ramp(BLOCK), timeout=1.0)
        assert sink.wait_idle(1.0)
        assert sink.underruns == 1


def test_on_played_errors_are_reported_once_and_playback_goes_on() -> None:
    warnings: list[str] = []

    def broken(samples: np.ndarray, stamp: float) -> None:
        raise RuntimeError("publisher gone")

    sink = open_audio_sink(
        "null", "", sample_rate=RATE, block_frames=BLOCK, on_played=broken, warn=warnings.append
    )
    with sink:
        sink.write(ramp(3 * BLOCK), timeout=1.0)
        assert sink.wait_idle(1.0)
        sink.write(ramp(BLOCK), timeout=1.0)
        sink.write(ramp(BLOCK), timeout=1.0)
    assert len(warnings) == 1 and "publisher gone" in warnings[0]


@pytest.mark.parametrize(
    "samples",
    [np.zeros(10, np.float32), np.zeros((10, 2), np.int16), np.zeros(10, np.int32)],
)
def test_write_rejects_anything_but_int16_mono(samples: np.ndarray) -> None:
    with NullSink(RATE, BLOCK) as sink, pytest.raises(AudioFormatError, match="int16 mono"):
        sink.write(samples, timeout=0.1)


def test_write_accepts_a_column_and_needs_an_open_sink() -> None:
    sink = NullSink(RATE, BLOCK)
    with pytest.raises(SinkError, match="not open"):
        sink.write(ramp(10), timeout=0.1)
    assert not sink.playing and sink.flush() == 0 and sink.wait_idle(0.0)
    with sink:
        assert sink.write(ramp(BLOCK)[:, None], timeout=0.1) == BLOCK
    sink.close()  # idempotent


# --------------------------------------------------------------------------- WAV sink


def test_wav_sink_writes_exactly_the_played_blocks(tmp_path: Path, recorder: Recorder) -> None:
    path = tmp_path / "speech.wav"
    phrase = ramp(5 * BLOCK + 123)
    with WavFileSink(path, RATE, BLOCK, on_played=recorder) as sink:
        sink.write(phrase, timeout=1.0)
        assert sink.wait_idle(1.0)
        time.sleep(2 * BLOCK_S)  # silence between phrases is not written
        sink.write(phrase, timeout=1.0)
        assert sink.wait_idle(1.0)
    data, rate = soundfile.read(str(path), dtype="int16")
    assert rate == RATE
    np.testing.assert_array_equal(data, recorder.samples)
    np.testing.assert_array_equal(data, np.concatenate([padded(phrase), padded(phrase)]))


def test_wav_sink_cuts_a_flushed_phrase(tmp_path: Path, recorder: Recorder) -> None:
    path = tmp_path / "cut.wav"
    with WavFileSink(path, RATE, BLOCK, on_played=recorder) as sink:
        sink.write(ramp(RATE), timeout=1.0)
        assert wait_until(lambda: len(recorder.calls) >= 5, timeout=2.0)
        sink.flush()
        assert sink.wait_idle(BLOCK_S + SLACK_S)
    data, _ = soundfile.read(str(path), dtype="int16")
    assert 5 * BLOCK <= len(data) < RATE // 2 and len(data) % BLOCK == 0
    np.testing.assert_array_equal(data, ramp(len(data)))
    np.testing.assert_array_equal(data, recorder.samples)


def test_wav_sink_offline_renders_fast_without_gaps(tmp_path: Path, recorder: Recorder) -> None:
    path = tmp_path / "offline.wav"
    speech = ramp(10 * RATE + 77)
    start = time.monotonic()
    with WavFileSink(path, RATE, BLOCK, realtime=False, on_played=recorder) as sink:
        for piece in np.array_split(speech, 997):  # odd pieces: blocks straddle writes
            assert sink.write(piece, timeout=2.0) == len(piece)
        assert sink.wait_idle(2.0)
    elapsed = time.monotonic() - start
    assert elapsed < 1.0, f"10 s of audio took {elapsed:.2f} s offline"
    data, _ = soundfile.read(str(path), dtype="int16")
    np.testing.assert_array_equal(data, padded(speech))
    np.testing.assert_array_equal(data, recorder.samples)


@pytest.mark.parametrize(
    ("make_path", "reason"),
    [
        (lambda tmp: tmp / "missing" / "out.wav", "does not exist"),
        (lambda tmp: tmp, "is a directory"),
    ],
)
def test_wav_sink_unwritable_path_names_it(tmp_path: Path, make_path, reason: str) -> None:
    path = make_path(tmp_path)
    sink = WavFileSink(path)
    with pytest.raises(SinkError, match=reason) as info:
        sink.open()
    assert str(path) in str(info.value)
    sink.close()


# --------------------------------------------------------------------------- factory


@pytest.mark.parametrize(
    ("sink", "location", "kind"),
    [
        ("null", "", NullSink),
        ("wav", "out.wav", WavFileSink),
        ("device", "", SoundDeviceSink),
        ("device", "3", SoundDeviceSink),
        ("device", "pulse", SoundDeviceSink),
    ],
)
def test_factory_builds_without_opening(sink: str, location: str, kind: type) -> None:
    built = open_audio_sink(sink, location, sample_rate=22050, block_frames=441)
    assert isinstance(built, kind)
    assert (built.sample_rate, built.block_frames) == (22050, 441)
    assert built.block_duration == pytest.approx(0.02)


@pytest.mark.parametrize(
    ("sink", "location", "match"),
    [
        ("speaker", "", r"unknown audio sink 'speaker'; allowed values: 'device', 'wav', 'null'"),
        ("wav", " ", "needs a location"),
        ("null", "", "block_frames must be a positive integer"),
    ],
)
def test_factory_rejects_bad_configuration(sink: str, location: str, match: str) -> None:
    block_frames = 0 if sink == "null" else BLOCK
    with pytest.raises(ConfigError, match=match):
        open_audio_sink(sink, location, sample_rate=RATE, block_frames=block_frames)


# --------------------------------------------------------------------------- device lookup

DEVICES = [
    {
        "index": 0,
        "name": "HDA Intel PCH: ALC3246 Analog (hw:0,0)",
        "max_input_channels": 2,
        "max_output_channels": 2,
        "default_samplerate": 48000.0,
    },
    {
        "index": 1,
        "name": "USB Mic",
        "max_input_channels": 1,
        "max_output_channels": 0,
        "default_samplerate": 48000.0,
    },
    {
        "index": 2,
        "name": "pulse",
        "max_input_channels": 32,
        "max_output_channels": 32,
        "default_samplerate": 48000.0,
    },
    {
        "index": 3,
        "name": "default",
        "max_input_channels": 32,
        "max_output_channels": 32,
        "default_samplerate": 48000.0,
    },
]


def test_describe_output_devices_lists_outputs_only() -> None:
    text = describe_output_devices(DEVICES)
    assert text.splitlines() == [
        "available output devices:",
        "  0: HDA Intel PCH: ALC3246 Analog (hw:0,0) (2 out)",
        "  2: pulse (32 out)",
        "  3: default (32 out)",
    ]


def test_describe_output_devices_without_any_suggests_other_sinks() -> None:
    text = describe_output_devices(DEVICES[1:2])
    assert "no audio output devices" in text
    assert "sink:=null" in text and "sink:=wav" in text


@pytest.mark.parametrize(
    ("wanted", "expected"),
    [(None, None), (2, 2), ("PULSE", 2), ("alc3246", 0), ("default", 3)],
)
def test_resolve_output_device(wanted: int | str | None, expected: int | None) -> None:
    assert resolve_output_device(DEVICES, wanted) == expected


@pytest.mark.parametrize(
    ("devices", "wanted", "error", "match"),
    [
        (DEVICES, 1, DeviceNotFoundError, r"(?s)no output device with index 1;.*2: pulse"),
        (DEVICES, "usb mic", DeviceNotFoundError, "no output device named like 'usb mic'"),
        (DEVICES, "a", ConfigError, "ambiguous"),
        (DEVICES[1:2], None, DeviceNotFoundError, "default output device: no audio output"),
        ([], "pulse", DeviceNotFoundError, "sink:=null"),
    ],
)
def test_resolve_output_device_errors(
    devices: list[dict[str, Any]], wanted: Any, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        resolve_output_device(devices, wanted)


# --------------------------------------------------------------------------- device sink


class FakeStream:
    """Records how the sink built its OutputStream; the test calls the callback."""

    latency = 0.03

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.started = self.aborted = self.closed = False

    def start(self) -> None:
        self.started = True

    def abort(self) -> None:
        self.aborted = True

    def close(self) -> None:
        self.closed = True

    def tick(self, device_now: float, dac: float, frames: int | None = None) -> np.ndarray:
        frames = frames or self.kwargs["blocksize"]
        out = np.full((frames, 1), -1, np.int16)  # garbage the sink must overwrite
        info = SimpleNamespace(currentTime=device_now, outputBufferDacTime=dac)
        self.kwargs["callback"](out, frames, info, SimpleNamespace(output_underflow=False))
        return out[:, 0]


def fake_sounddevice(rates: tuple[int, ...] = (16000, 48000)) -> ModuleType:
    module = ModuleType("sounddevice")

    class PortAudioError(Exception):
        pass

    def query_devices(device: int | None = None, kind: str | None = None) -> Any:
        if device is None and kind is None:
            return DEVICES
        return DEVICES[2]

    def check_output_settings(device: int, channels: int, dtype: str, samplerate: int) -> None:
        if samplerate not in rates:
            raise PortAudioError(f"Invalid sample rate [PaErrorCode -9997] {samplerate}")

    module.PortAudioError = PortAudioError
    module.query_devices = query_devices
    module.check_output_settings = check_output_settings
    module.streams = []

    def output_stream(**kwargs: Any) -> FakeStream:
        stream = FakeStream(**kwargs)
        module.streams.append(stream)
        return stream

    module.OutputStream = output_stream
    return module


@pytest.fixture
def fake_sd(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    module = fake_sounddevice()
    monkeypatch.setitem(sys.modules, "sounddevice", module)
    return module


def test_device_sink_flush_takes_effect_in_the_next_callback(
    fake_sd: ModuleType, recorder: Recorder
) -> None:
    sink = SoundDeviceSink("pulse", RATE, BLOCK, on_played=recorder)
    sink.open()
    stream = fake_sd.streams[0]
    assert stream.started
    assert stream.kwargs["blocksize"] == BLOCK and stream.kwargs["dtype"] == "int16"
    assert stream.kwargs["device"] == 2 and stream.kwargs["latency"] == "low"
    sink.write(ramp(10 * BLOCK), timeout=0.1)
    offset = time.monotonic() - 1000.0  # the device clock runs 1000 s ahead of ours
    before = time.monotonic()
    now = before - offset
    first = stream.tick(now, now + 0.05)
    assert sink.flush() == 9 * BLOCK
    after = stream.tick(now + BLOCK_S, now + 0.05 + BLOCK_S)
    np.testing.assert_array_equal(after, 0)
    assert sink.playing  # the last block is still on its way to the speaker
    assert sink.wait_idle(0.2)
    sink.close()
    assert stream.aborted and stream.closed
    assert len(recorder.calls) == 1
    np.testing.assert_array_equal(first, ramp(BLOCK))
    np.testing.assert_array_equal(recorder.samples, ramp(BLOCK))
    # DAC time mapped onto time.monotonic(): 50 ms after the callback ran.
    _, stamp, called = recorder.calls[0]
    assert before + 0.05 <= stamp <= called + 0.05


def test_device_sink_pads_the_last_block_and_counts_stutters(
    fake_sd: ModuleType, recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = SoundDeviceSink(None, RATE, BLOCK, on_played=recorder)
    sink.open()
    stream = fake_sd.streams[0]
    sink.write(ramp(BLOCK + 100), timeout=0.1)
    now = 5000.0
    stream.tick(now, now + 0.02)
    tail = stream.tick(now + BLOCK_S, now + 0.02 + BLOCK_S)
    np.testing.assert_array_equal(tail, padded(ramp(BLOCK + 100)[BLOCK:]))
    stream.tick(now + 2 * BLOCK_S, 0.0)  # dry
    sink.write(ramp(BLOCK), timeout=0.1)  # right after: a stutter
    assert sink.underruns == 1
    sink.close()


def test_device_sink_without_clock_uses_callback_time_plus_latency(
    fake_sd: ModuleType, recorder: Recorder
) -> None:
    warnings: list[str] = []
    sink = SoundDeviceSink("pulse", RATE, BLOCK, on_played=recorder, warn=warnings.append)
    sink.open()
    stream = fake_sd.streams[0]
    sink.write(ramp(4 * BLOCK), timeout=0.1)
    before = []
    for _ in range(4):
        before.append(time.monotonic())
        stream.tick(0.0, 0.0)
    sink.write(ramp(BLOCK), timeout=0.1)
    sink.close()
    assert len(recorder.calls) == 4
    for start, (_, stamp, called) in zip(before, recorder.calls, strict=True):
        assert start + FakeStream.latency <= stamp <= called + FakeStream.latency
    assert len(warnings) == 1 and "no stream clock" in warnings[0]


def test_device_sink_falls_back_to_the_default_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    module = fake_sounddevice(rates=(48000,))
    monkeypatch.setitem(sys.modules, "sounddevice", module)
    warnings: list[str] = []
    sink = SoundDeviceSink("pulse", RATE, BLOCK, warn=warnings.append)
    sink.open()
    assert (sink.sample_rate, sink.block_frames) == (48000, 960)
    assert module.streams[0].kwargs["samplerate"] == 48000
    assert "requested 16000 Hz" in sink.describe()
    assert len(warnings) == 1 and "default 48000 Hz" in warnings[0]
    sink.close()


def test_device_sink_that_plays_no_usable_rate_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "sounddevice", fake_sounddevice(rates=()))
    with pytest.raises(SinkError, match="plays neither 16000 Hz"):
        SoundDeviceSink("pulse").open()


def test_device_sink_unknown_device_lists_outputs(fake_sd: ModuleType) -> None:
    with pytest.raises(DeviceNotFoundError, match=r"(?s)no output device named like.*2: pulse"):
        SoundDeviceSink("no-such-speaker").open()


class _NoPortAudio(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Makes ``import sounddevice`` fail the way it does without libportaudio2."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        return importlib.util.spec_from_loader(name, self) if name == "sounddevice" else None

    def create_module(self, spec: Any) -> None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        raise OSError("PortAudio library not found")


def test_device_sink_without_portaudio_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delitem(sys.modules, "sounddevice", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_NoPortAudio(), *sys.meta_path])
    with pytest.raises(SinkError, match="apt install libportaudio2"):
        SoundDeviceSink(None).open()
