"""The room's noise floor, tracked window by window, and the gate it puts on a voice detector.

A voice detector that judges each window on its own takes steady noise that sounds a little
like voice (a fan, pink noise, a motor) for speech that never ends: webrtcvad in pink noise at
10 dB SNR starts "speech" at once and keeps it until ``vad.max_utterance_s`` cuts it. Speech
is not steady: it rises well above the background on its syllables and falls back to it
between words. :class:`NoiseFloor` follows the background level the way the "minimum
statistics" noise estimators do (R. Martin, 2001): the level of each window (dBFS) is smoothed
over a few windows, and the floor is the lowest smoothed level of the last ``history_s``. In a
pause between words the smoothed level drops to the background, so the floor finds the noise
within ``history_s`` of it starting (or growing), and it never climbs into the speech while
someone talks, because no one talks without a pause for seconds.

A window is *loud enough* for speech when its level is at least ``margin_db`` above the floor
(``omniflow.engines.vad`` uses it: while speaking, a window that is not loud enough is
silence, and a start needs one loud window). Steady noise sits at the floor, so it is never
speech for more than ``history_s`` after it began; a voice 10 dB above it still clears the
margin on its syllables. No ROS imports, no I/O.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

__all__ = ["PRE_EMPHASIS", "SILENCE_DBFS", "NoiseFloor", "level_dbfs"]

#: Level given to digital silence (and the lowest level reported): -100 dBFS.
SILENCE_DBFS = -100.0
#: The floor is tracked on pre-emphasised audio (``x[n] - 0.97 x[n-1]``, +6 dB/octave, as
#: speech front-ends do): room noise is mostly low (a fan's hum, pink noise's 1/f), voice
#: carries its consonants and formants higher, and the low noise's slow swings no longer move
#: the level. Measured on a question in pink and fan noise at 10 and 5 dB SNR, 6 seeds: no
#: false start with it at a 6 dB margin, 30 in 48 runs without it (benchmarks/README.md).
PRE_EMPHASIS = 0.97


def level_dbfs(samples: np.ndarray, emphasis: float = 0.0) -> float:
    """RMS level of int16 ``samples`` in dB relative to full scale (>= :data:`SILENCE_DBFS`);
    with ``emphasis`` > 0, of the pre-emphasised samples ``x[n] - emphasis * x[n-1]``."""
    if not len(samples):
        return SILENCE_DBFS
    x = samples.astype(np.float64) / 32768.0
    if emphasis:
        x = x[1:] - emphasis * x[:-1]
    power = float(np.dot(x, x)) / len(x)
    return max(SILENCE_DBFS, 10.0 * math.log10(power)) if power > 0 else SILENCE_DBFS


class NoiseFloor:
    """Minimum-statistics noise floor over windows of ``window_s`` seconds (see the module).

    ``history_s``: how far back the floor looks (the longest a steady noise can pass as
    speech; longer than the longest stretch of speech without a pause). ``smoothing_s``: time
    constant of the level smoothing (a single quiet window is not the floor). ``margin_db``:
    how far above the floor a window must be to count as loud enough for speech.
    """

    def __init__(
        self,
        window_s: float,
        *,
        history_s: float = 1.5,
        smoothing_s: float = 0.06,
        margin_db: float = 6.0,
        settle_s: float = 0.5,
    ) -> None:
        for name, value in (("window_s", window_s), ("history_s", history_s)):
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name} must be a positive number of seconds, not {value}")
        if not math.isfinite(smoothing_s) or smoothing_s < 0:
            raise ValueError(f"smoothing_s must be a number of seconds >= 0, not {smoothing_s}")
        if not math.isfinite(margin_db) or margin_db < 0:
            raise ValueError(f"margin_db must be a number of dB >= 0, not {margin_db}")
        if not math.isfinite(settle_s) or settle_s < 0:
            raise ValueError(f"settle_s must be a number of seconds >= 0, not {settle_s}")
        self._alpha = 1.0 - math.exp(-window_s / smoothing_s) if smoothing_s > 0 else 1.0
        self._margin = float(margin_db)
        self._settle = round(settle_s / window_s)
        # (index, smoothed level) with increasing levels: the front is the minimum of the
        # last ``_span`` windows (a monotonic queue, O(1) per window).
        self._span = max(1, round(history_s / window_s))
        self._queue: deque[tuple[int, float]] = deque()
        self._index = 0
        self._smoothed: float | None = None

    @property
    def floor_dbfs(self) -> float | None:
        """The current floor, None before the first window."""
        return self._queue[0][1] if self._queue else None

    @property
    def margin_db(self) -> float:
        """How far above the floor a window must be to be loud enough for speech."""
        return self._margin

    def reset(self) -> None:
        """Forget the room (a new stream)."""
        self._queue.clear()
        self._index = 0
        self._smoothed = None

    def admits(self, samples: np.ndarray) -> bool:
        """Take one window of int16 samples; True when it is loud enough for speech (its
        pre-emphasised level, :data:`PRE_EMPHASIS`, judged by :meth:`update`)."""
        return self.update(level_dbfs(samples, PRE_EMPHASIS))

    def update(self, level_db: float) -> bool:
        """Take one window's level (dBFS); True when it is loud enough for speech.

        The window is judged against the floor of the windows before it, then joins them.
        """
        floor = self.floor_dbfs
        loud = (
            floor is not None and self._index >= self._settle and level_db >= floor + self._margin
        )
        s = self._smoothed
        s = level_db if s is None else s + self._alpha * (level_db - s)
        self._smoothed = s
        while self._queue and self._queue[-1][1] >= s:
            self._queue.pop()
        self._queue.append((self._index, s))
        while self._queue[0][0] <= self._index - self._span:
            self._queue.popleft()
        self._index += 1
        return loud
