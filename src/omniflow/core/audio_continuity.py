"""Continuity of a stamped audio stream as it arrives: gaps, duplicates, overlaps, restarts.

A consumer of audio chunks (the fusion node) must neither feed the same audio twice to its
VAD and recogniser nor stay silent about audio that never came. Each chunk carries a
``sequence`` (its block index in stream time: +1 per block) and a stamp (its first sample);
:class:`AudioContinuity` judges every chunk against what was received before it:

- a **gap**: the sequence jumps forward by more than one (``missing`` counts the blocks);
  the chunk itself is kept;
- a **duplicate**: a chunk with the sequence and stamp of one received in the last
  ``restart_ns`` (sent twice): dropped;
- an **overlap**: a chunk stamped more than ``jitter_ns`` inside the span of audio already
  received: the part already covered is dropped (all of it when the chunk lies inside);
- a **restart**: a stamp more than ``restart_ns`` back (a bag looping, a source restarted:
  a loop repeats the same sequences and stamps) or a sequence that goes back: a new
  stream, taken whole, with tracking started afresh
  (the fusion pipeline ends the speech it cuts, see ``FusionPipeline``).

Small overlaps up to ``jitter_ns`` are stamping jitter, not repeated audio, and pass as they
are. No ROS imports, no clock: plain values in, a :class:`Verdict` out.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from omniflow.core.timing import NS_PER_MS, NS_PER_S, NS_PER_SAMPLE

__all__ = ["JITTER_NS", "RESTART_NS", "AudioContinuity", "ContinuityCounts", "Verdict"]

# Overlaps up to this are stamping jitter (half a 40 ms chunk), not audio received twice.
JITTER_NS = 20 * NS_PER_MS
# A stamp this far before the end of the audio received starts a new stream (as the fusion
# pipeline's own restart test).
RESTART_NS = NS_PER_S
# (sequence, stamp) pairs remembered to recognise a chunk sent twice: 4 s of 40 ms chunks.
_RECENT = 100


@dataclass
class ContinuityCounts:
    """What the stream's continuity looked like so far (plain values for diagnostics)."""

    gaps: int = 0  # forward jumps of the sequence
    missing: int = 0  # chunks missing in those jumps
    duplicates: int = 0  # chunks received twice (same sequence and stamp): dropped
    overlaps: int = 0  # chunks stamped inside audio already received: that part dropped
    overlap_ms: float = 0.0  # audio dropped as overlapping
    restarts: int = 0  # the stream went back in time or in sequence: a new stream
    # The sequence of the first chunk of the stream followed now (-1: none yet): a source's
    # chunks before it (sent before this subscriber matched, say) were never received.
    first_sequence: int = -1


@dataclass(frozen=True)
class Verdict:
    """What to do with one chunk: feed ``samples`` stamped ``stamp_ns`` (None: nothing of it
    is new); ``problems`` says, in words, what was wrong with it (empty: nothing)."""

    stamp_ns: int
    samples: np.ndarray | None
    problems: tuple[str, ...] = field(default_factory=tuple)


class AudioContinuity:
    """Judges each arriving chunk against the stream received so far; see the module text.

    Not thread-safe: guard it with the caller's lock.
    """

    def __init__(self, jitter_ns: int = JITTER_NS, restart_ns: int = RESTART_NS) -> None:
        self.jitter_ns = jitter_ns
        self.restart_ns = restart_ns
        self.counts = ContinuityCounts()
        self.reset()

    def reset(self) -> None:
        """Forget the stream (a new one starts with the next chunk); the counts stay."""
        self._last_sequence: int | None = None
        self._received_end_ns: int | None = None
        self._recent: deque[tuple[int, int]] = deque(maxlen=_RECENT)

    def observe(self, sequence: int, stamp_ns: int, samples: np.ndarray) -> Verdict:
        """Account for one chunk and say what of it to keep."""
        end_ns = stamp_ns + len(samples) * NS_PER_SAMPLE
        key = (sequence, stamp_ns)
        problems: list[str] = []
        received_end = self._received_end_ns
        last = self._last_sequence
        if received_end is not None and stamp_ns < received_end - self.restart_ns:
            self.counts.restarts += 1
            problems.append(
                f"audio stream went back {(received_end - stamp_ns) / NS_PER_S:.1f} s at chunk "
                f"{sequence} (a loop or a restarted source): taken as a new stream"
            )
            self.reset()
            received_end = last = None
        elif key in self._recent:
            self.counts.duplicates += 1
            return Verdict(
                stamp_ns,
                None,
                (f"audio chunk {sequence} received twice (same sequence and stamp): dropped",),
            )
        elif last is not None and sequence < last:
            self.counts.restarts += 1
            problems.append(
                f"audio sequence went back from {last} to {sequence} (a restarted source): "
                "sequence tracking starts afresh"
            )
            last = None
        elif last is not None and sequence > last + 1:
            self.counts.gaps += 1
            self.counts.missing += sequence - last - 1
            problems.append(
                f"gap in the audio input: {sequence - last - 1} chunk(s) missing before "
                f"chunk {sequence}"
            )
        if last is None:
            self.counts.first_sequence = sequence
        self._last_sequence = sequence
        self._recent.append(key)
        overlap_ns = 0 if received_end is None else received_end - stamp_ns
        self._received_end_ns = end_ns if received_end is None else max(received_end, end_ns)
        if overlap_ns <= self.jitter_ns:
            return Verdict(stamp_ns, samples, tuple(problems))
        self.counts.overlaps += 1
        if end_ns <= received_end:
            self.counts.overlap_ms += (end_ns - stamp_ns) / NS_PER_MS
            problems.append(
                f"audio chunk {sequence} is stamped inside audio already received "
                f"({overlap_ns / NS_PER_MS:.0f} ms before its end): dropped"
            )
            return Verdict(stamp_ns, None, tuple(problems))
        skip = -(-overlap_ns // NS_PER_SAMPLE)  # whole samples already covered
        self.counts.overlap_ms += skip * NS_PER_SAMPLE / NS_PER_MS
        problems.append(
            f"audio chunk {sequence} overlaps audio already received by "
            f"{overlap_ns / NS_PER_MS:.0f} ms: only its new part is kept"
        )
        return Verdict(stamp_ns + skip * NS_PER_SAMPLE, samples[skip:], tuple(problems))
