"""Audio sources: live capture devices (PortAudio via sounddevice) and audio files.

Every source yields fixed-size :class:`AudioBlock` s of int16 samples shaped
``(frames, channels)``, whatever the device or file provides, so the capture
node has one code path. Library errors (PortAudio, libsndfile) are translated
into :mod:`omniflow.errors` types here, at the boundary.

``sounddevice`` is imported lazily inside :meth:`SoundDeviceSource.open`: the
module must import (and file sources work) on machines without the PortAudio
library, e.g. CI or replay hosts.
"""

from __future__ import annotations

import abc
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import soundfile

from omniflow.core.clock import ClockMapper
from omniflow.core.resample import StreamResampler, float_to_int16
from omniflow.core.timing import CHUNK_SAMPLES, SAMPLE_RATE
from omniflow.devices.base import Device, check_positive
from omniflow.devices.portaudio import (
    INPUT,
    describe_devices,
    find_device,
    import_sounddevice,
    parse_device,
    resolve_device,
)
from omniflow.errors import (
    ConfigError,
    SourceError,
    SourceExhausted,
)

__all__ = [
    "AUDIO_SOURCES",
    "AudioBlock",
    "AudioFileSource",
    "AudioSource",
    "SoundDeviceSource",
    "describe_input_devices",
    "open_audio_source",
    "resolve_input_device",
]

#: Values accepted by :func:`open_audio_source` for ``source``.
AUDIO_SOURCES: tuple[str, ...] = ("device", "file")

Warn = Callable[[str], None]


@dataclass(frozen=True)
class AudioBlock:
    """One block of captured or decoded audio.

    Attributes:
        samples: int16 array shaped ``(frames, channels)``; ``frames`` equals the
            source's ``block_frames`` (a file's final block is zero-padded).
        capture_time: Capture (ADC) time of the first sample in seconds on
            ``time.monotonic()`` for live devices; None for file sources, which
            the node paces and stamps in stream time.
        overflow: The device reported an input overflow before or within this block.
        dropped_blocks: Blocks lost just before this one because the internal
            queue was full (the consumer was too slow); 0 normally.
    """

    samples: np.ndarray
    capture_time: float | None
    overflow: bool = False
    dropped_blocks: int = 0


class AudioSource(Device):
    """A source of fixed-size int16 audio blocks.

    Attributes:
        sample_rate: Samples per second of every block.
        channels: Channels of every block.
        block_frames: Frames per block.
        paced_by_device: True when :meth:`read` blocks until the device delivers;
            False when it returns at once and the caller must pace the stream.
    """

    sample_rate: int
    channels: int
    block_frames: int
    paced_by_device: bool

    def __init__(self, sample_rate: int, channels: int, block_frames: int) -> None:
        check_positive("sample_rate", sample_rate)
        check_positive("channels", channels)
        check_positive("block_frames", block_frames)
        self.sample_rate = sample_rate
        self.channels = channels
        self.block_frames = block_frames

    @property
    def block_duration(self) -> float:
        """Seconds of audio in one block."""
        return self.block_frames / self.sample_rate

    @abc.abstractmethod
    def open(self) -> None:
        """Acquire the device or file. Raises SourceError (or a subclass) on failure."""

    @abc.abstractmethod
    def read(self, timeout: float) -> AudioBlock | None:
        """Return the next block; None if a device delivered nothing within ``timeout`` s.

        Raises:
            SourceExhausted: a non-looping file source reached its end.
            SourceError: the source is not open or failed.
        """


# --------------------------------------------------------------------------- devices


def describe_input_devices(devices: Iterable[Mapping[str, Any]]) -> str:
    """List input devices, or say there are none (see ``portaudio.describe_devices``)."""
    return describe_devices(devices, INPUT)


def resolve_input_device(
    devices: Iterable[Mapping[str, Any]], wanted: int | str | None
) -> int | None:
    """The index of an input device, None for the default (``portaudio.resolve_device``)."""
    return resolve_device(devices, wanted, INPUT)


def _import_sounddevice() -> ModuleType:
    """Import sounddevice; a missing PortAudio library becomes a SourceError."""
    return import_sounddevice(SourceError, "use source:=file")


class SoundDeviceSource(AudioSource):
    """Live capture from a PortAudio input device through ``sounddevice``.

    The PortAudio callback only stamps and enqueues (no allocation beyond one
    copy, no logging); :meth:`read` drains the queue from the consumer thread.
    The capture time of each block is ``time_info.inputBufferAdcTime`` mapped
    onto ``time.monotonic()`` with :class:`~omniflow.core.clock.ClockMapper`
    (observing ``currentTime`` against ``time.monotonic()`` in every
    callback); on devices that report no clock, the mapper's fallback
    (callback time minus block duration minus input latency) is used and a
    warning is emitted once through ``warn``.

    The queue holds at most ``queue_blocks`` blocks. When it is full the
    OLDEST block is dropped (fresh audio matters more to a robot than stale
    audio) and the next block returned reports how many were lost in
    ``dropped_blocks``.

    Args:
        device: None for the default input, a PortAudio index, or a name
            (case-insensitive, exact or unique substring) among input devices.
        sample_rate: Requested rate; the device must support it.
        channels: Requested channel count; the device must support it.
        block_frames: Frames per callback and per block.
        queue_blocks: Bound of the internal queue.
        warn: Called with a message for conditions worth one log line.
    """

    paced_by_device = True

    def __init__(
        self,
        device: int | str | None,
        sample_rate: int = SAMPLE_RATE,
        channels: int = 1,
        block_frames: int = CHUNK_SAMPLES,
        queue_blocks: int = 50,
        warn: Warn | None = None,
    ) -> None:
        super().__init__(sample_rate, channels, block_frames)
        check_positive("queue_blocks", queue_blocks)
        self._device = device
        self._queue_blocks = queue_blocks
        self._warn = warn
        self._clock = ClockMapper()
        self._cond = threading.Condition()
        self._queue: deque[tuple[np.ndarray, float, bool]] = deque()
        self._pending_dropped = 0
        self._pending_overflow = False
        self._dropped_total = 0
        self._stream: Any = None
        self._failure: str | None = None
        self._closing = False
        self._input_latency = 0.0
        self._device_index: int | None = None
        self._device_label = "default input" if device is None else repr(device)
        self._fallback_warned = False

    @property
    def dropped_total(self) -> int:
        """Blocks dropped since open() because the consumer was too slow."""
        return self._dropped_total

    @property
    def clock(self) -> ClockMapper:
        """The device-to-host clock mapping (for diagnostics)."""
        return self._clock

    @property
    def input_latency(self) -> float:
        """Input latency PortAudio reported for the open stream, in seconds."""
        return self._input_latency

    def open(self) -> None:
        """Find the device, check the format, and start the stream."""
        if self._stream is not None:
            return
        sd = _import_sounddevice()
        info = find_device(sd, self._device, INPUT, SourceError)
        self._device_index = int(info["index"])
        self._device_label = f"{self._device_index} {info['name']!r}"
        try:
            sd.check_input_settings(
                device=self._device_index,
                channels=self.channels,
                dtype="int16",
                samplerate=self.sample_rate,
            )
        except (sd.PortAudioError, ValueError) as err:
            raise SourceError(
                f"input device {self._device_label} does not support {self.sample_rate} Hz "
                f"x {self.channels} ch int16 ({err}); it supports up to "
                f"{info['max_input_channels']} channels and defaults to "
                f"{info['default_samplerate']:.0f} Hz"
            ) from err

        self._reset_state()
        try:
            stream = sd.InputStream(
                device=self._device_index,
                samplerate=self.sample_rate,
                channels=self.channels,
                dtype="int16",
                blocksize=self.block_frames,
                callback=self._callback,
                finished_callback=self._finished,
            )
            self._input_latency = float(stream.latency)
            stream.start()
        except (sd.PortAudioError, ValueError) as err:
            raise SourceError(f"cannot start input device {self._device_label}: {err}") from err
        self._stream = stream

    def _reset_state(self) -> None:
        with self._cond:
            self._queue.clear()
            self._pending_dropped = 0
            self._pending_overflow = False
            self._dropped_total = 0
            self._failure = None
            self._closing = False
        self._clock.reset()
        self._fallback_warned = False

    def _callback(self, indata: np.ndarray, frames: int, time_info: Any, status: Any) -> None:
        """PortAudio thread: stamp, copy and enqueue. Must not block or raise."""
        host_now = time.monotonic()
        self._clock.observe(time_info.currentTime, host_now)
        capture = self._clock.capture_time(
            time_info.inputBufferAdcTime,
            host_now,
            frames / self.sample_rate,
            self._input_latency,
        )
        block = (indata.copy(), capture, bool(status.input_overflow))
        with self._cond:
            if len(self._queue) >= self._queue_blocks:
                _, _, lost_overflow = self._queue.popleft()
                self._pending_dropped += 1
                self._pending_overflow |= lost_overflow
                self._dropped_total += 1
            self._queue.append(block)
            self._cond.notify()

    def _finished(self) -> None:
        """PortAudio thread: the stream stopped; unexpected unless we are closing."""
        with self._cond:
            if not self._closing:
                self._failure = f"input device {self._device_label} stopped unexpectedly"
            self._cond.notify_all()

    def read(self, timeout: float) -> AudioBlock | None:
        """Wait up to ``timeout`` seconds for the next block; None on timeout."""
        with self._cond:
            if self._stream is None:
                raise SourceError(f"input device {self._device_label} is not open")
            self._cond.wait_for(lambda: self._queue or self._failure is not None, timeout)
            if not self._queue:
                if self._failure is not None:
                    raise SourceError(self._failure)
                return None
            samples, capture, overflow = self._queue.popleft()
            dropped, self._pending_dropped = self._pending_dropped, 0
            overflow |= self._pending_overflow
            self._pending_overflow = False
        if not self._fallback_warned and not self._clock.device_clock_ok:
            self._fallback_warned = True
            if self._warn is not None:
                self._warn(
                    f"input device {self._device_label} reports no stream clock; capture "
                    "times are the callback time minus block duration minus input latency "
                    f"({self._input_latency * 1000:.1f} ms)"
                )
        return AudioBlock(samples, capture, overflow, dropped)

    def close(self) -> None:
        """Stop and close the stream; safe to call twice or before open()."""
        stream, self._stream = self._stream, None
        if stream is None:
            return
        with self._cond:
            self._closing = True
        try:
            stream.abort()
            stream.close()
        except Exception:  # closing a device that already died must not raise
            pass
        with self._cond:
            self._queue.clear()
            self._cond.notify_all()

    def describe(self) -> str:
        return (
            f"audio device {self._device_label}, {self.sample_rate} Hz x {self.channels} ch, "
            f"{self.block_frames}-frame blocks"
        )


# --------------------------------------------------------------------------- files


class AudioFileSource(AudioSource):
    """Blocks from an audio file (WAV, FLAC, OGG: whatever libsndfile reads).

    The file is streamed, never loaded whole: it is read in chunks of about
    half a second, converted to ``channels`` (averaged down to mono, mono
    duplicated up; any other mismatch goes through mono), resampled to
    ``sample_rate`` with a streaming polyphase filter when the file's rate
    differs (one warning says so), and cut into ``block_frames`` blocks. Memory
    stays bounded for hour-long recordings, and one code path serves short
    and long files alike.

    At the end of the file the last partial block is zero-padded. Then the
    source either rewinds (``loop=True``; every pass yields the same blocks)
    or raises :class:`~omniflow.errors.SourceExhausted`.

    :meth:`read` never waits (``paced_by_device`` is False): the caller paces
    the blocks and stamps them in stream time (``capture_time`` is None).
    """

    paced_by_device = False

    #: Input frames read from the file at a time (about 0.5 s at 44.1 kHz).
    CHUNK_FRAMES = 22050

    def __init__(
        self,
        path: str | Path,
        sample_rate: int = SAMPLE_RATE,
        channels: int = 1,
        block_frames: int = CHUNK_SAMPLES,
        loop: bool = False,
        warn: Warn | None = None,
    ) -> None:
        super().__init__(sample_rate, channels, block_frames)
        self.path = Path(path)
        self.loop = loop
        self._warn = warn
        self._file: soundfile.SoundFile | None = None
        self._resampler: StreamResampler | None = None
        self._buffer = np.zeros((0, channels), dtype=np.int16)
        self._eof = False
        self._passes = 0
        self._warned = False

    @property
    def file_sample_rate(self) -> int | None:
        """The file's own sample rate (None until open)."""
        return None if self._file is None else int(self._file.samplerate)

    @property
    def passes(self) -> int:
        """Completed passes through the file (grows when looping)."""
        return self._passes

    def open(self) -> None:
        """Open the file and check it holds audio. Raises SourceError naming the path."""
        if self._file is not None:
            return
        if not self.path.is_file():
            reason = "is a directory" if self.path.is_dir() else "does not exist"
            raise SourceError(f"cannot open audio file {self.path}: it {reason}")
        try:
            handle = soundfile.SoundFile(str(self.path))
        except (soundfile.SoundFileError, OSError) as err:
            raise SourceError(f"cannot open audio file {self.path}: {err}") from err
        if handle.frames == 0:
            handle.close()
            raise SourceError(f"audio file {self.path} contains no audio frames")
        self._file = handle
        if handle.samplerate != self.sample_rate and not self._warned:
            self._warned = True
            if self._warn is not None:
                self._warn(
                    f"{self.path.name}: resampling {handle.samplerate} Hz -> {self.sample_rate} Hz"
                )
        self._rewind()
        self._passes = 0

    def _rewind(self) -> None:
        assert self._file is not None
        self._file.seek(0)
        self._eof = False
        self._buffer = np.zeros((0, self.channels), dtype=np.int16)
        rate = int(self._file.samplerate)
        self._resampler = (
            StreamResampler(rate, self.sample_rate, self.channels)
            if rate != self.sample_rate
            else None
        )

    def _convert_channels(self, data: np.ndarray) -> np.ndarray:
        have = data.shape[1]
        if have == self.channels:
            return data
        mono = data if have == 1 else data.mean(axis=1, keepdims=True, dtype=np.float32)
        return np.repeat(mono, self.channels, axis=1) if self.channels > 1 else mono

    def _fill(self) -> None:
        """Decode one more chunk into the int16 block buffer."""
        assert self._file is not None
        try:
            data = self._file.read(self.CHUNK_FRAMES, dtype="float32", always_2d=True)
        except (soundfile.SoundFileError, OSError) as err:
            raise SourceError(f"cannot read audio file {self.path}: {err}") from err
        final = len(data) < self.CHUNK_FRAMES
        data = self._convert_channels(data)
        if self._resampler is not None:
            data = self._resampler.process(data, final=final)
        if len(data):
            self._buffer = np.concatenate([self._buffer, float_to_int16(data)])
        self._eof = final

    def read(self, timeout: float = 0.0) -> AudioBlock:
        """Return the next block at once (``timeout`` is unused: files never wait).

        Raises:
            SourceExhausted: the end was reached and ``loop`` is False.
            SourceError: the source is not open or the file cannot be decoded.
        """
        if self._file is None:
            raise SourceError(f"audio file {self.path} is not open")
        while len(self._buffer) < self.block_frames and not self._eof:
            self._fill()
        if len(self._buffer) == 0:
            self._passes += 1
            if not self.loop:
                raise SourceExhausted(f"end of audio file {self.path}")
            self._rewind()
            return self.read(timeout)
        block = self._buffer[: self.block_frames]
        self._buffer = self._buffer[self.block_frames :]
        if len(block) < self.block_frames:
            pad = np.zeros((self.block_frames - len(block), self.channels), dtype=np.int16)
            block = np.concatenate([block, pad])
        return AudioBlock(np.ascontiguousarray(block), None, False, 0)

    def close(self) -> None:
        """Close the file; safe to call twice or before open()."""
        handle, self._file = self._file, None
        if handle is not None:
            handle.close()
        self._buffer = np.zeros((0, self.channels), dtype=np.int16)

    def describe(self) -> str:
        rate = self.file_sample_rate
        origin = f" (file {rate} Hz)" if rate is not None and rate != self.sample_rate else ""
        return (
            f"audio file {self.path}{origin}, {self.sample_rate} Hz x {self.channels} ch, "
            f"{self.block_frames}-frame blocks{', looping' if self.loop else ''}"
        )


# --------------------------------------------------------------------------- factory


def open_audio_source(
    source: str,
    location: str,
    *,
    sample_rate: int,
    channels: int,
    block_frames: int,
    loop: bool = False,
    queue_blocks: int = 50,
    warn: Warn | None = None,
) -> AudioSource:
    """Construct (not open) the audio source a node's parameters describe.

    Args:
        source: ``"device"`` or ``"file"``.
        location: For a device: ``""`` for the default input, a digit string
            for an index, anything else a name. For a file: its path.
        sample_rate, channels, block_frames: Format of the blocks produced.
        loop: Rewind files at their end (ignored for devices).
        queue_blocks: Blocks a device may hold for a slow reader (ignored for files).
        warn: Receives one-line warnings (e.g. a node's logger ``warning``).

    Raises:
        ConfigError: unknown ``source``, empty file path, or invalid format values.
    """
    if source == "device":
        return SoundDeviceSource(
            parse_device(location),
            sample_rate=sample_rate,
            channels=channels,
            block_frames=block_frames,
            queue_blocks=queue_blocks,
            warn=warn,
        )
    if source == "file":
        if not location.strip():
            raise ConfigError("source 'file' needs a location: the path of an audio file")
        return AudioFileSource(
            location,
            sample_rate=sample_rate,
            channels=channels,
            block_frames=block_frames,
            loop=loop,
            warn=warn,
        )
    allowed = ", ".join(repr(name) for name in AUDIO_SOURCES)
    raise ConfigError(f"unknown audio source {source!r}; allowed values: {allowed}")
