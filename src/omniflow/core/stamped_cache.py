"""A time history of one stream's items on the temporal token ring: queries by capture stamp.

:class:`StampedCache` is what ``message_filters.Cache`` does (keep the newest items of a
stream, answer "what came between t1 and t2", "the last one before t", "the first one after
t"), built on :class:`~omniflow.core.tokens.TokenRing`, so it also holds for input that
arrives out of stamp order: the ring keeps its tokens sorted by stamp and evicts the oldest by
stamp, where ``message_filters.Cache`` keeps arrival order and evicts the first to arrive.
Queries are binary searches (O(log n + m) for m results) instead of scans.

The ring's arrival rules apply (see :mod:`omniflow.core.tokens`): an item up to
``reorder_tolerance_ns`` behind the newest stamp seen is inserted at its place; further behind
it is dropped and counted; more than ``reset_jump_ns`` behind, the stream's clock is taken to
have jumped back (a looping bag) and the cache starts afresh. :attr:`StampedCache.stats` counts
all of it. The ROS side (messages, ``rclpy`` times, the ``message_filters`` interface) is
:class:`omniflow.ros.token_cache.TokenCache`. Not thread-safe: one owner, or a lock around it.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from omniflow.core.timing import NS_PER_MS
from omniflow.core.tokens import Modality, RingStats, Token, TokenRing

__all__ = ["StampedCache"]

T = TypeVar("T")


class StampedCache(Generic[T]):
    """The newest ``capacity`` items of a stream by capture stamp (integer ns), in stamp order.

    ``modality``: what the ring records the items as (its occupancy counts by it); items are
    held by reference, with semantic code 0 (the cache answers by time only).
    """

    def __init__(
        self,
        capacity: int,
        *,
        reorder_tolerance_ns: int = 200 * NS_PER_MS,
        reset_jump_ns: int = 1_000 * NS_PER_MS,
        modality: Modality = Modality.VISION,
    ) -> None:
        self._ring = TokenRing(capacity, reorder_tolerance_ns, reset_jump_ns, max_future_ns=None)
        self._modality = Modality(modality)

    @property
    def capacity(self) -> int:
        return self._ring.capacity

    @property
    def stats(self) -> RingStats:
        """Items inserted, re-ordered, evicted, dropped late, rejected, and clock resets."""
        return self._ring.stats

    def __len__(self) -> int:
        return len(self._ring)

    def add(self, stamp_ns: int, item: T) -> bool:
        """Hold ``item`` stamped ``stamp_ns``; False when the ring dropped it (too late, or
        older than everything a full cache holds: see :attr:`stats`). ValueError naming the
        problem for a stamp that is not a positive int64."""
        token = Token(stamp_ns, self._modality, 0, item)
        return self._ring.insert(token) is not None

    def interval(self, start_ns: int, end_ns: int) -> list[T]:
        """The items with ``start_ns <= stamp <= end_ns``, in stamp order."""
        return [token.payload for token in self._ring.query(start_ns, end_ns)]

    def before(self, stamp_ns: int) -> T | None:
        """The newest item stamped at or before ``stamp_ns`` (of equal stamps, the last to
        arrive), or None."""
        oldest = self._ring.oldest_ns
        if oldest is None or stamp_ns < oldest:
            return None
        return self._ring.query(oldest, stamp_ns)[-1].payload

    def after(self, stamp_ns: int) -> T | None:
        """The oldest item stamped at or after ``stamp_ns`` (of equal stamps, the first to
        arrive), or None."""
        newest = self._ring.newest_ns
        if newest is None or stamp_ns > newest:
            return None
        return self._ring.query(stamp_ns, newest)[0].payload

    @property
    def latest_ns(self) -> int | None:
        """The newest stamp held, or None when empty."""
        return self._ring.newest_ns

    @property
    def oldest_ns(self) -> int | None:
        """The oldest stamp held, or None when empty."""
        return self._ring.oldest_ns

    def clear(self) -> None:
        """Forget every item (and the newest stamp seen)."""
        self._ring.clear()
