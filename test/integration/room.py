"""A microphone in a room, for full-duplex tests: what the speaker plays comes back, delayed
and attenuated, mixed with a recorded user when the test says so."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import numpy as np
import soundfile

from omniflow.core.echo import EchoReference
from omniflow.msg import AudioChunk
from omniflow.ros import conversions
from omniflow.ros.conversions import ns_from_time
from omniflow.ros.qos import SENSOR_DATA

HELLO = Path(__file__).parents[1] / "data" / "samples" / "hello.wav"  # speech 0.5-3.2 s
RATE = 16_000
CHUNK = 640
CHUNK_NS = 40_000_000
ROBOT_TEXT = (
    "The red box on the table is a parcel for the kitchen. I can carry it there "
    "after I finish charging, or you can take it yourself right now."
)


def spoken(text: str) -> np.ndarray:
    """``text`` said by espeak-ng (en-us, 150 words/min), 16 kHz int16, as the benchmarks
    make their speech (scripts/make_sample_audio.py)."""
    sys.path.insert(0, str(Path(__file__).parents[2] / "scripts"))
    try:
        from make_sample_audio import synthesise
    finally:
        sys.path.pop(0)
    return synthesise(text, words_per_minute=150)


class Room:
    """A microphone in a room: every 40 ms (paced, continuous stamps) a chunk of what the
    speaker played ``delay_ms`` earlier, attenuated, with one reflection, plus noise, plus
    the user's recording once :meth:`user_speaks` was called.

    ``user``: the user's recording (16 kHz int16; default hello.wav at 0.8); ``noise``: a
    background the room plays on a loop from the first chunk (float samples at the scale
    they are heard, e.g. a fan from ``omniflow.core.room_sounds``)."""

    def __init__(
        self,
        node,
        namespace: str,
        delay_ms: float = 80.0,
        gain: float = 0.5,
        *,
        user: np.ndarray | None = None,
        noise: np.ndarray | None = None,
    ):
        self.node = node
        self._pub = node.create_publisher(AudioChunk, f"{namespace}/audio", SENSOR_DATA)
        self._played = EchoReference(history_ms=3000)
        self._lock = threading.Lock()
        node.create_subscription(
            AudioChunk, f"{namespace}/played_audio", self._on_played, SENSOR_DATA
        )
        self._delay_ns = int(delay_ms * 1e6)
        self._gain = gain
        self._rng = np.random.default_rng(0)
        if user is None:
            user, rate = soundfile.read(HELLO, dtype="int16")
            assert rate == RATE
            user = user * 0.8
        self._user = np.asarray(user, dtype=np.float64)
        self._noise = None if noise is None else np.asarray(noise, dtype=np.float64)
        frames = self._user[: len(self._user) // 160 * 160].reshape(-1, 160)
        power = (frames**2).mean(axis=1)
        #: Where the voice starts in the recording: the first 10 ms frame within 35 dB of
        #: the loudest (the earliest sign of voice), in nanoseconds.
        self.user_onset_ns = (
            int(np.flatnonzero(power > power.max() * 10**-3.5)[0]) * 160 * 1_000_000_000 // RATE
        )
        self._user_start_ns: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.first_stamp_ns = 0

    def _on_played(self, msg: AudioChunk) -> None:
        assert msg.sample_rate == RATE
        with self._lock:
            self._played.add(ns_from_time(msg.header.stamp), conversions.audio_samples(msg)[:, 0])

    def user_speaks(self, at_ns: int, recording: np.ndarray | None = None) -> None:
        """The user's recording (``recording``, 16 kHz int16, instead of the default one)
        starts at stream time ``at_ns``."""
        with self._lock:
            if recording is not None:
                self._user = recording.astype(np.float64) * 0.8
            self._user_start_ns = at_ns

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _chunk(self, stamp_ns: int) -> np.ndarray:
        with self._lock:
            direct = self._played.window(stamp_ns - self._delay_ns, CHUNK)
            reflection = self._played.window(stamp_ns - self._delay_ns - 15_000_000, CHUNK)
            x = self._gain * (direct + 0.4 * reflection)
            x += self._rng.standard_normal(CHUNK) * 30.0
            user, start_ns = self._user, self._user_start_ns
        if self._noise is not None:
            start = (stamp_ns - self.first_stamp_ns) // CHUNK_NS * CHUNK % len(self._noise)
            x += np.take(self._noise, np.arange(start, start + CHUNK), mode="wrap")
        if start_ns is not None:
            offset = (stamp_ns - start_ns) * RATE // 1_000_000_000
            lo, hi = max(offset, 0), min(offset + CHUNK, len(user))
            if lo < hi:
                x[lo - offset : hi - offset] += user[lo:hi]
        return np.clip(np.round(x), -32768, 32767).astype(np.int16)

    def _run(self) -> None:
        clock = self.node.get_clock()
        stamp = clock.now().nanoseconds
        self.first_stamp_ns = stamp
        while not self._stop.is_set():
            # A real microphone sends a chunk once its last sample is in.
            wait_s = (stamp + CHUNK_NS - clock.now().nanoseconds) / 1e9
            if wait_s > 0 and self._stop.wait(wait_s):
                return
            self._pub.publish(
                conversions.audio_chunk(
                    self._chunk(stamp),
                    stamp_ns=stamp,
                    frame_id="microphone",
                    sample_rate=RATE,
                    sequence=(stamp - self.first_stamp_ns) // CHUNK_NS,
                )
            )
            stamp += CHUNK_NS
