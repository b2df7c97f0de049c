"""Stop strings: cut a stream of text deltas at the first one, never emitting part of it."""

from __future__ import annotations

__all__ = ["StopFilter"]


class StopFilter:
    """Cut a stream of text deltas at the first stop string, holding back possible starts.

    :meth:`feed` returns the text that is certainly not part of a stop string and whether
    a stop string was found (everything from it on is dropped); :meth:`flush` returns what
    was held back once the stream ended without a stop. Leading whitespace of the answer is
    dropped (base models start their answer with the space after "Robot:").
    """

    def __init__(self, stop: tuple[str, ...]) -> None:
        self._stop = tuple(s for s in stop if s)
        self._held = ""
        self._started = False
        self.stopped = False

    def feed(self, delta: str) -> str:
        """Add ``delta``; return the text now safe to emit ("" while held or stopped)."""
        if self.stopped:
            return ""
        text = self._held + delta
        if not self._started:
            text = text.lstrip()
            if not text:
                self._held = ""
                return ""
            self._started = True
        cut = min((i for i in (text.find(s) for s in self._stop) if i >= 0), default=-1)
        if cut >= 0:
            self.stopped = True
            self._held = ""
            return text[:cut]
        # Hold back the longest tail that is a proper prefix of a stop string.
        keep = 0
        for s in self._stop:
            for n in range(min(len(s) - 1, len(text)), keep, -1):
                if text.endswith(s[:n]):
                    keep = n
                    break
        self._held = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep]

    def flush(self) -> str:
        """The held-back text, at the end of a stream that did not stop."""
        held, self._held = ("" if self.stopped else self._held), ""
        return held
