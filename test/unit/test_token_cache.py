"""The token ring as a message_filters filter: the pure StampedCache (tier 1), and TokenCache
against the upstream ROS 2 Jazzy ``message_filters`` module: the same answers as
``message_filters.Cache`` for input in stamp order, right answers out of order where Cache's
are not, and a place in upstream filter chains.

``message_filters`` is not on PyPI: a ROS install's is used, else the Jazzy sources in the
shared vendor directory beside the checkout (tests only; skipped when neither is there).
"""

from __future__ import annotations

import random
import sys

import pytest
from rclpy.clock import ClockType
from rclpy.duration import Duration
from rclpy.time import Time
from sensor_msgs.msg import Image

import ros_vendor
from omniflow.core.stamped_cache import StampedCache
from omniflow.core.tokens import Modality
from omniflow.ros.conversions import header
from omniflow.ros.token_cache import TokenCache

MS = 1_000_000
T0 = 1_767_225_600 * 1_000_000_000  # 2026-01-01, ns


@pytest.fixture(scope="module")
def mf():
    """The ``message_filters`` module (ROS 2's, or the vendored Jazzy sources)."""
    try:
        import message_filters

        return message_filters
    except ImportError:
        pass
    vendor = ros_vendor.require("message_filters", "message_filters is not installed")
    sys.path.insert(0, str(vendor))
    try:
        import message_filters
    finally:
        sys.path.remove(str(vendor))
    return message_filters


def msg(stamp_ns: int, label: str = "") -> Image:
    return Image(header=header(stamp_ns, label or str(stamp_ns)))


def ns(m: Image) -> int:
    return m.header.stamp.sec * 1_000_000_000 + m.header.stamp.nanosec


def ros_time(ns: int) -> Time:
    return Time(nanoseconds=ns, clock_type=ClockType.ROS_TIME)


def labels(messages) -> list[str] | str | None:
    if messages is None:
        return None
    if isinstance(messages, list):
        return [m.header.frame_id for m in messages]
    return messages.header.frame_id


# --- StampedCache (no ROS) ----------------------------------------------------------------


def test_stamped_cache_answers_by_stamp_in_order_and_out_of_order() -> None:
    cache: StampedCache[str] = StampedCache(4)
    for stamp, item in ((10, "a"), (30, "c"), (20, "b"), (40, "d")):
        assert cache.add(T0 + stamp * MS, item)
    assert cache.interval(T0 + 15 * MS, T0 + 40 * MS) == ["b", "c", "d"]
    assert cache.before(T0 + 29 * MS) == "b"
    assert cache.after(T0 + 21 * MS) == "c"
    assert cache.before(T0) is None and cache.after(T0 + 41 * MS) is None
    assert (cache.oldest_ns, cache.latest_ns) == (T0 + 10 * MS, T0 + 40 * MS)
    assert cache.stats.out_of_order == 1
    assert cache.add(T0 + 25 * MS, "b2")  # full: the oldest by stamp leaves
    assert cache.interval(0, T0 + 10**12) == ["b", "b2", "c", "d"]
    assert cache.stats.evicted == 1


def test_stamped_cache_drops_what_arrives_too_late_and_counts_it() -> None:
    cache: StampedCache[str] = StampedCache(8, reorder_tolerance_ns=50 * MS)
    assert cache.add(T0 + 100 * MS, "new")
    assert not cache.add(T0 + 10 * MS, "late")
    assert cache.stats.late_drops == 1 and "behind the newest" in cache.stats.last_drop_reason
    assert cache.interval(0, T0 + 10**12) == ["new"]
    with pytest.raises(ValueError, match="stamp_ns must be a positive int64"):
        cache.add(0, "no stamp")


def test_stamped_cache_records_its_items_as_the_modality_given() -> None:
    cache: StampedCache[str] = StampedCache(2, modality=Modality.AUDIO)
    cache.add(T0, "chunk")
    assert len(cache) == 1 and cache.capacity == 2
    cache.clear()
    assert len(cache) == 0 and cache.latest_ns is None


# --- TokenCache against message_filters.Cache ---------------------------------------------


def in_order_stream(n: int, seed: int) -> list[Image]:
    """Stamps in non-decreasing order, some equal (two sensors stamping the same instant)."""
    rng = random.Random(seed)
    stamp, out = T0, []
    for i in range(n):
        stamp += rng.choice((0, 5, 33, 40, 66)) * MS
        out.append(msg(stamp, f"m{i}"))
    return out


def queries(stream: list[Image], seed: int) -> list[int]:
    rng = random.Random(seed)
    stamps = [ns(m) for m in stream]
    lo, hi = stamps[0] - 100 * MS, stamps[-1] + 100 * MS
    return sorted(set(stamps) | {rng.randrange(lo, hi) for _ in range(60)} | {lo, hi})


def assert_same_answers(cache, ours, times: list[int]) -> None:
    assert ours.getLatestTime() == cache.getLastestTime()
    assert ours.getLastestTime() == cache.getLastestTime()
    assert ours.getOldestTime() == cache.getOldestTime()
    assert labels(ours.getLast()) == labels(cache.getLast())
    for t in times:
        assert labels(ours.getElemBeforeTime(ros_time(t))) == labels(
            cache.getElemBeforeTime(ros_time(t))
        )
        assert labels(ours.getElemAfterTime(ros_time(t))) == labels(
            cache.getElemAfterTime(ros_time(t))
        )
    for a, b in zip(times, times[7:], strict=False):
        assert labels(ours.getInterval(ros_time(a), ros_time(b))) == labels(
            cache.getInterval(ros_time(a), ros_time(b))
        )


@pytest.mark.parametrize("cache_size", [1, 5, 32, 200])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_in_order_input_gives_the_same_answers_as_message_filters_cache(
    mf, cache_size: int, seed: int
) -> None:
    source = mf.SimpleFilter()
    cache = mf.Cache(source, cache_size=cache_size)
    ours = TokenCache(source, cache_size=cache_size)
    passed_on: dict[str, list[str]] = {"cache": [], "ours": []}
    cache.registerCallback(lambda m: passed_on["cache"].append(m.header.frame_id))
    ours.registerCallback(lambda m: passed_on["ours"].append(m.header.frame_id))
    assert ours.getLatestTime() is None and ours.getElemBeforeTime(ros_time(T0)) is None
    stream = in_order_stream(150, seed)
    times = queries(stream, seed)
    for i, m in enumerate(stream):
        source.signalMessage(m)
        if i % 37 == 0:
            assert_same_answers(cache, ours, times)
    assert_same_answers(cache, ours, times)
    assert passed_on["ours"] == passed_on["cache"]
    assert ours.stats.out_of_order == 0 and ours.stats.late_drops == 0


def test_out_of_order_input_gets_the_right_answers_where_cache_does_not(mf) -> None:
    """Frames from an encoder that finishes them out of order (each up to 150 ms late)."""
    rng = random.Random(7)
    stream = [msg(T0 + i * 33 * MS, f"f{i}") for i in range(120)]
    arrival = sorted(stream, key=lambda m: ns(m) + rng.randrange(150 * MS))
    source = mf.SimpleFilter()
    cache = mf.Cache(source, cache_size=40)
    ours = TokenCache(source, cache_size=40)
    for m in arrival:
        source.signalMessage(m)
    assert ours.stats.out_of_order > 0 and ours.stats.late_drops == 0
    held = stream[-40:]  # the newest 40 by stamp
    stamps = [T0 + i * 33 * MS for i in range(120)]
    ours_right = cache_wrong = 0
    for t in range(stamps[80], stamps[-1] + 1, 7 * MS):
        expected_before = next((m for m in reversed(held) if ns(m) <= t), None)
        expected_after = next((m for m in held if ns(m) >= t), None)
        assert labels(ours.getElemBeforeTime(ros_time(t))) == labels(expected_before)
        assert labels(ours.getElemAfterTime(ros_time(t))) == labels(expected_after)
        ours_right += 1
        cache_wrong += labels(cache.getElemBeforeTime(ros_time(t))) != labels(expected_before)
    assert labels(ours.getInterval(ros_time(T0), ros_time(stamps[-1]))) == labels(held)
    assert labels(cache.getInterval(ros_time(T0), ros_time(stamps[-1]))) != labels(held)
    assert ours.getLatestTime() == ros_time(stamps[-1])
    assert cache_wrong > ours_right // 10  # Cache answers by arrival order, not by stamp


def test_a_token_cache_feeds_an_upstream_synchronizer(mf) -> None:
    """In a user's chain: two TokenCaches into message_filters.ApproximateTimeSynchronizer."""
    audio_in, image_in = mf.SimpleFilter(), mf.SimpleFilter()
    audio, images = TokenCache(audio_in, cache_size=10), TokenCache(image_in, cache_size=10)
    pairs: list[tuple[str, str]] = []
    sync = mf.ApproximateTimeSynchronizer([audio, images], queue_size=10, slop=0.02)
    sync.registerCallback(lambda a, i: pairs.append((a.header.frame_id, i.header.frame_id)))
    for k in range(10):
        audio_in.signalMessage(msg(T0 + k * 40 * MS, f"a{k}"))
        if k % 2 == 0:
            image_in.signalMessage(msg(T0 + k * 40 * MS + 5 * MS, f"i{k}"))
    assert pairs == [(f"a{k}", f"i{k}") for k in range(0, 10, 2)]
    assert len(audio) == 10 and labels(images.getElemBeforeTime(ros_time(T0 + 10**9))) == "i8"


def test_messages_without_a_stamp_are_refused_unless_headerless_ones_are_allowed() -> None:
    ours = TokenCache(cache_size=3)
    ours.add(msg(0, "no capture time"))
    ours.add(object())  # no header at all
    assert len(ours) == 0
    headerless = TokenCache(cache_size=3, allow_headerless=True)
    item = object()
    headerless.add(item)
    assert headerless.getLast() is item and headerless.getLatestTime() is not None


def test_a_message_further_behind_than_the_tolerance_is_dropped_not_passed_on() -> None:
    ours = TokenCache(cache_size=5, reorder_tolerance=Duration(seconds=0.05))
    passed: list[str] = []
    ours.registerCallback(lambda m, tag: passed.append(f"{tag}:{m.header.frame_id}"), "x")
    ours.add(msg(T0 + 200 * MS, "new"))
    ours.add(msg(T0 + 100 * MS, "late"))
    assert passed == ["x:new"] and ours.stats.late_drops == 1
    with pytest.raises(ValueError, match="after to_stamp"):
        ours.getInterval(ros_time(T0 + MS), ros_time(T0))
