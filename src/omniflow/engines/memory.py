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
``collect_every_s``, which empties the lists. A change that may leave long-lived objects
behind (a lifecycle transition: engines made or released) thaws the heap, so cycles among
what it dropped are collected, and it settles again after ``settle_after_s``. An idle speech
node then rose 136 kB in its first 10 minutes instead of 428 kB in 16.5; the slower growth a
soak of the whole graph measures after its warm-up is not these lists (benchmarks/README.md,
"Soak").
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["COLLECT_EVERY_S", "SETTLE_AFTER_S", "PythonHeap", "release_free_memory"]

#: How often a settled heap runs a full collection (which empties Python's free lists).
COLLECT_EVERY_S = 30.0
#: How long after a change the heap is frozen again: the transition's own work is done.
SETTLE_AFTER_S = 5.0


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
    """Keeps the Python heap of a long-running process flat (see the module docstring).

    Process-wide (``gc`` is): one per process, owned by the code that owns the process (the
    node executables, :mod:`omniflow.ros.run`), never by a library embedded in another
    program. :meth:`tick` runs on a periodic callback; :meth:`unsettle` on every change
    (from any thread: a multi-threaded executor may run both at once).
    """

    def __init__(
        self,
        collect_every_s: float = COLLECT_EVERY_S,
        settle_after_s: float = SETTLE_AFTER_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.collect_every_s, self.settle_after_s = collect_every_s, settle_after_s
        self._clock = clock
        self._lock = threading.Lock()
        self._settled = False
        self._due = clock() + settle_after_s
        self.stats = HeapStats()

    @property
    def settled(self) -> bool:
        return self._settled

    def unsettle(self) -> None:
        """Thaw the heap (what a change dropped becomes collectable) and settle it again
        ``settle_after_s`` from now."""
        with self._lock:
            if self._settled:
                gc.unfreeze()
                self._settled = False
            self._due = self._clock() + self.settle_after_s

    def tick(self) -> None:
        """Settle the heap once it is due (a full collection, 20-100 ms in a node, then
        ``gc.freeze``), or run the periodic collection of a settled one (~0.1 ms)."""
        with self._lock:
            now = self._clock()
            if now < self._due:
                return
            t0 = time.perf_counter()
            gc.collect()
            elapsed_ms = (time.perf_counter() - t0) * 1000.0
            if self._settled:
                self.stats.collections += 1
                self.stats.collect_ms = elapsed_ms
            else:
                gc.freeze()
                self._settled = True
                self.stats.settles += 1
                self.stats.frozen = gc.get_freeze_count()
                self.stats.settle_ms = elapsed_ms
            self._due = now + self.collect_every_s

    def close(self) -> None:
        """Thaw the heap for good (the node is gone: what it held is garbage to collect)."""
        with self._lock:
            if self._settled:
                gc.unfreeze()
                self._settled = False
            self._due = float("inf")
