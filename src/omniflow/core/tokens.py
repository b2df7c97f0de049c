"""The temporal token ring: every stream's tokens in capture-time order, in fixed memory.

A :class:`Token` is one unit of a stream (an audio chunk's features, a frame's detections, a
word of a transcript): its capture stamp, modality, 32-bit semantic code, a reference to its
payload, its current resolution and how many association rounds it went unused.

:class:`TokenRing` keeps the newest ``capacity`` tokens of all streams, sorted by capture
stamp, so a time window is found by binary search instead of a scan. Invariants, checked by
the property tests:

- at most ``capacity`` tokens are held; storage (numpy columns and one fixed-length list of
  token rows, which hold the payload references) is allocated once, in the constructor, and
  never grows;
- tokens are in non-decreasing stamp order (ties keep their arrival order), oldest first;
- a token is either held (active), or was evicted, retired, dropped or rejected, and each of
  those is counted in :attr:`TokenRing.stats` with the last reason.

Arrival rules, against the newest stamp of the token's own stream (modality) accepted since
the last reset. Each stream is judged by itself because the streams reach the ring through
stages of different latency: a frame's token comes after the audio of the same moment (the
frame nearest a speech onset is encoded once the detector has confirmed the start, and a busy
machine hands over a backlog of audio in one go), so against the newest audio token a frame
on time for its own stream would look late:

- in order: appended at the newest end, O(1);
- up to ``reorder_tolerance_ns`` behind: inserted at its place in stamp order, shifting the
  newer tokens by one slot (O(k), k = the newer tokens of every stream: a few dozen at most,
  one numpy move per column);
- more than that behind: dropped and counted (``late_drops``), with the reason;
- more than ``reset_jump_ns`` behind: the stream's clock jumped back (a looping bag, a
  restarted source): everything is dropped (every stream's tokens: the streams share one
  timeline), ``resets`` counted, and the token starts afresh;
- when full, the oldest token is evicted (``evicted``); a token that would itself be the
  oldest of a full ring is the one that leaves.

Token ids are assigned on insert, increase monotonically and are never reused, so a stale id
never aliases a newer token. Stamps are integer nanoseconds of stream time (the node's clock,
sim time under replay), never the wall clock. No ROS imports.
"""

from __future__ import annotations

import bisect
import numbers
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from enum import IntEnum
from operator import attrgetter
from typing import Any

import numpy as np

from omniflow.core.timing import NS_PER_MS
from omniflow.errors import ConfigError

__all__ = [
    "CODE_MAX",
    "Modality",
    "Resolution",
    "RingStats",
    "Token",
    "TokenRing",
    "token_problem",
]

#: The largest semantic code: codes are unsigned 32-bit integers (``uint32 code`` in TokenRef).
CODE_MAX = 0xFFFF_FFFF

_INT64_MAX = 2**63 - 1


class Modality(IntEnum):
    """Which stream a token comes from; the values of TokenRef's ``MODALITY_*`` constants."""

    AUDIO = 0
    VISION = 1
    TEXT = 2


class Resolution(IntEnum):
    """How much of a token's payload is kept; the values of TokenRef's ``RESOLUTION_*``."""

    FULL = 0
    QUARTER = 1


_MODALITIES: tuple[Modality, ...] = tuple(Modality)
_RESOLUTIONS: tuple[Resolution, ...] = tuple(Resolution)


def _name(modality: int) -> str:
    """A modality's name in a reason ("vision")."""
    return _MODALITIES[modality].name.lower()


@dataclass(frozen=True, slots=True)
class Token:
    """One token of a stream, as inserted into or read back from a :class:`TokenRing`.

    ``stamp_ns`` is the capture time of the token's data; ``code`` the 32-bit semantic code
    (see :mod:`omniflow.core.semantic`); ``payload`` any object (an embedding, detections,
    text), held by reference. ``token_id`` is -1 until the ring assigns one on insert. Tokens
    read from the ring are snapshots: change a held token through the ring's methods.
    """

    stamp_ns: int
    modality: Modality
    code: int
    payload: Any = None
    resolution: Resolution = Resolution.FULL
    unused_rounds: int = 0
    token_id: int = -1


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def token_problem(
    token: Token, now_ns: int | None = None, max_future_ns: int | None = None
) -> str | None:
    """Say what is wrong with ``token`` (a sentence naming the field), or None if it is valid.

    Valid: a positive int64 stamp (0 is "no stamp" in ROS), a known modality and
    resolution, a code in [0, 2**32), a non-negative unused count and, when ``now_ns`` and
    ``max_future_ns`` are given, a stamp at most ``max_future_ns`` ahead of ``now_ns``.
    """
    stamp = token.stamp_ns
    if not _is_int(stamp) or not 0 < stamp <= _INT64_MAX:
        return f"stamp_ns must be a positive int64 (ns of stream time), got {stamp!r}"
    if not _is_int(token.modality) or not 0 <= token.modality < len(_MODALITIES):
        return f"unknown modality {token.modality!r}; allowed: " + ", ".join(
            f"{m.value} ({m.name})" for m in Modality
        )
    if not _is_int(token.code) or not 0 <= token.code <= CODE_MAX:
        return f"code must be an unsigned 32-bit integer, got {token.code!r}"
    if not _is_int(token.resolution) or not 0 <= token.resolution < len(_RESOLUTIONS):
        return f"unknown resolution {token.resolution!r}; allowed: " + ", ".join(
            f"{r.value} ({r.name})" for r in Resolution
        )
    if not _is_int(token.unused_rounds) or token.unused_rounds < 0:
        return f"unused_rounds must be a non-negative integer, got {token.unused_rounds!r}"
    if now_ns is not None and max_future_ns is not None and stamp > now_ns + max_future_ns:
        return (
            f"stamp_ns {stamp} is {(stamp - now_ns) / NS_PER_MS:.1f} ms ahead of now "
            f"(at most {max_future_ns / NS_PER_MS:.1f} ms allowed)"
        )
    return None


_STAMP = attrgetter("stamp_ns")


@dataclass
class RingStats:
    """What happened to the tokens offered to a ring; plain values for diagnostics."""

    inserted: int = 0  # accepted tokens (in order or re-ordered)
    out_of_order: int = 0  # of those, inserted behind a newer token (within the tolerance)
    evicted: int = 0  # left because the ring was full (the oldest)
    late_drops: int = 0  # arrived more than the reorder tolerance behind the newest
    rejected: int = 0  # invalid tokens (bad stamp, code, modality, ...)
    resets: int = 0  # the clock jumped back: the ring was emptied
    retired: int = 0  # removed from the active set (freshness policy)
    last_drop_reason: str = ""
    last_reject_reason: str = ""
    last_reset_reason: str = ""

    def as_dict(self) -> dict[str, int | str]:
        """Every counter and reason, by name."""
        return asdict(self)


class TokenRing:
    """A fixed-capacity buffer of tokens sorted by capture stamp (see the module docstring).

    Storage is a circular buffer: logical index 0 (the oldest token) lives at physical slot
    ``head``; index i at ``(head + i) % capacity``. Each slot is held twice, both allocated
    once: as numpy columns (stamp, modality, code, resolution, unused rounds, id), the
    vectorised view used for id look-ups and whole-buffer counts (:meth:`occupancy`), and as
    a row, the immutable :class:`Token` snapshot of the slot (which holds the payload
    reference) in a fixed-length list. Every change of a slot rewrites both; the tests check
    they agree. Rows make a query cheap: the held stamps are at most two sorted runs of the
    row list, searched with ``bisect`` (C) and returned by slicing, so no object is built per
    query. (At 128 slots a numpy ``searchsorted`` costs more in call overhead than the whole
    C bisect, and building snapshots from columns more than a linear scan: see
    ``benchmarks/fusion_core.py``.)

    Complexities: insert O(1) in order, O(k) re-ordered (k tokens shifted); ``query`` O(log n
    + m) for m results; ``get``/``mark_*``/``set_resolution`` O(n) vectorised (the id
    look-up); ``retire`` that plus moving the shorter side of the gap (at most n / 2 slots).

    Not thread-safe: one owner (the scheduler's thread) calls it.
    """

    def __init__(
        self,
        capacity: int = 128,
        reorder_tolerance_ns: int = 200 * NS_PER_MS,
        reset_jump_ns: int = 1_000 * NS_PER_MS,
        max_future_ns: int | None = 1_000 * NS_PER_MS,
    ) -> None:
        """Allocate the storage once.

        ``reorder_tolerance_ns``: how far behind the newest stamp of its own modality a token
        may arrive and still be inserted in order (cover the encoder's jitter).
        ``reset_jump_ns``: a token further behind its modality's newest than this means the
        clock jumped back; must exceed the tolerance. ``max_future_ns``: with
        ``insert(token, now_ns=...)``, tokens stamped further ahead of ``now_ns`` are rejected
        (None: no check).
        """
        if not _is_int(capacity) or capacity < 1:
            raise ConfigError(f"capacity must be a positive integer, got {capacity!r}")
        if not _is_int(reorder_tolerance_ns) or reorder_tolerance_ns < 0:
            raise ConfigError(
                f"reorder_tolerance_ns must be a non-negative integer, got {reorder_tolerance_ns!r}"
            )
        if not _is_int(reset_jump_ns) or reset_jump_ns <= reorder_tolerance_ns:
            raise ConfigError(
                f"reset_jump_ns ({reset_jump_ns!r}) must be an integer larger "
                f"than reorder_tolerance_ns ({reorder_tolerance_ns})"
            )
        if max_future_ns is not None and (not _is_int(max_future_ns) or max_future_ns < 0):
            raise ConfigError(
                f"max_future_ns must be None or a non-negative integer, got {max_future_ns!r}"
            )
        self._capacity = int(capacity)
        self._tolerance = int(reorder_tolerance_ns)
        self._reset_jump = int(reset_jump_ns)
        self._max_future = max_future_ns
        n = self._capacity
        self._stamps = np.zeros(n, dtype=np.int64)
        self._modality = np.zeros(n, dtype=np.uint8)
        self._code = np.zeros(n, dtype=np.uint32)
        self._resolution = np.zeros(n, dtype=np.uint8)
        self._unused = np.zeros(n, dtype=np.int64)
        self._ids = np.full(n, -1, dtype=np.int64)
        self._columns = (
            self._stamps,
            self._modality,
            self._code,
            self._resolution,
            self._unused,
            self._ids,
        )
        self._rows: list[Token | None] = [None] * n
        self._head = 0
        self._count = 0
        self._newest_seen: list[int | None] = [None] * len(_MODALITIES)  # per modality
        self._next_id = 1
        self.stats = RingStats()

    # ----------------------------------------------------------------- properties
    @property
    def capacity(self) -> int:
        """The number of slots, fixed at construction."""
        return self._capacity

    @property
    def reorder_tolerance_ns(self) -> int:
        """How far behind the newest stamp of its modality a token may still arrive."""
        return self._tolerance

    def __len__(self) -> int:
        return self._count

    @property
    def oldest_ns(self) -> int | None:
        """Stamp of the oldest held token, or None when empty."""
        return self._row(self._head).stamp_ns if self._count else None

    @property
    def newest_ns(self) -> int | None:
        """Stamp of the newest held token, or None when empty."""
        if not self._count:
            return None
        return self._row((self._head + self._count - 1) % self._capacity).stamp_ns

    @property
    def newest_seen_ns(self) -> int | None:
        """The newest stamp accepted since the last reset, of any modality (a late arrival
        is judged by its own modality's newest)."""
        return max((s for s in self._newest_seen if s is not None), default=None)

    def occupancy(self) -> dict[str, int]:
        """Held tokens per modality and per resolution, and free slots (for diagnostics)."""
        held = self._ids >= 0
        per_modality = np.bincount(self._modality[held], minlength=len(_MODALITIES))
        per_resolution = np.bincount(self._resolution[held], minlength=len(_RESOLUTIONS))
        counts = {m.name.lower(): int(per_modality[m]) for m in Modality}
        counts.update({r.name.lower(): int(per_resolution[r]) for r in Resolution})
        counts["free"] = self._capacity - self._count
        return counts

    # ----------------------------------------------------------------- insertion
    def insert(self, token: Token, now_ns: int | None = None) -> int | None:
        """Add ``token``; return its new id, or None when it was dropped (see the stats).

        Raises ``ValueError`` naming the problem for an invalid token (counted in
        ``stats.rejected``; the ring is untouched). ``now_ns`` (stream time) enables the
        far-future check. The given token's ``token_id`` is ignored.
        """
        problem = token_problem(token, now_ns, self._max_future)
        if problem is not None:
            self.stats.rejected += 1
            self.stats.last_reject_reason = problem
            raise ValueError(f"token rejected: {problem}")
        stamp = int(token.stamp_ns)
        stats = self.stats
        modality = int(token.modality)
        newest = self._newest_seen[modality]
        if newest is not None:
            behind = newest - stamp
            if behind > self._reset_jump:
                self.reset(
                    f"clock jumped back {behind / NS_PER_MS:.1f} ms "
                    f"(newest {_name(modality)} {newest}, got {stamp})"
                )
                newest = None
            elif behind > self._tolerance:
                stats.late_drops += 1
                stats.last_drop_reason = (
                    f"late: {behind / NS_PER_MS:.1f} ms behind the newest {_name(modality)} token "
                    f"(tolerance {self._tolerance / NS_PER_MS:.1f} ms)"
                )
                return None

        count = self._count
        cap = self._capacity
        if count == 0 or stamp >= self._row((self._head + count - 1) % cap).stamp_ns:
            pos = count
        else:
            pos = self._bisect(stamp, right=True)
            stats.out_of_order += 1
        if count == cap:
            if pos == 0:
                stats.evicted += 1
                stats.last_drop_reason = "older than every token of a full ring"
                return None
            self._clear_slot(self._head)
            self._head = (self._head + 1) % cap
            self._count = count = count - 1
            pos -= 1
            stats.evicted += 1
        if pos < count:
            self._shift(pos, count, +1)
        token_id = self._next_id
        self._next_id += 1
        self._write(
            (self._head + pos) % cap,
            Token(
                stamp,
                _MODALITIES[token.modality],
                int(token.code),
                token.payload,
                _RESOLUTIONS[token.resolution],
                int(token.unused_rounds),
                token_id,
            ),
        )
        self._count = count + 1
        if newest is None or stamp > newest:
            self._newest_seen[modality] = stamp
        stats.inserted += 1
        return token_id

    def reset(self, reason: str) -> None:
        """Start a new timeline (the stream's clock went back): :meth:`clear`, counted in
        ``stats.resets`` with ``reason``."""
        self.stats.resets += 1
        self.stats.last_reset_reason = f"{reason}; {self._count} tokens dropped"
        self.clear()

    def clear(self) -> None:
        """Drop every token (their ids are not reused) and forget the newest stamps seen."""
        self._ids.fill(-1)
        self._rows[:] = [None] * self._capacity  # same length: the list is not reallocated
        self._head = 0
        self._count = 0
        self._newest_seen[:] = [None] * len(_MODALITIES)

    # ----------------------------------------------------------------- queries
    def query(self, start_ns: int, end_ns: int, modality: Modality | None = None) -> list[Token]:
        """The held tokens with ``start_ns <= stamp <= end_ns`` (of ``modality`` if given),
        in stamp order. O(log n + m)."""
        if end_ns < start_ns or not self._count:
            return []
        lo = self._bisect(start_ns, right=False)
        hi = self._bisect(end_ns, right=True)
        tokens = self._slice(lo, hi)
        if modality is None:
            return tokens
        return [t for t in tokens if t.modality == modality]

    def __iter__(self) -> Iterator[Token]:
        """Snapshots of every held token, oldest first."""
        return iter(self._slice(0, self._count))

    def get(self, token_id: int) -> Token | None:
        """The held token with this id, or None (evicted, retired, unknown)."""
        slot = self._slot_of(token_id)
        return None if slot is None else self._rows[slot]

    # ----------------------------------------------------------------- changes
    def mark_unused(self, token_id: int) -> int | None:
        """Count one more round the token was left out; return the new count (None if the
        token is no longer held)."""
        slot = self._slot_of(token_id)
        if slot is None:
            return None
        row = self._row(slot)
        rounds = row.unused_rounds + 1
        self._write(slot, replace(row, unused_rounds=rounds))
        return rounds

    def mark_used(self, token_id: int) -> bool:
        """Reset the token's unused count (it joined a context); False if not held."""
        slot = self._slot_of(token_id)
        if slot is None:
            return False
        row = self._row(slot)
        if row.unused_rounds:
            self._write(slot, replace(row, unused_rounds=0))
        return True

    def set_resolution(
        self, token_id: int, resolution: Resolution, shrink: Callable[[Any], Any] | None = None
    ) -> bool:
        """Set the token's resolution; when it changes, replace the payload by
        ``shrink(payload)`` if given. Return True if the resolution changed."""
        if resolution not in _RESOLUTIONS:
            raise ValueError(f"unknown resolution {resolution!r}")
        slot = self._slot_of(token_id)
        if slot is None:
            return False
        row = self._row(slot)
        if row.resolution == resolution:
            return False
        payload = row.payload if shrink is None else shrink(row.payload)
        self._write(slot, replace(row, resolution=_RESOLUTIONS[resolution], payload=payload))
        return True

    def retire(self, token_id: int) -> bool:
        """Remove the token from the active set, freeing its slot and payload reference;
        False if it is not held. Moves the shorter side of the gap: O(min(j, n - j))."""
        slot = self._slot_of(token_id)
        if slot is None:
            return False
        cap = self._capacity
        j = (slot - self._head) % cap
        if j < self._count - 1 - j:
            if j:
                self._shift(0, j, +1)
            self._clear_slot(self._head)
            self._head = (self._head + 1) % cap
        else:
            if j + 1 < self._count:
                self._shift(j + 1, self._count, -1)
            self._clear_slot((self._head + self._count - 1) % cap)
        self._count -= 1
        self.stats.retired += 1
        return True

    # ----------------------------------------------------------------- internals
    def _row(self, slot: int) -> Token:
        row = self._rows[slot]
        assert row is not None, "a held slot always has its row"
        return row

    def _write(self, slot: int, row: Token) -> None:
        self._rows[slot] = row
        self._stamps[slot] = row.stamp_ns
        self._modality[slot] = row.modality
        self._code[slot] = row.code
        self._resolution[slot] = row.resolution
        self._unused[slot] = row.unused_rounds
        self._ids[slot] = row.token_id

    def _clear_slot(self, slot: int) -> None:
        self._ids[slot] = -1
        self._rows[slot] = None

    def _bisect(self, stamp: int, right: bool) -> int:
        """Logical index where ``stamp`` would go, before (left) or after (right) equal
        stamps. The held rows are the physical runs [head, min(end, cap)) and [0, end - cap)."""
        find = bisect.bisect_right if right else bisect.bisect_left
        cap, head = self._capacity, self._head
        end = head + self._count
        first_end = min(end, cap)
        pos = find(self._rows, stamp, head, first_end, key=_STAMP)  # type: ignore[arg-type]
        if pos < first_end or end <= cap:
            return pos - head
        return (
            first_end
            - head
            + find(
                self._rows,
                stamp,
                0,
                end - cap,  # type: ignore[arg-type]
                key=_STAMP,
            )
        )

    def _slice(self, lo: int, hi: int) -> list[Token]:
        """Rows of logical [lo, hi), by slicing the row list (at most two pieces)."""
        if hi <= lo:
            return []
        cap = self._capacity
        a, b = self._head + lo, self._head + hi
        rows = self._rows
        if b <= cap:
            return rows[a:b]  # type: ignore[return-value]
        if a >= cap:
            return rows[a - cap : b - cap]  # type: ignore[return-value]
        return rows[a:cap] + rows[: b - cap]  # type: ignore[return-value, operator]

    def _shift(self, lo: int, hi: int, delta: int) -> None:
        """Move the tokens at logical [lo, hi) by ``delta`` (+1 or -1) slots."""
        cap = self._capacity
        src = [(self._head + i) % cap for i in range(lo, hi)]
        dst = [(i + delta) % cap for i in src]
        for column in self._columns:
            column[dst] = column[src]  # the right side is copied first: overlap is safe
        rows = self._rows
        moved = [rows[i] for i in src]
        for i, row in zip(dst, moved, strict=True):
            rows[i] = row

    def _slot_of(self, token_id: int) -> int | None:
        if token_id < 0:
            return None
        hits = np.flatnonzero(self._ids == token_id)
        return int(hits[0]) if len(hits) else None

    def _check(self) -> None:
        """Assert the invariants (tests): rows and columns agree, stamps are sorted."""
        held = [(self._head + i) % self._capacity for i in range(self._count)]
        assert set(np.flatnonzero(self._ids >= 0).tolist()) == set(held)
        previous = None
        for slot in held:
            row = self._row(slot)
            assert (
                row.stamp_ns,
                row.modality,
                row.code,
                row.resolution,
                row.unused_rounds,
                row.token_id,
            ) == tuple(int(c[slot]) for c in self._columns)
            assert previous is None or previous <= row.stamp_ns
            previous = row.stamp_ns
        assert all(self._rows[s] is None for s in range(self._capacity) if s not in held)
