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
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable

__all__ = ["release_free_memory"]


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
