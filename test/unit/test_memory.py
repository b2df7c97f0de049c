"""Handing freed memory back to the system (tier 1, no ROS, no model): glibc's arenas keep
what a process frees until malloc_trim gives it back."""

from __future__ import annotations

import ctypes
import ctypes.util
import os

import pytest

from omniflow.engines.memory import release_free_memory

BLOCK = 64 * 1024  # below glibc's smallest mmap threshold: served from an arena
BLOCKS = 400  # 25 MiB
PAGE = os.sysconf("SC_PAGE_SIZE")

libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]

pytestmark = pytest.mark.skipif(
    not hasattr(libc, "malloc_trim"), reason="this C library has no malloc_trim (not glibc)"
)


def resident_mib() -> float:
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * PAGE / 2**20


def test_freed_blocks_the_arena_keeps_go_back_to_the_system() -> None:
    release_free_memory()
    blocks = [libc.malloc(BLOCK) for _ in range(BLOCKS)]
    fence = libc.malloc(BLOCK)  # keeps the freed blocks below the heap's top, where free()
    assert all(blocks) and fence  # itself would give them back
    for block in blocks:
        ctypes.memset(block, 1, BLOCK)
    touched = resident_mib()
    for block in blocks:
        libc.free(block)
    kept = resident_mib()
    assert release_free_memory()
    released = resident_mib()
    libc.free(fence)
    freed_mib = BLOCK * BLOCKS / 2**20
    assert touched - kept < freed_mib / 4, "free() alone gave the blocks back: nothing to test"
    assert kept - released > freed_mib * 3 / 4, (touched, kept, released)
