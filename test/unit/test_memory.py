"""Handing freed memory back to the system (tier 1, no ROS, no model): glibc's arenas keep
what a process frees until malloc_trim gives it back, and Python's free lists keep freed
tuples until a full collection empties them."""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import gc
import os
import sys
import weakref

import pytest

from omniflow.engines.memory import PythonHeap, release_free_memory

BLOCK = 64 * 1024  # below glibc's smallest mmap threshold: served from an arena
BLOCKS = 400  # 25 MiB
PAGE = os.sysconf("SC_PAGE_SIZE")

libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]

needs_malloc_trim = pytest.mark.skipif(
    not hasattr(libc, "malloc_trim"), reason="this C library has no malloc_trim (not glibc)"
)


def resident_mib() -> float:
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * PAGE / 2**20


@needs_malloc_trim
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


# ---------------------------------------------------------------- the Python heap
class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def heap():
    """A PythonHeap on a hand-moved clock; the process's heap is thawed again afterwards
    (gc is process-wide: the rest of the session must not stay frozen)."""
    clock = Clock()
    keeper = PythonHeap(collect_every_s=30.0, clock=clock)
    keeper.clock = clock
    try:
        yield keeper
    finally:
        keeper.close()
        gc.unfreeze()


@dataclasses.dataclass
class Counters:
    a: int = 0
    b: int = 0
    c: int = 0


def test_python_free_lists_fill_and_a_tick_of_a_settled_heap_empties_them(heap):
    """The creep the heap keeper exists for: a tuple built from a generator (here
    dataclasses.fields, as every node's diagnostics call it once a second) leaves a block on
    a free list each call until the list holds 2000; only a full collection empties it."""
    counters = Counters()
    heap.settle()
    before = sys.getallocatedblocks()
    for _ in range(1000):
        dataclasses.fields(counters)
    kept = sys.getallocatedblocks() - before
    assert kept > 500, f"{kept} blocks kept: CPython no longer fills its tuple free lists so"
    heap.clock.now = 30.0
    heap.tick()  # the periodic collection
    assert sys.getallocatedblocks() - before < kept / 10
    assert heap.stats.collections == 1


def test_the_heap_collects_every_period_once_settled(heap):
    heap.clock.now = 100.0
    heap.tick()
    assert not heap.settled and heap.stats.collections == 0, "collected before a settle"
    heap.settle()
    assert heap.settled and gc.get_freeze_count() > 0
    assert heap.stats.settles == 1 and heap.stats.frozen > 1000  # the interpreter, pytest
    heap.clock.now = 129.0
    heap.tick()
    assert heap.stats.collections == 0
    heap.clock.now = 130.0
    heap.tick()
    assert heap.stats.collections == 1
    heap.settle()  # a transition: thawed, collected, frozen again; the period starts over
    assert heap.settled and heap.stats.settles == 2
    heap.clock.now = 159.0
    heap.tick()
    assert heap.stats.collections == 1
    heap.close()
    assert gc.get_freeze_count() == 0
    heap.clock.now = 1e9
    heap.tick()
    assert not heap.settled and heap.stats.collections == 1, "a closed heap collected"


class Engine:
    """Something a node drops on a transition, in a reference cycle (as objects holding
    their own bound methods are)."""

    def __init__(self) -> None:
        self.me = self


def test_what_a_transition_drops_is_collected_when_it_settles_the_heap(heap):
    engine = Engine()
    alive = weakref.ref(engine)
    heap.settle()
    del engine  # released by a transition, but frozen: never visited
    heap.clock.now = 30.0
    heap.tick()
    assert alive() is not None, "a frozen cycle was collected: the test shows nothing"
    heap.settle()  # what the end of every transition calls
    assert alive() is None
