"""Tier 1 tests of omniflow.devices.audio: file sources, device lookup messages, factory.

No sound card or PortAudio stream is needed; the live device path is covered by
test/integration/test_pulseaudio_source.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile

from omniflow.core.resample import StreamResampler
from omniflow.devices.audio import (
    AudioBlock,
    AudioFileSource,
    SoundDeviceSource,
    describe_input_devices,
    open_audio_source,
    resolve_input_device,
)
from omniflow.errors import (
    ConfigError,
    DeviceNotFoundError,
    SourceError,
    SourceExhausted,
)


def sine(freq: float, rate: int, seconds: float, amplitude: float = 0.5) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return amplitude * np.sin(2 * np.pi * freq * t)


def write_wav(path: Path, data: np.ndarray, rate: int, subtype: str = "PCM_16") -> Path:
    soundfile.write(str(path), data, rate, subtype=subtype)
    return path


def read_all(source: AudioFileSource) -> list[AudioBlock]:
    blocks = []
    with pytest.raises(SourceExhausted):
        while True:
            blocks.append(source.read(0.0))
    return blocks


def peak_frequency(samples: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(samples.astype(np.float64) * np.hanning(len(samples))))
    return float(np.fft.rfftfreq(len(samples), 1.0 / rate)[np.argmax(spectrum)])


# --------------------------------------------------------------------------- file source


@pytest.mark.parametrize(
    ("frames", "block_frames", "expected_blocks", "last_valid"),
    [
        (6400, 640, 10, 640),  # exact multiple: no padding
        (6500, 640, 11, 100),  # partial last block, zero-padded
        (100, 640, 1, 100),  # shorter than one block
        (22050 * 2, 640, 69, 22050 * 2 - 68 * 640),  # multiple of the read chunk
    ],
)
def test_file_blocks_have_fixed_shape_dtype_and_padding(
    tmp_path: Path, frames: int, block_frames: int, expected_blocks: int, last_valid: int
) -> None:
    rng = np.random.default_rng(frames)
    data = rng.integers(-20000, 20000, size=frames, dtype=np.int16)
    data[data == 0] = 1  # so padding zeros are distinguishable
    path = write_wav(tmp_path / "mono16k.wav", data, 16000)
    with AudioFileSource(path, block_frames=block_frames) as source:
        assert source.paced_by_device is False
        blocks = read_all(source)
    assert len(blocks) == expected_blocks
    for block in blocks:
        assert block.samples.dtype == np.int16
        assert block.samples.shape == (block_frames, 1)
        assert block.capture_time is None
        assert not block.overflow
        assert block.dropped_blocks == 0
    joined = np.concatenate([b.samples[:, 0] for b in blocks])
    np.testing.assert_array_equal(joined[:frames], data)  # 16-bit PCM is bit-exact
    assert np.all(blocks[-1].samples[last_valid:] == 0)


def test_stereo_44k_is_mixed_down_and_resampled_with_one_warning(tmp_path: Path) -> None:
    left = sine(440.0, 44100, 2.0)
    right = sine(440.0, 44100, 2.0) * 0.5
    path = write_wav(tmp_path / "stereo44k.wav", np.stack([left, right], axis=1), 44100)
    warnings: list[str] = []
    with AudioFileSource(path, sample_rate=16000, channels=1, warn=warnings.append) as source:
        assert source.file_sample_rate == 44100
        assert "44100 Hz" in source.describe()
        blocks = read_all(source)
    assert warnings == ["stereo44k.wav: resampling 44100 Hz -> 16000 Hz"]
    out = np.concatenate([b.samples[:, 0] for b in blocks])
    assert len(blocks) == 50  # 2 s at 16 kHz in 640-frame blocks
    assert peak_frequency(out, 16000) == pytest.approx(440.0, abs=2.0)
    # Mixed down: amplitude is the mean of 0.5 and 0.25 of full scale.
    middle = out[4000:28000].astype(np.float64) / 32768.0
    assert np.max(np.abs(middle)) == pytest.approx(0.375, rel=0.02)


@pytest.mark.parametrize("freq", [300.0, 1000.0, 3100.0])
def test_resampling_preserves_sine_frequency(tmp_path: Path, freq: float) -> None:
    path = write_wav(tmp_path / "tone.wav", sine(freq, 22050, 1.5), 22050)
    with AudioFileSource(path, sample_rate=16000) as source:
        out = np.concatenate([b.samples[:, 0] for b in read_all(source)])
    assert len(out) >= 24000
    assert peak_frequency(out[:24000], 16000) == pytest.approx(freq, abs=1.5)


def test_streaming_resampler_matches_whole_signal() -> None:
    from scipy.signal import resample_poly

    rng = np.random.default_rng(3)
    signal = rng.standard_normal((44100 + 777, 2)).astype(np.float32)
    resampler = StreamResampler(44100, 16000, 2)
    pieces = []
    start = 0
    for size in [5, 3000, 441, 10000, 1, 20000]:
        pieces.append(resampler.process(signal[start : start + size]))
        start += size
    pieces.append(resampler.process(signal[start:], final=True))
    streamed = np.concatenate(pieces)
    whole = resample_poly(signal.astype(np.float64), 160, 441, axis=0)
    assert streamed.shape == whole.shape
    np.testing.assert_allclose(streamed, whole, atol=1e-5)


def test_mono_file_duplicated_to_stereo(tmp_path: Path) -> None:
    data = np.arange(1, 1001, dtype=np.int16)
    path = write_wav(tmp_path / "mono.wav", data, 16000)
    with AudioFileSource(path, channels=2, block_frames=500) as source:
        block = source.read(0.0)
    assert block.samples.shape == (500, 2)
    np.testing.assert_array_equal(block.samples[:, 0], data[:500])
    np.testing.assert_array_equal(block.samples[:, 1], data[:500])


@pytest.mark.parametrize("extension", ["flac", "ogg"])
def test_other_containers_are_read(tmp_path: Path, extension: str) -> None:
    path = tmp_path / f"tone.{extension}"
    soundfile.write(str(path), sine(500.0, 16000, 0.5), 16000)
    with AudioFileSource(path) as source:
        out = np.concatenate([b.samples[:, 0] for b in read_all(source)])
    assert peak_frequency(out[:8000], 16000) == pytest.approx(500.0, abs=2.5)


def test_loop_rewinds_and_repeats_the_same_blocks(tmp_path: Path) -> None:
    data = np.arange(1, 1501, dtype=np.int16)  # 2 full blocks + 1 partial of 640
    path = write_wav(tmp_path / "short.wav", data, 16000)
    with AudioFileSource(path, loop=True) as source:
        blocks = [source.read(0.0) for _ in range(7)]
        assert source.passes == 2
    first_pass = [b.samples for b in blocks[:3]]
    np.testing.assert_array_equal(blocks[3].samples, first_pass[0])
    np.testing.assert_array_equal(blocks[5].samples, first_pass[2])
    assert np.all(first_pass[2][220:] == 0)
    np.testing.assert_array_equal(blocks[6].samples, first_pass[0])


def test_close_is_idempotent_and_read_after_close_fails(tmp_path: Path) -> None:
    path = write_wav(tmp_path / "a.wav", np.ones(100, dtype=np.int16), 16000)
    source = AudioFileSource(path)
    source.close()  # before open
    source.open()
    source.close()
    source.close()
    with pytest.raises(SourceError, match="not open"):
        source.read(0.0)


def test_missing_file_error_names_path(tmp_path: Path) -> None:
    path = tmp_path / "nope.wav"
    with pytest.raises(SourceError, match="nope.wav.*does not exist"):
        AudioFileSource(path).open()


def test_directory_error_names_path(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="is a directory"):
        AudioFileSource(tmp_path).open()


def test_non_audio_file_error_names_path(tmp_path: Path) -> None:
    path = tmp_path / "notes.wav"
    path.write_text("this is not audio\n" * 20)
    with pytest.raises(SourceError, match=r"cannot open audio file .*notes\.wav: ") as info:
        AudioFileSource(path).open()
    assert isinstance(info.value.__cause__, soundfile.SoundFileError)


def test_empty_audio_file_is_rejected(tmp_path: Path) -> None:
    path = write_wav(tmp_path / "empty.wav", np.zeros(0, dtype=np.int16), 16000)
    with pytest.raises(SourceError, match="no audio frames"):
        AudioFileSource(path).open()


def test_float_file_is_clipped_into_int16(tmp_path: Path) -> None:
    data = np.array([0.0, 0.5, -0.5, 1.5, -1.5], dtype=np.float32)
    path = write_wav(tmp_path / "float.wav", data, 16000, subtype="FLOAT")
    with AudioFileSource(path, block_frames=5) as source:
        block = source.read(0.0)
    assert block.samples[:, 0].tolist() == [0, 16384, -16384, 32767, -32768]


# --------------------------------------------------------------------------- devices

DEVICES = [
    {"index": 0, "name": "HDA Intel PCH: ALC3246 Analog (hw:0,0)", "max_input_channels": 2},
    {"index": 1, "name": "HDMI 0 (hw:0,3)", "max_input_channels": 0},
    {"index": 2, "name": "ReSpeaker 4 Mic Array (hw:2,0)", "max_input_channels": 6},
    {"index": 3, "name": "pulse", "max_input_channels": 32},
    {"index": 4, "name": "default", "max_input_channels": 32},
]


def test_device_listing_shows_inputs_only() -> None:
    text = describe_input_devices(DEVICES)
    assert "0: HDA Intel PCH: ALC3246 Analog (hw:0,0) (2 in)" in text
    assert "2: ReSpeaker 4 Mic Array (hw:2,0) (6 in)" in text
    assert "HDMI" not in text


def test_device_listing_without_inputs_suggests_file() -> None:
    text = describe_input_devices(DEVICES[1:2])
    assert "no audio input devices" in text
    assert "source:=file" in text


@pytest.mark.parametrize(
    ("wanted", "expected"),
    [
        (None, None),
        (2, 2),
        ("pulse", 3),
        ("PULSE", 3),
        ("respeaker", 2),
        ("default", 4),
        ("hw:0,0", 0),
    ],
)
def test_resolve_input_device(wanted: int | str | None, expected: int | None) -> None:
    assert resolve_input_device(DEVICES, wanted) == expected


@pytest.mark.parametrize("wanted", [1, 9, "HDMI", "usb mic"])
def test_unknown_device_lists_available_inputs(wanted: int | str) -> None:
    with pytest.raises(DeviceNotFoundError) as info:
        resolve_input_device(DEVICES, wanted)
    message = str(info.value)
    assert repr(wanted) in message or str(wanted) in message
    assert "4: default (32 in)" in message
    assert "2: ReSpeaker 4 Mic Array (hw:2,0) (6 in)" in message


def test_no_input_devices_at_all_suggests_file() -> None:
    with pytest.raises(DeviceNotFoundError, match="source:=file"):
        resolve_input_device([], None)


def test_ambiguous_device_name_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="ambiguous.*0: HDA.*2: ReSpeaker"):
        resolve_input_device(DEVICES, "(hw:")


def test_device_read_before_open_fails() -> None:
    with pytest.raises(SourceError, match="not open"):
        SoundDeviceSource(None).read(0.01)
    SoundDeviceSource(None).close()  # idempotent before open


def test_device_queue_drops_oldest_and_reports_it() -> None:
    """Drive the callback directly: no PortAudio needed for the queue logic."""

    class TimeInfo:
        def __init__(self, now: float) -> None:
            self.currentTime = now
            self.inputBufferAdcTime = now - 0.05

    class Status:
        def __init__(self, overflow: bool) -> None:
            self.input_overflow = overflow

    source = SoundDeviceSource(None, block_frames=4, queue_blocks=3)
    source._stream = object()  # pretend open; the callback and read() need no real stream
    for i in range(5):
        status = Status(overflow=i == 1)  # the overflow is on a block that gets dropped
        source._callback(np.full((4, 1), i, np.int16), 4, TimeInfo(100.0 + i * 0.04), status)
    first = source.read(0.0)
    assert first is not None
    assert first.samples[0, 0] == 2  # blocks 0 and 1 were dropped
    assert first.dropped_blocks == 2
    assert first.overflow  # carried over from the dropped block
    second = source.read(0.0)
    assert second.dropped_blocks == 0
    assert not second.overflow
    assert source.read(0.01) is not None
    assert source.read(0.01) is None  # empty queue: timeout
    assert source.dropped_total == 2
    assert first.capture_time is not None
    source._stream = None


# --------------------------------------------------------------------------- factory


def test_factory_builds_file_and_device_sources(tmp_path: Path) -> None:
    kwargs = {"sample_rate": 16000, "channels": 1, "block_frames": 320}
    file_source = open_audio_source("file", str(tmp_path / "x.wav"), loop=True, **kwargs)
    assert isinstance(file_source, AudioFileSource)
    assert file_source.loop and file_source.block_frames == 320
    assert isinstance(open_audio_source("device", "", **kwargs), SoundDeviceSource)
    assert "3" in open_audio_source("device", "3", **kwargs).describe()
    assert "'usb mic'" in open_audio_source("device", "usb mic", **kwargs).describe()


@pytest.mark.parametrize(
    ("source", "location", "match"),
    [
        ("mic", "", "unknown audio source 'mic'; allowed values: 'device', 'file'"),
        ("file", "", "needs a location"),
        ("file", "  ", "needs a location"),
    ],
)
def test_factory_errors(source: str, location: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        open_audio_source(source, location, sample_rate=16000, channels=1, block_frames=640)


@pytest.mark.parametrize(
    "kwargs",
    [{"sample_rate": 0}, {"channels": -1}, {"block_frames": 0}, {"block_frames": 1.5}],
)
def test_invalid_format_is_config_error(kwargs: dict[str, float]) -> None:
    base = {"sample_rate": 16000, "channels": 1, "block_frames": 640}
    with pytest.raises(ConfigError):
        open_audio_source("file", "a.wav", **{**base, **kwargs})
