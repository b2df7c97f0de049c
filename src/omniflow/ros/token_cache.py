"""The temporal token ring as a ``message_filters`` filter, for users' own filter chains.

:class:`TokenCache` has the interface of ``message_filters.Cache`` (ROS 2 Jazzy), so it goes
wherever a Cache goes::

    import message_filters
    from omniflow.ros.token_cache import TokenCache

    images = message_filters.Subscriber(node, Image, "image_raw", qos_profile=SENSOR_DATA)
    cache = TokenCache(images, cache_size=30)          # instead of message_filters.Cache
    cache.registerCallback(on_image)                   # called with each message it holds
    frame = cache.getElemBeforeTime(node.get_clock().now())
    recent = cache.getInterval(t_from, t_to)

Same calls and results as ``message_filters.Cache`` for input in stamp order (``add``,
``connectInput``, ``registerCallback``, ``getInterval``, ``getElemBeforeTime``,
``getElemAfterTime``, ``getLatestTime`` (and Jazzy's spelling ``getLastestTime``),
``getOldestTime``, ``getLast``; times are ``rclpy.time.Time``, and the query methods also take
a ``builtin_interfaces/Time``). Differences, all for input Cache does not handle:

- out of order: messages are kept in stamp order and the oldest by stamp is evicted, so the
  answers stay right when a message arrives late (Cache keeps arrival order: its "newest
  before t" is then the last to arrive, not the newest). A message more than
  ``reorder_tolerance`` behind the newest is dropped and counted (``stats.late_drops``); more
  than ``reset_jump`` behind, the cache starts afresh (a looping bag: ``stats.resets``);
- a dropped message is not passed on to the registered callbacks (Cache passes on every
  message); a zero stamp ("no capture time") is refused with a warning, like a headerless
  message when ``allow_headerless`` is false;
- it is thread-safe (one lock), so callbacks of a multi-threaded executor may add and query.

The product does not need ``message_filters`` (it is not on PyPI): the chain interface
(``registerCallback``/``connectInput``) is written here, and the storage is the pure
:class:`~omniflow.core.stamped_cache.StampedCache`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import rclpy.logging
from builtin_interfaces.msg import Time as TimeMsg
from rclpy.clock import Clock, ClockType, ROSClock
from rclpy.duration import Duration
from rclpy.time import Time

from omniflow.core.stamped_cache import StampedCache
from omniflow.core.tokens import Modality, RingStats

__all__ = ["TokenCache"]

# Seconds between repeated warnings about refused messages.
_THROTTLE_S = 5.0
# The ring's defaults: a message may arrive this late and still be put in its place; one
# this far behind the newest means the clock jumped back.
REORDER_TOLERANCE = Duration(seconds=0.2)
RESET_JUMP = Duration(seconds=1.0)


def _ns(stamp: Time | TimeMsg) -> int:
    """Integer nanoseconds of an ``rclpy`` time or a ``builtin_interfaces/Time``."""
    if isinstance(stamp, Time):
        return stamp.nanoseconds
    return stamp.sec * 1_000_000_000 + stamp.nanosec


class TokenCache:
    """A time history of messages on the token ring, with ``message_filters.Cache``'s interface.

    ``f``: the filter to take messages from (a ``message_filters.Subscriber`` or any object
    with ``registerCallback``); None to call :meth:`add` yourself. ``cache_size``: how many
    messages are held (the newest by stamp). ``allow_headerless``: stamp a message without a
    header with ``clock``'s time (default: ROS time) instead of refusing it.
    ``reorder_tolerance`` / ``reset_jump``: see the module docstring. ``modality``: what the
    ring records the messages as.
    """

    def __init__(
        self,
        f: Any = None,
        cache_size: int = 1,
        allow_headerless: bool = False,
        *,
        reorder_tolerance: Duration = REORDER_TOLERANCE,
        reset_jump: Duration = RESET_JUMP,
        clock: Clock | None = None,
        modality: Modality = Modality.VISION,
    ) -> None:
        self.callbacks: dict[int, tuple[Callable[..., None], tuple]] = {}
        self.cache_size = cache_size
        self.allow_headerless = allow_headerless
        self._clock = clock
        self._cache: StampedCache[Any] = StampedCache(
            cache_size,
            reorder_tolerance_ns=reorder_tolerance.nanoseconds,
            reset_jump_ns=reset_jump.nanoseconds,
            modality=modality,
        )
        self._lock = threading.Lock()
        self._logger = rclpy.logging.get_logger("omniflow.token_cache")
        self.incoming_connection: int | None = None
        if f is not None:
            self.connectInput(f)

    # ----------------------------------------------------------------- the filter chain
    def registerCallback(self, cb: Callable[..., None], *args: Any) -> int:
        """Call ``cb(msg, *args)`` for each message the cache holds; returns the connection
        number (as ``message_filters.SimpleFilter``)."""
        conn = len(self.callbacks)
        self.callbacks[conn] = (cb, args)
        return conn

    def signalMessage(self, *msg: Any) -> None:
        """Pass ``msg`` on to every registered callback."""
        for cb, args in list(self.callbacks.values()):
            cb(*(msg + args))

    def connectInput(self, f: Any) -> None:
        """Take messages from the filter ``f``."""
        self.incoming_connection = f.registerCallback(self.add)

    def add(self, msg: Any) -> None:
        """Hold ``msg`` by its ``header.stamp`` and pass it on (see the module docstring for
        the messages that are refused or dropped instead)."""
        header = getattr(msg, "header", None)
        stamp = getattr(header, "stamp", None)
        if stamp is None:
            if not self.allow_headerless:
                self._warn(
                    "a message without header.stamp was refused: pass allow_headerless=True "
                    "to stamp such messages with the time they arrive"
                )
                return
            stamp_ns = (self._clock or ROSClock()).now().nanoseconds
        else:
            stamp_ns = _ns(stamp)
        if stamp_ns <= 0:
            self._warn("a message with a zero header.stamp (no capture time) was refused")
            return
        with self._lock:
            held = self._cache.add(stamp_ns, msg)
        if held:
            self.signalMessage(msg)

    # ----------------------------------------------------------------- queries
    def getInterval(self, from_stamp: Time | TimeMsg, to_stamp: Time | TimeMsg) -> list:
        """The messages stamped in [from_stamp, to_stamp], oldest first."""
        start, end = _ns(from_stamp), _ns(to_stamp)
        if start > end:
            raise ValueError(f"from_stamp ({start} ns) is after to_stamp ({end} ns)")
        with self._lock:
            return self._cache.interval(start, end)

    def getElemBeforeTime(self, stamp: Time | TimeMsg) -> Any:
        """The newest message stamped at or before ``stamp``, or None."""
        with self._lock:
            return self._cache.before(_ns(stamp))

    def getElemAfterTime(self, stamp: Time | TimeMsg) -> Any:
        """The oldest message stamped at or after ``stamp``, or None."""
        with self._lock:
            return self._cache.after(_ns(stamp))

    def getLatestTime(self) -> Time | None:
        """The newest stamp held, or None."""
        with self._lock:
            return self._time(self._cache.latest_ns)

    getLastestTime = getLatestTime  # Jazzy message_filters spells it so

    def getOldestTime(self) -> Time | None:
        """The oldest stamp held, or None."""
        with self._lock:
            return self._time(self._cache.oldest_ns)

    def getLast(self) -> Any:
        """The newest message held (of several with the newest stamp, the first to arrive,
        as Cache), or None."""
        with self._lock:
            latest = self._cache.latest_ns
            return None if latest is None else self._cache.after(latest)

    # ----------------------------------------------------------------- the rest
    @property
    def stats(self) -> RingStats:
        """What happened to the messages offered (held, re-ordered, evicted, dropped)."""
        return self._cache.stats

    def __len__(self) -> int:
        return len(self._cache)

    @staticmethod
    def _time(ns: int | None) -> Time | None:
        return None if ns is None else Time(nanoseconds=ns, clock_type=ClockType.ROS_TIME)

    def _warn(self, text: str) -> None:
        self._logger.warning(text, throttle_duration_sec=_THROTTLE_S)
