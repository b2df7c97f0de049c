"""How often a log line may repeat: once per period for each kind of problem.

A flood of one problem (a publisher sending 44.1 kHz audio at 25 Hz) must neither fill the
log nor hide another problem, so lines are throttled per kind: the text with its numbers
masked (``sample_rate 44100 Hz`` and ``sample_rate 48000 Hz`` are one kind). No ROS imports.
"""

from __future__ import annotations

import re

__all__ = ["KindThrottle"]

_DIGITS = re.compile(r"\d+")


class KindThrottle:
    """``due(text, now_s)`` is True at most once per ``period_s`` for each kind of text.

    At most ``max_kinds`` kinds are remembered (user-controlled text makes them unbounded);
    beyond that the memory starts afresh. Not thread-safe: guard it with the caller's lock.
    """

    def __init__(self, period_s: float = 5.0, max_kinds: int = 64) -> None:
        self.period_s = period_s
        self.max_kinds = max_kinds
        self._last: dict[str, float] = {}

    def due(self, text: str, now_s: float) -> bool:
        """Whether a line of this kind may be logged at ``now_s`` (monotonic seconds); if so,
        it counts as logged."""
        kind = _DIGITS.sub("#", text)
        if len(self._last) >= self.max_kinds:
            self._last.clear()
        if now_s - self._last.get(kind, -self.period_s) < self.period_s:
            return False
        self._last[kind] = now_s
        return True
