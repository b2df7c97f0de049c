"""Handing freed memory back to the system when an engine goes idle.

glibc keeps what a process frees in its malloc arenas for the next allocation, and raises
its mmap threshold each time a large mapped block is freed (up to 32 MiB), so after a few
decodes Whisper's tens of MB of tensors and buffers come from the arenas too. What they free
stays resident, and the fusion node's resident size depended on where a sample fell: its
lowest sample of each two minutes was either 416 or 427 MB for the last 50 minutes of an
85-minute soak. :func:`release_free_memory` calls ``malloc_trim(0)``, which gives the free
pages of every arena back (a few ms here) and keeps the allocator's settings, so the next
decode pays only for touching its pages again. The engines call it where a burst of work
ends and nothing waits: the recogniser between utterances after a full decode (never at a
pause inside one: the final that follows would pay for the pages, which cost Whisper's final
tens of ms in ``benchmarks/asr.py``), the dialogue's model after an answer. Fixing the mmap
threshold instead flattened the same memory but made Whisper's final decode about 10x slower.
With the release, the fusion node's floor came back to one level after every excursion in the
next 85-minute soak (benchmarks/README.md, "Soak").

Other C libraries (musl, macOS) have no ``malloc_trim``: there it does nothing.

Python's own heap climbs too. CPython keeps freed tuples
for reuse, up to 2000 of each length from 1 to 19, and only a full collection empties
those lists. A tuple built from a generator (``dataclasses.fields``, for one) is taken
from one list and freed into another, so the lists fill by about one tuple per call until
they are full, each a block the process keeps: an idle speech node's diagnostics once a
second kept 1-3 more blocks a second through the 18 minutes watched
(``sys.getallocatedblocks``; the lists are emptied by the collection ``tracemalloc`` users
run before a snapshot, so it does not show them). A process whose objects are all
made at start-up seldom runs a full collection (it waits for a quarter as many new
long-lived objects), and one costs 20-100 ms in a node (every object is visited).
:class:`PythonHeap` freezes what exists once the node has settled (``gc.freeze``: a frozen
object is never visited again), so a full collection costs about 0.1 ms, and runs one every
``collect_every_s``, which empties the lists. Every lifecycle transition (engines made or
released) settles the heap again at its end: thaw, a full collection that takes what the
transition dropped (cycles included), freeze. A transition is where a pause of 20-100 ms
costs no answer; settling a few seconds later could fall inside the first turn. An idle
speech node rose 136 kB in its first 10 minutes instead of 428 kB in 16.5; the slower growth a
soak of the whole graph measures after its warm-up is not these lists (benchmarks/README.md,
"Soak").
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["COLLECT_EVERY_S", "PythonHeap", "release_free_memory"]

#: How often a settled heap runs a full collection (which empties Python's free lists).
COLLECT_EVERY_S = 30.0


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError, TypeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def release_free_memory() -> bool:
    """Give the pages the process has freed back to the system (glibc's ``malloc_trim(0)``).

    Returns True when memory was released, False when there was none to release or the C
    library has no ``malloc_trim``. Thread-safe; it locks each arena in turn while it trims
    it, so call it from a thread whose work has just ended, never from an audio path.
    """
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False


@dataclass
class HeapStats:
    """What :class:`PythonHeap` did, for a node's status."""

    settles: int = 0  # full collections that froze what survived
    frozen: int = 0  # objects frozen at the last settle
    settle_ms: float = 0.0  # the last settle's full collection
    collections: int = 0  # cheap collections of the settled heap
    collect_ms: float = 0.0  # the last of them


class PythonHeap:
    """Keeps CPython's free lists from filling (see the module docstring).

    Process-wide (``gc`` is): one per process, owned by the code that owns the process (the
    node executables, :mod:`omniflow.ros.run`), never by a library embedded in another
    program. :meth:`settle` runs at the end of every lifecycle transition, where a pause of
    a full collection costs no answer; :meth:`tick` on a periodic callback. Either may run
    on any thread (a multi-threaded executor may run both at once).
    """

    def __init__(
        self, collect_every_s: float = COLLECT_EVERY_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.collect_every_s = collect_every_s
        self._clock = clock
        self._lock = threading.Lock()
        self._settled = False
        self._due = math.inf
        self.stats = HeapStats()

    @property
    def settled(self) -> bool:
        return self._settled

    def settle(self) -> None:
        """Thaw the heap, collect what the change dropped (cycles included) with a full
        collection (20-100 ms in a node), and freeze what survives."""
        with self._lock:
            if self._settled:
                gc.unfreeze()
            t0 = time.perf_counter()
            gc.collect()
            self.stats.settle_ms = (time.perf_counter() - t0) * 1000.0
            gc.freeze()
            self._settled = True
            self.stats.settles += 1
            self.stats.frozen = gc.get_freeze_count()
            self._due = self._clock() + self.collect_every_s

    def tick(self) -> None:
        """Run the periodic full collection of a settled heap when it is due (~0.1 ms: what
        was frozen is not visited); it empties the free lists."""
        with self._lock:
            now = self._clock()
            if not self._settled or now < self._due:
                return
            t0 = time.perf_counter()
            gc.collect()
            self.stats.collect_ms = (time.perf_counter() - t0) * 1000.0
            self.stats.collections += 1
            self._due = now + self.collect_every_s

    def close(self) -> None:
        """Thaw the heap for good (the node is gone: what it held is garbage to collect)."""
        with self._lock:
            if self._settled:
                gc.unfreeze()
                self._settled = False
            self._due = math.inf
