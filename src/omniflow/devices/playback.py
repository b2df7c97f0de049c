"""Audio outputs for the speech node: a sound device, a WAV file, or nothing at all.

Every sink takes int16 mono samples at :attr:`AudioSink.sample_rate` through
:meth:`AudioSink.write` into a *bounded* queue and plays them out in fixed
blocks of :attr:`AudioSink.block_frames` (20 ms or less), so that

* the speech node can synthesise the next phrase while this one plays, yet a
  runaway producer blocks instead of queueing minutes of speech;
* :meth:`AudioSink.flush` (barge-in, cancel) silences the robot within one
  block: the queue is dropped at once and only the block already handed to
  the output is finished;
* every block actually sent out is reported to ``on_played`` with the
  ``time.monotonic()`` at which its first sample reaches the speaker, so the
  speech node can publish the robot's own voice as the echo reference with
  correct stamps.

Blocks and padding
------------------
The output consumes exactly ``block_frames`` per block. When less than a
block is queued at a block boundary (the end of a phrase, or a producer that
fell behind) the remainder is played zero-padded: a sound card needs a full
buffer anyway, and waiting for more audio would insert a gap *before* the
tail instead of after it. ``on_played`` receives the padded block, i.e. what
really went out. Audio written back to back (phrase after phrase while the
queue is not empty) is played seamlessly. When the queue runs dry and audio
is written again within :data:`UNDERRUN_GAP_S`, that gap is counted in
:attr:`underruns <_QueuedSink.underruns>`: a stutter the listener hears, as
opposed to the normal silence between utterances.

Thread model
------------
:meth:`~AudioSink.write`, :meth:`~AudioSink.flush`, :attr:`~AudioSink.playing`
and :meth:`~AudioSink.wait_idle` may be called from any threads while the
output (a PortAudio callback, or the sink's own thread) consumes. All queue
state is guarded by one condition variable. A flush racing a blocked write
ends that write (it returns the frames accepted before the flush), so stale
audio of a cancelled phrase is never queued behind the flush. A write that
*starts* after the flush is, by design, new audio: the caller stops its
producer before or while flushing.

``sounddevice`` is imported lazily in :meth:`SoundDeviceSink.open`, so the
null and WAV sinks work on machines without the PortAudio library.
"""

from __future__ import annotations

import abc
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import soundfile

from omniflow.core.clock import ClockMapper
from omniflow.core.timing import SAMPLE_RATE, Pacer
from omniflow.devices.base import Device, check_positive
from omniflow.devices.portaudio import (
    OUTPUT,
    describe_devices,
    find_device,
    import_sounddevice,
    parse_device,
    resolve_device,
)
from omniflow.errors import AudioFormatError, ConfigError, SinkError

__all__ = [
    "AUDIO_SINKS",
    "UNDERRUN_GAP_S",
    "AudioSink",
    "NullSink",
    "PlayedCallback",
    "SoundDeviceSink",
    "WavFileSink",
    "describe_output_devices",
    "open_audio_sink",
    "resolve_output_device",
]

#: Values accepted by :func:`open_audio_sink` for ``sink``.
AUDIO_SINKS: tuple[str, ...] = ("device", "wav", "null")

#: A silence shorter than this between played audio and the next write is an
#: underrun (a stutter inside an utterance); a longer one is a pause between turns.
UNDERRUN_GAP_S = 0.5

#: ``(int16 mono samples just sent out, time.monotonic() at which the first of them
#: reaches the speaker or was consumed)``. Called from the output thread or callback.
PlayedCallback = Callable[[np.ndarray, float], None]

Warn = Callable[[str], None]


class AudioSink(Device):
    """An audio output fed int16 mono samples through a bounded queue.

    Attributes:
        sample_rate: Samples per second :meth:`write` expects. A device sink
            may change it in :meth:`open` to the rate the device really runs
            at: read it after opening.
        block_frames: Frames per output block, the unit of playback and of
            :meth:`flush` latency (20 ms or less).
    """

    sample_rate: int
    block_frames: int

    @property
    def block_duration(self) -> float:
        """Seconds of audio in one block."""
        return self.block_frames / self.sample_rate

    @abc.abstractmethod
    def open(self) -> None:
        """Acquire the output and start consuming. Raises SinkError on failure."""

    @abc.abstractmethod
    def write(self, samples: np.ndarray, timeout: float) -> int:
        """Queue int16 mono samples; block until there is room or ``timeout`` s passed.

        Returns:
            Frames accepted: all of them, or fewer when the timeout expired or
            :meth:`flush` was called meanwhile.

        Raises:
            AudioFormatError: ``samples`` is not int16 mono.
            SinkError: the sink is not open or its output failed.
        """

    @abc.abstractmethod
    def flush(self) -> int:
        """Stop now: drop everything queued; return the frames dropped. Never blocks.

        The block already handed to the output finishes (at most one block).
        """

    @abc.abstractmethod
    def wait_idle(self, timeout: float) -> bool:
        """Wait until everything written has been played; False on timeout."""

    @property
    @abc.abstractmethod
    def playing(self) -> bool:
        """True while audio is queued or the last block handed out is still sounding."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stop at once (queued audio is dropped) and release the output. Idempotent."""


class _SampleRing:
    """Fixed-capacity FIFO of int16 samples; no allocation after construction.

    Not thread-safe: the owning sink guards it with its condition variable.
    """

    def __init__(self, capacity: int) -> None:
        self._buffer = np.zeros(capacity, dtype=np.int16)
        self._head = 0
        self.frames = 0

    @property
    def room(self) -> int:
        return len(self._buffer) - self.frames

    def put(self, data: np.ndarray) -> None:
        """Append ``data`` (the caller checked it fits in :attr:`room`)."""
        capacity = len(self._buffer)
        tail = (self._head + self.frames) % capacity
        first = min(len(data), capacity - tail)
        self._buffer[tail : tail + first] = data[:first]
        self._buffer[: len(data) - first] = data[first:]
        self.frames += len(data)

    def get_into(self, out: np.ndarray) -> int:
        """Move up to ``len(out)`` samples into ``out``; return how many."""
        n = min(len(out), self.frames)
        capacity = len(self._buffer)
        first = min(n, capacity - self._head)
        out[:first] = self._buffer[self._head : self._head + first]
        out[first:n] = self._buffer[: n - first]
        self._head = (self._head + n) % capacity
        self.frames -= n
        return n

    def clear(self) -> int:
        """Drop everything; return how many samples were dropped."""
        dropped, self.frames, self._head = self.frames, 0, 0
        return dropped


class _QueuedSink(AudioSink):
    """The queue, flush and idle logic the three sinks share; subclasses own the output.

    A subclass calls :meth:`_start_queue` when its output starts, and from its
    output thread or callback :meth:`_take_block` (with :attr:`_cond` held)
    then :meth:`_emit` (without it) once per block.
    """

    def __init__(
        self,
        sample_rate: int,
        block_frames: int,
        max_queue_s: float,
        on_played: PlayedCallback | None,
        warn: Warn | None,
    ) -> None:
        check_positive("sample_rate", sample_rate)
        check_positive("block_frames", block_frames)
        if not (isinstance(max_queue_s, (int, float)) and max_queue_s > 0):
            raise ConfigError(f"max_queue_s must be a positive number, got {max_queue_s!r}")
        self.sample_rate = sample_rate
        self.block_frames = block_frames
        self.max_queue_s = float(max_queue_s)
        self._on_played = on_played
        self._warn = warn
        self._cond = threading.Condition()
        self._ring: _SampleRing | None = None
        self._generation = 0
        self._sounding_until = -math.inf
        self._emitting = False
        self._failure: str | None = None
        self._last_tick_audio = False
        self._drained_at: float | None = None
        self._last_write_at = -math.inf
        self._underruns = 0
        self._blocks_played = 0
        self._callback_error: str | None = None
        self._callback_error_reported = False

    # ------------------------------------------------------------------ statistics

    @property
    def underruns(self) -> int:
        """Gaps inside an utterance: the queue ran dry and audio followed within UNDERRUN_GAP_S."""
        return self._underruns

    @property
    def blocks_played(self) -> int:
        """Blocks with audio sent out since :meth:`open`."""
        return self._blocks_played

    @property
    def queued_frames(self) -> int:
        """Frames waiting in the queue (not yet handed to the output)."""
        with self._cond:
            return 0 if self._ring is None else self._ring.frames

    # ------------------------------------------------------------------ producer side

    def _start_queue(self) -> None:
        """Create an empty queue sized for ``max_queue_s`` at the current rate."""
        capacity = max(self.block_frames, round(self.max_queue_s * self.sample_rate))
        with self._cond:
            self._ring = _SampleRing(capacity)
            self._sounding_until = -math.inf
            self._emitting = False
            self._failure = None
            self._last_tick_audio = False
            self._drained_at = None
            self._underruns = 0
            self._blocks_played = 0
            self._callback_error = None
            self._callback_error_reported = False

    def _stop_queue(self) -> None:
        """Drop the queue; blocked writers and waiters return."""
        with self._cond:
            self._ring = None
            self._generation += 1
            self._cond.notify_all()

    def _check_health(self) -> None:
        """Caller's thread: report problems the output thread could not (hook for subclasses)."""
        if self._callback_error is not None and not self._callback_error_reported:
            self._callback_error_reported = True
            if self._warn is not None:
                self._warn(f"{self.describe()}: on_played failed: {self._callback_error}")

    def write(self, samples: np.ndarray, timeout: float) -> int:
        data = np.asarray(samples)
        if data.ndim == 2 and data.shape[1] == 1:
            data = data[:, 0]
        if data.dtype != np.int16 or data.ndim != 1:
            raise AudioFormatError(
                f"{type(self).__name__}.write needs int16 mono samples, "
                f"got {data.dtype} {data.shape}"
            )
        self._check_health()
        deadline = time.monotonic() + max(0.0, timeout)
        accepted = 0
        with self._cond:
            if self._failure is not None:
                raise SinkError(self._failure)
            if self._ring is None:
                raise SinkError(f"{self.describe()} is not open")
            generation = self._generation
            while accepted < len(data):
                ring = self._ring
                if ring is None or self._generation != generation or self._failure is not None:
                    break  # flushed or closed meanwhile: the rest of this audio is stale
                room = ring.room
                if room == 0:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._cond.wait(remaining)
                    continue
                if accepted == 0 and self._drained_at is not None:
                    if time.monotonic() - self._drained_at < UNDERRUN_GAP_S:
                        self._underruns += 1
                    self._drained_at = None
                n = min(room, len(data) - accepted)
                ring.put(data[accepted : accepted + n])
                accepted += n
                self._last_write_at = time.monotonic()
                self._cond.notify_all()
        return accepted

    def flush(self) -> int:
        with self._cond:
            self._generation += 1
            self._drained_at = None
            dropped = 0 if self._ring is None else self._ring.clear()
            self._cond.notify_all()
        return dropped

    def _busy(self, now: float) -> bool:
        """With the lock held: queued, being emitted, or the last block still sounding."""
        return bool(
            (self._ring is not None and self._ring.frames)
            or self._emitting
            or now < self._sounding_until
        )

    @property
    def playing(self) -> bool:
        with self._cond:
            return self._busy(time.monotonic())

    def wait_idle(self, timeout: float) -> bool:
        """Wait until the queue is empty and the last block has finished sounding.

        Raises:
            SinkError: the output failed meanwhile (it would never drain).
        """
        deadline = time.monotonic() + max(0.0, timeout)
        with self._cond:
            self._drain_requested(True)
            try:
                while True:
                    if self._failure is not None:
                        raise SinkError(self._failure)
                    now = time.monotonic()
                    if not self._busy(now):
                        return True
                    remaining = deadline - now
                    if remaining <= 0:
                        return False
                    queued = self._ring is not None and self._ring.frames
                    if not queued and not self._emitting:
                        remaining = min(remaining, self._sounding_until - now)
                    self._cond.wait(remaining)
            finally:
                self._drain_requested(False)

    def _drain_requested(self, waiting: bool) -> None:
        """With the lock held: a caller waits for the queue to drain (hook for subclasses)."""

    # ------------------------------------------------------------------ consumer side

    def _take_block(self, out: np.ndarray, start: float, now: float, duration: float) -> int:
        """With the lock held: fill ``out`` with the next block, zero-padded; return audio frames.

        ``start`` is when the block's first sample sounds, ``duration`` how long it
        sounds (0 for offline rendering), ``now`` the consumer's clock reading.
        """
        ring = self._ring
        n = 0 if ring is None else ring.get_into(out)
        if n < len(out):
            out[n:] = 0
            if self._last_tick_audio:
                self._drained_at = now
        self._last_tick_audio = n > 0
        if n:
            self._blocks_played += 1
            self._sounding_until = start + duration
            self._emitting = True
        self._cond.notify_all()
        return n

    def _emit(self, block: np.ndarray, start: float) -> None:
        """Without the lock: hand the played block to ``on_played``; never raises."""
        try:
            if self._on_played is not None:
                self._on_played(block, start)
        except Exception as err:  # the output must keep running whatever the callback does
            if self._callback_error is None:
                self._callback_error = f"{type(err).__name__}: {err}"
        finally:
            with self._cond:
                self._emitting = False
                self._cond.notify_all()


# --------------------------------------------------------------------------- device


def describe_output_devices(devices: Iterable[Mapping[str, Any]]) -> str:
    """List output devices, or say there are none (see ``portaudio.describe_devices``)."""
    return describe_devices(devices, OUTPUT)


def resolve_output_device(
    devices: Iterable[Mapping[str, Any]], wanted: int | str | None
) -> int | None:
    """The index of an output device, None for the default (``portaudio.resolve_device``)."""
    return resolve_device(devices, wanted, OUTPUT)


def _import_sounddevice() -> ModuleType:
    """Import sounddevice; a missing PortAudio library becomes a SinkError."""
    return import_sounddevice(SinkError, "use sink:=null or sink:=wav")


def _usable_clock(value: float) -> bool:
    """A PortAudio time that carries information (0 means the host API provides none)."""
    return math.isfinite(value) and value != 0.0


class SoundDeviceSink(_QueuedSink):
    """Playback on a PortAudio output device through a ``sounddevice`` callback stream.

    The callback (PortAudio's thread, every ``block_frames``) copies the next
    block out of the queue, or zeros when it is empty: silence between
    utterances is normal idle, not an error. A :meth:`flush` empties the queue
    under the same lock, so it takes effect in the very next callback; what
    PortAudio and the sound server already buffer (the output latency) still
    comes out, and :attr:`playing` stays True until it has.

    Each block's DAC time is ``time_info.outputBufferDacTime`` mapped onto
    ``time.monotonic()`` with :class:`~omniflow.core.clock.ClockMapper`
    (observing ``currentTime`` in every callback). On devices that report no
    clock (zeros) the fallback is the callback time plus the stream's output
    latency, and a warning is emitted once through ``warn``.

    Sample rate: when the device cannot run at ``sample_rate``, :meth:`open`
    opens it at the device's default rate instead, sets :attr:`sample_rate` to
    that rate and scales :attr:`block_frames` to keep the block duration, and
    warns. The sink does not resample: callers write at ``sink.sample_rate``
    as read after :meth:`open` (the speech node resamples synthesised speech
    to it with :func:`omniflow.core.resample.resample_int16`).

    Args:
        device: None for the default output, a PortAudio index, or a name
            (case-insensitive, exact or unique substring) among output devices.
        sample_rate: Requested rate (see above).
        block_frames: Frames per callback and per block.
        max_queue_s: Capacity of the queue in seconds of audio.
        on_played: Called from the PortAudio thread once per block with audio.
        warn: Receives one-line warnings (e.g. a node logger's ``warning``).
        latency: PortAudio's suggested output latency: ``"low"`` (default, the
            shortest stop latency), ``"high"``, or seconds.
    """

    def __init__(
        self,
        device: int | str | None,
        sample_rate: int = SAMPLE_RATE,
        block_frames: int = 320,
        max_queue_s: float = 2.0,
        on_played: PlayedCallback | None = None,
        warn: Warn | None = None,
        latency: float | str = "low",
    ) -> None:
        super().__init__(sample_rate, block_frames, max_queue_s, on_played, warn)
        self._device = device
        self._latency = latency
        self._requested_rate = sample_rate
        self._requested_block = block_frames
        self._clock = ClockMapper()
        self._stream: Any = None
        self._closing = False
        self._output_latency = 0.0
        self._device_underflows = 0
        self._device_label = "default output" if device is None else repr(device)
        self._fallback_warned = False

    @property
    def clock(self) -> ClockMapper:
        """The device-to-host clock mapping (for diagnostics)."""
        return self._clock

    @property
    def output_latency(self) -> float:
        """Output latency PortAudio reported for the open stream, in seconds."""
        return self._output_latency

    @property
    def device_underflows(self) -> int:
        """Callbacks for which PortAudio reported an output underflow (an xrun)."""
        return self._device_underflows

    def open(self) -> None:
        """Find the device, pick the rate, and start the stream.

        Raises:
            SinkError: PortAudio is missing, or the device cannot be started.
            DeviceNotFoundError: no such output device (the message lists them).
        """
        if self._stream is not None:
            return
        sd = _import_sounddevice()
        info = find_device(sd, self._device, OUTPUT, SinkError)
        device_index = int(info["index"])
        self._device_label = f"{device_index} {info['name']!r}"
        rate = self._pick_rate(sd, device_index, info)
        self.sample_rate = rate
        self.block_frames = max(1, round(self._requested_block * rate / self._requested_rate))
        self._clock.reset()
        self._fallback_warned = False
        self._device_underflows = 0
        self._closing = False
        self._start_queue()
        try:
            stream = sd.OutputStream(
                device=device_index,
                samplerate=rate,
                channels=1,
                dtype="int16",
                blocksize=self.block_frames,
                latency=self._latency,
                callback=self._callback,
                finished_callback=self._finished,
            )
            self._output_latency = float(stream.latency)
            stream.start()
        except (sd.PortAudioError, ValueError) as err:
            self._stop_queue()
            raise SinkError(f"cannot start output device {self._device_label}: {err}") from err
        self._stream = stream

    def _pick_rate(self, sd: ModuleType, device_index: int, info: Mapping[str, Any]) -> int:
        """The requested rate if the device takes it, else its default rate (with a warning)."""
        try:
            sd.check_output_settings(
                device=device_index, channels=1, dtype="int16", samplerate=self._requested_rate
            )
            return self._requested_rate
        except (sd.PortAudioError, ValueError) as err:
            reason = err
        default = int(round(float(info["default_samplerate"])))
        try:
            sd.check_output_settings(
                device=device_index, channels=1, dtype="int16", samplerate=default
            )
        except (sd.PortAudioError, ValueError) as err:
            raise SinkError(
                f"output device {self._device_label} plays neither {self._requested_rate} Hz "
                f"({reason}) nor its default {default} Hz ({err}) as mono int16"
            ) from err
        if self._warn is not None:
            self._warn(
                f"output device {self._device_label} does not play {self._requested_rate} Hz "
                f"({reason}); using its default {default} Hz: write audio at sink.sample_rate"
            )
        return default

    def _callback(self, outdata: np.ndarray, frames: int, time_info: Any, status: Any) -> None:
        """PortAudio thread: next block out of the queue (zeros when idle). Must not raise."""
        host_now = time.monotonic()
        self._clock.observe(time_info.currentTime, host_now)
        dac = time_info.outputBufferDacTime
        if self._clock.device_clock_ok and _usable_clock(dac):
            start = self._clock.to_host(dac)
        else:
            start = host_now + self._output_latency
        if status.output_underflow:
            self._device_underflows += 1
        out = outdata[:, 0]
        with self._cond:
            audio = self._take_block(out, start, host_now, frames / self.sample_rate)
        if audio:
            self._emit(out.copy(), start)

    def _finished(self) -> None:
        """PortAudio thread: the stream stopped; unexpected unless we are closing."""
        with self._cond:
            if not self._closing:
                self._failure = f"output device {self._device_label} stopped unexpectedly"
            self._cond.notify_all()

    def _check_health(self) -> None:
        super()._check_health()
        clock = self._clock
        if not self._fallback_warned and clock.observations >= 3 and not clock.device_clock_ok:
            self._fallback_warned = True
            if self._warn is not None:
                self._warn(
                    f"output device {self._device_label} reports no stream clock; played "
                    "times are the callback time plus the output latency "
                    f"({self._output_latency * 1000:.1f} ms)"
                )

    def close(self) -> None:
        """Stop the stream at once and close it; safe to call twice or before open()."""
        stream, self._stream = self._stream, None
        if stream is None:
            return
        with self._cond:
            self._closing = True
        try:  # without the lock: abort waits for a running callback, which takes it
            stream.abort()
            stream.close()
        except Exception:  # closing a device that already died must not raise
            pass
        self._stop_queue()

    def describe(self) -> str:
        rate = f"{self.sample_rate} Hz"
        if self.sample_rate != self._requested_rate:
            rate += f" (requested {self._requested_rate} Hz)"
        return f"audio output {self._device_label}, {rate}, {self.block_frames}-frame blocks"


# --------------------------------------------------------------------------- paced sinks


class _PacedSink(_QueuedSink):
    """A sink whose own thread consumes the queue like a sound card would.

    In real time (``realtime=True``) one block is taken per block period,
    paced with :class:`~omniflow.core.timing.Pacer` on ``time.monotonic()``;
    the thread sleeps while the queue is empty and restarts the schedule when
    audio arrives (never before the previous block has finished sounding).
    A block "plays" at its slot in that schedule, like a sound card's DAC
    clock: stamps advance by exactly one block period while playback is
    continuous, even when the thread wakes a little late; after a stall of more
    than :attr:`MAX_LAG_BLOCKS` blocks the schedule (and the stamps) restart
    from the clock instead of bursting out the backlog.

    With ``realtime=False`` blocks are consumed as fast as they arrive
    (offline rendering) and stamped with the consumption time. A partial last
    block is then held until no audio was written for one block period or
    someone calls :meth:`wait_idle`, so audio written piece by piece renders
    without inserted padding.
    """

    #: Blocks the thread may fall behind its schedule before it restarts the schedule.
    MAX_LAG_BLOCKS = 3.0

    def __init__(
        self,
        sample_rate: int,
        block_frames: int,
        max_queue_s: float,
        realtime: bool,
        on_played: PlayedCallback | None,
        warn: Warn | None,
    ) -> None:
        super().__init__(sample_rate, block_frames, max_queue_s, on_played, warn)
        self.realtime = realtime
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._closing = False
        self._drain_waiters = 0

    def open(self) -> None:
        if self._thread is not None:
            return
        self._open_output()
        self._start_queue()
        self._stop.clear()
        self._closing = False
        self._thread = threading.Thread(
            target=self._run, name=f"omniflow-{type(self).__name__}", daemon=True
        )
        self._thread.start()

    def _open_output(self) -> None:
        """Acquire whatever the blocks go to (hook for subclasses)."""

    def _close_output(self) -> None:
        """Release it after the thread ended (hook for subclasses)."""

    def _output(self, block: np.ndarray) -> None:
        """Consumer thread: deliver one played block (hook for subclasses)."""

    def _drain_requested(self, waiting: bool) -> None:
        self._drain_waiters += 1 if waiting else -1
        self._cond.notify_all()

    def _run(self) -> None:
        try:
            if self.realtime:
                self._run_realtime()
            else:
                self._run_offline()
        except Exception as err:  # an output error (disk full) must not leave writers hanging
            with self._cond:
                self._failure = f"{self.describe()} failed: {type(err).__name__}: {err}"
                self._cond.notify_all()

    def _wait_for_audio(self, full_block_only: bool) -> bool:
        """With the lock held: wait until a block can be taken; False when closing."""
        while not self._closing:
            ring = self._ring
            queued = 0 if ring is None else ring.frames
            if queued >= self.block_frames or (queued and not full_block_only):
                return True
            timeout = 0.5  # only a safety net: writes and close() notify
            if queued:  # offline: a partial tail plays once the writer paused for a block
                quiet = self._last_write_at + self.block_duration - time.monotonic()
                if quiet <= 0 or self._drain_waiters:
                    return True
                timeout = quiet
            self._cond.wait(timeout)
        return False

    def _run_realtime(self) -> None:
        period = self.block_duration
        while True:
            with self._cond:
                if not self._wait_for_audio(full_block_only=False):
                    return
                lead = self._sounding_until - time.monotonic()
            if lead > 0 and self._stop.wait(lead):
                return
            pacer = Pacer(period, max_lag=self.MAX_LAG_BLOCKS)
            start = -math.inf
            resyncs = -1
            while pacer.wait(self._stop):
                now = time.monotonic()
                if pacer.resyncs != resyncs:  # first block, or the schedule restarted
                    resyncs = pacer.resyncs
                    start = now
                block = np.empty(self.block_frames, dtype=np.int16)
                with self._cond:
                    audio = self._take_block(block, start, now, period)
                if not audio:
                    break  # the queue ran dry: sleep until the next write
                self._deliver(block, start)
                start += period
            else:
                return

    def _run_offline(self) -> None:
        while True:
            with self._cond:
                if not self._wait_for_audio(full_block_only=True):
                    return
                now = time.monotonic()
                block = np.empty(self.block_frames, dtype=np.int16)
                self._take_block(block, now, now, 0.0)
            self._deliver(block, now)

    def _deliver(self, block: np.ndarray, start: float) -> None:
        try:
            self._output(block)
        except BaseException:
            with self._cond:
                self._emitting = False
            raise
        self._emit(block, start)

    def close(self) -> None:
        """Stop the thread (queued audio is dropped) and release the output."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._stop.set()
        thread.join(timeout=5.0)
        self._stop_queue()
        self._close_output()


class NullSink(_PacedSink):
    """Plays into nothing, in real time: for machines without sound.

    A thread consumes one block per block period and reports it to
    ``on_played``, so timing (first audio, stop latency, echo-reference
    stamps) behaves as with a sound card whose latency is zero.

    Args:
        sample_rate: Rate of the samples written.
        block_frames: Frames per block.
        max_queue_s: Capacity of the queue in seconds of audio.
        on_played: Called from the sink's thread once per block with audio.
        warn: Receives one-line warnings (an ``on_played`` that raised).
    """

    def __init__(
        self,
        sample_rate: int = SAMPLE_RATE,
        block_frames: int = 320,
        max_queue_s: float = 2.0,
        on_played: PlayedCallback | None = None,
        warn: Warn | None = None,
    ) -> None:
        super().__init__(sample_rate, block_frames, max_queue_s, True, on_played, warn)

    def describe(self) -> str:
        return f"null audio output, {self.sample_rate} Hz, {self.block_frames}-frame blocks"


class WavFileSink(_PacedSink):
    """Writes every played block to a mono PCM_16 WAV file.

    Only played blocks are written: silence between utterances is not, so the
    file holds the speech back to back, each drained utterance's last block
    zero-padded to a block. A flushed utterance is cut where playback stopped.
    With ``realtime=False`` audio is consumed as fast as it is written (offline
    rendering; call :meth:`wait_idle` before :meth:`close`, which drops what is
    still queued). The header is finalised by :meth:`close`.

    Args:
        path: The WAV file to create (overwritten if it exists).
        sample_rate: Rate of the samples written and of the file.
        block_frames: Frames per block.
        max_queue_s: Capacity of the queue in seconds of audio.
        realtime: Consume one block per block period (True) or at once.
        on_played: Called from the sink's thread once per block written.
        warn: Receives one-line warnings (an ``on_played`` that raised).
    """

    def __init__(
        self,
        path: str | Path,
        sample_rate: int = SAMPLE_RATE,
        block_frames: int = 320,
        max_queue_s: float = 2.0,
        realtime: bool = True,
        on_played: PlayedCallback | None = None,
        warn: Warn | None = None,
    ) -> None:
        super().__init__(sample_rate, block_frames, max_queue_s, realtime, on_played, warn)
        self.path = Path(path)
        self._file: soundfile.SoundFile | None = None

    def _open_output(self) -> None:
        if self.path.is_dir():
            raise SinkError(f"cannot write WAV file {self.path}: it is a directory")
        if not self.path.parent.is_dir():
            raise SinkError(
                f"cannot write WAV file {self.path}: directory {self.path.parent} does not exist"
            )
        try:
            self._file = soundfile.SoundFile(
                str(self.path),
                "w",
                samplerate=self.sample_rate,
                channels=1,
                subtype="PCM_16",
                format="WAV",
            )
        except (soundfile.SoundFileError, OSError, RuntimeError) as err:
            raise SinkError(f"cannot write WAV file {self.path}: {err}") from err

    def _output(self, block: np.ndarray) -> None:
        assert self._file is not None
        self._file.write(block)

    def _close_output(self) -> None:
        handle, self._file = self._file, None
        if handle is not None:
            try:
                handle.close()
            except (soundfile.SoundFileError, OSError, RuntimeError) as err:
                raise SinkError(f"cannot finish WAV file {self.path}: {err}") from err

    def describe(self) -> str:
        pace = "real time" if self.realtime else "as fast as possible"
        return (
            f"WAV file {self.path}, {self.sample_rate} Hz, {self.block_frames}-frame blocks, {pace}"
        )


# --------------------------------------------------------------------------- factory


def open_audio_sink(
    sink: str,
    location: str,
    *,
    sample_rate: int,
    block_frames: int,
    max_queue_s: float = 2.0,
    on_played: PlayedCallback | None = None,
    warn: Warn | None = None,
) -> AudioSink:
    """Construct (not open) the audio sink a node's parameters describe.

    Args:
        sink: ``"device"``, ``"wav"`` or ``"null"``.
        location: For a device: ``""`` for the default output, a digit string
            for an index, anything else a name. For a WAV file: its path.
            Ignored for the null sink.
        sample_rate, block_frames, max_queue_s, on_played: As for the sinks.
        warn: Receives one-line warnings (e.g. a node logger's ``warning``).

    Raises:
        ConfigError: unknown ``sink``, empty WAV path, or invalid values.
    """
    if sink == "device":
        return SoundDeviceSink(
            parse_device(location),
            sample_rate=sample_rate,
            block_frames=block_frames,
            max_queue_s=max_queue_s,
            on_played=on_played,
            warn=warn,
        )
    if sink == "wav":
        if not location.strip():
            raise ConfigError("sink 'wav' needs a location: the path of the WAV file to write")
        return WavFileSink(
            location,
            sample_rate=sample_rate,
            block_frames=block_frames,
            max_queue_s=max_queue_s,
            on_played=on_played,
            warn=warn,
        )
    if sink == "null":
        return NullSink(
            sample_rate=sample_rate,
            block_frames=block_frames,
            max_queue_s=max_queue_s,
            on_played=on_played,
            warn=warn,
        )
    allowed = ", ".join(repr(name) for name in AUDIO_SINKS)
    raise ConfigError(f"unknown audio sink {sink!r}; allowed values: {allowed}")
