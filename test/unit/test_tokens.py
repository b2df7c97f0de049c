"""The temporal token ring (tier 1, no ROS): order, capacity, late and bad tokens, retire."""

from __future__ import annotations

import re
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from omniflow.core.tokens import CODE_MAX, Modality, Resolution, Token, TokenRing
from omniflow.errors import ConfigError

MS = 1_000_000
T0 = 1_700_000_000 * 1_000_000_000  # a realistic epoch-like stamp
MSG_DIR = Path(__file__).resolve().parents[2] / "msg"


def tok(stamp: int, modality: Modality = Modality.AUDIO, code: int = 0, payload=None) -> Token:
    return Token(stamp, modality, code, payload)


def stamps(tokens) -> list[int]:
    return [t.stamp_ns for t in tokens]


def msg_constants(name: str) -> dict[str, int]:
    text = (MSG_DIR / name).read_text()
    return {k: int(v) for k, v in re.findall(r"^uint8 (\w+)=(\d+)", text, re.MULTILINE)}


def test_enums_carry_the_constants_of_token_ref_msg():
    constants = msg_constants("TokenRef.msg")
    assert {f"MODALITY_{m.name}": m.value for m in Modality} == {
        k: v for k, v in constants.items() if k.startswith("MODALITY_")
    }
    assert {f"RESOLUTION_{r.name}": r.value for r in Resolution} == {
        k: v for k, v in constants.items() if k.startswith("RESOLUTION_")
    }


def test_in_order_tokens_are_appended_and_queried_with_inclusive_bounds():
    ring = TokenRing(capacity=8)
    ids = [ring.insert(tok(T0 + i * 40 * MS, Modality(i % 2), code=i)) for i in range(5)]
    assert ids == [1, 2, 3, 4, 5]
    assert len(ring) == 5
    assert stamps(ring.query(T0 + 40 * MS, T0 + 120 * MS)) == [
        T0 + 40 * MS,
        T0 + 80 * MS,
        T0 + 120 * MS,
    ]
    assert [t.code for t in ring.query(T0, T0 + 160 * MS, Modality.VISION)] == [1, 3]
    assert ring.query(T0 + 1, T0 + 39 * MS) == []
    assert ring.query(T0 + 100 * MS, T0) == []
    only = ring.query(T0 + 80 * MS, T0 + 80 * MS)
    assert only == [Token(T0 + 80 * MS, Modality.AUDIO, 2, None, Resolution.FULL, 0, 3)]
    assert (ring.oldest_ns, ring.newest_ns) == (T0, T0 + 160 * MS)


def test_a_full_ring_evicts_the_oldest_and_counts_it():
    ring = TokenRing(capacity=3)
    for i in range(5):
        ring.insert(tok(T0 + i * MS, code=i))
    assert [t.code for t in ring] == [2, 3, 4]
    assert ring.stats.evicted == 2
    assert ring.stats.inserted == 5


def test_out_of_order_within_tolerance_lands_in_stamp_order_ties_keep_arrival():
    ring = TokenRing(capacity=8, reorder_tolerance_ns=100 * MS)
    for i, offset in enumerate([0, 40, 80, 120]):
        ring.insert(tok(T0 + offset * MS, code=i))
    ring.insert(tok(T0 + 66 * MS, Modality.VISION, code=10))  # 54 ms late
    ring.insert(tok(T0 + 40 * MS, Modality.VISION, code=11))  # 80 ms late, ties with code 1
    assert [t.code for t in ring] == [0, 1, 11, 10, 2, 3]
    assert ring.stats.out_of_order == 2
    assert ring.stats.late_drops == 0


def test_a_token_later_than_the_tolerance_is_dropped_with_a_reason():
    ring = TokenRing(capacity=8, reorder_tolerance_ns=100 * MS)
    ring.insert(tok(T0 + 500 * MS))
    assert ring.insert(tok(T0 + 399 * MS)) is None
    assert ring.stats.late_drops == 1
    assert "101.0 ms behind" in ring.stats.last_drop_reason
    assert "tolerance 100.0 ms" in ring.stats.last_drop_reason
    assert stamps(ring) == [T0 + 500 * MS]


def test_each_stream_is_late_against_its_own_newest_token_not_another_streams():
    """A frame's token comes after the audio of its moment (a backlog of audio handed over
    at once): it is late only against the newest frame's token."""
    ring = TokenRing(capacity=32, reorder_tolerance_ns=100 * MS, reset_jump_ns=1000 * MS)
    ring.insert(tok(T0, Modality.VISION, code=1))
    for i in range(20):  # 800 ms of audio
        ring.insert(tok(T0 + i * 40 * MS))
    assert ring.insert(tok(T0 + 40 * MS, Modality.VISION, code=2)) is not None  # 720 ms behind
    assert ring.stats.late_drops == 0 and ring.stats.resets == 0
    assert [t.code for t in ring.query(T0, T0 + 50 * MS, Modality.VISION)] == [1, 2]
    assert ring.insert(tok(T0 + 40 * MS - 101 * MS, Modality.VISION)) is None
    assert ring.stats.late_drops == 1
    assert "101.0 ms behind the newest vision token" in ring.stats.last_drop_reason
    assert ring.newest_seen_ns == T0 + 19 * 40 * MS
    ring.insert(tok(T0 - 1200 * MS, Modality.VISION))  # the camera's clock jumped back
    assert ring.stats.resets == 1 and len(ring) == 1
    assert "newest vision" in ring.stats.last_reset_reason


def test_a_backwards_clock_jump_resets_the_ring_and_is_reported():
    ring = TokenRing(capacity=8, reorder_tolerance_ns=100 * MS, reset_jump_ns=1000 * MS)
    for i in range(4):
        ring.insert(tok(T0 + 5000 * MS + i * 40 * MS))
    new_id = ring.insert(tok(T0 + 10 * MS, code=7))  # the bag looped
    assert new_id == 5  # ids are never reused
    assert [(t.stamp_ns, t.code) for t in ring] == [(T0 + 10 * MS, 7)]
    assert ring.stats.resets == 1
    assert "clock jumped back" in ring.stats.last_reset_reason
    assert "4 tokens dropped" in ring.stats.last_reset_reason
    # after the reset, lateness is judged against the new timeline
    assert ring.insert(tok(T0 + 20 * MS)) is not None


def test_a_full_ring_drops_a_late_token_older_than_everything_it_holds():
    ring = TokenRing(capacity=2, reorder_tolerance_ns=100 * MS)
    ring.insert(tok(T0 + 50 * MS, code=1))
    ring.insert(tok(T0 + 60 * MS, code=2))
    assert ring.insert(tok(T0 + 10 * MS, code=3)) is None
    assert [t.code for t in ring] == [1, 2]
    assert ring.insert(tok(T0 + 55 * MS, code=4)) is not None
    assert [t.code for t in ring] == [4, 2]
    assert ring.stats.evicted == 2


@pytest.mark.parametrize(
    ("token", "message"),
    [
        (Token(0, Modality.AUDIO, 1), "stamp_ns must be a positive"),
        (Token(-40, Modality.AUDIO, 1), "stamp_ns must be a positive"),
        (Token(2**63, Modality.AUDIO, 1), "stamp_ns must be a positive"),
        (Token(1.5e18, Modality.AUDIO, 1), "stamp_ns must be a positive"),  # type: ignore[arg-type]
        (Token(True, Modality.AUDIO, 1), "stamp_ns must be a positive"),  # type: ignore[arg-type]
        (Token(T0, 7, 1), "unknown modality 7; allowed: 0 (AUDIO), 1 (VISION), 2 (TEXT)"),  # type: ignore[arg-type]
        (Token(T0, "vision", 1), "unknown modality"),  # type: ignore[arg-type]
        (Token(T0, Modality.AUDIO, -1), "code must be an unsigned 32-bit integer"),
        (Token(T0, Modality.AUDIO, CODE_MAX + 1), "code must be an unsigned 32-bit integer"),
        (Token(T0, Modality.AUDIO, 1, resolution=4), "unknown resolution 4"),  # type: ignore[arg-type]
        (Token(T0, Modality.AUDIO, 1, unused_rounds=-1), "unused_rounds"),
    ],
)
def test_bad_tokens_are_rejected_named_counted_and_leave_the_ring_intact(token, message):
    ring = TokenRing(capacity=4)
    ring.insert(tok(T0 - 10 * MS, code=5))
    with pytest.raises(ValueError, match=re.escape(message)):
        ring.insert(token)
    assert ring.stats.rejected == 1
    assert message in ring.stats.last_reject_reason
    assert [(t.stamp_ns, t.code) for t in ring] == [(T0 - 10 * MS, 5)]
    assert ring.insert(tok(T0)) == 2


def test_a_stamp_far_in_the_future_is_rejected_when_now_is_given():
    ring = TokenRing(max_future_ns=500 * MS)
    with pytest.raises(ValueError, match="ms ahead of now"):
        ring.insert(tok(T0 + 600 * MS), now_ns=T0)
    assert ring.insert(tok(T0 + 400 * MS), now_ns=T0) == 1
    assert ring.insert(tok(T0 + 10_000 * MS)) == 2  # no now: no check


@pytest.mark.parametrize(
    "kwargs",
    [
        {"capacity": 0},
        {"capacity": 2.5},
        {"reorder_tolerance_ns": -1},
        {"reorder_tolerance_ns": 100 * MS, "reset_jump_ns": 100 * MS},
        {"max_future_ns": -1},
    ],
)
def test_bad_ring_settings_are_config_errors(kwargs):
    with pytest.raises(ConfigError):
        TokenRing(**kwargs)


@pytest.mark.parametrize("position", [0, 1, 4, 8, 9])
def test_retire_removes_one_token_anywhere_including_across_the_wrap(position):
    ring = TokenRing(capacity=10)
    for i in range(14):  # wraps: the head is not at slot 0
        ring.insert(tok(T0 + i * MS, code=i))
    held = list(ring)
    victim = held[position]
    assert ring.retire(victim.token_id)
    assert not ring.retire(victim.token_id)
    assert ring.get(victim.token_id) is None
    assert list(ring) == held[:position] + held[position + 1 :]
    assert ring.stats.retired == 1
    ring.insert(tok(T0 + 20 * MS, code=20))  # the freed slot is reused, order kept
    assert stamps(ring) == sorted(stamps(ring))
    assert len(ring) == 10


def test_unused_rounds_and_resolution_are_changed_in_place():
    ring = TokenRing()
    payload = np.arange(8.0)
    token_id = ring.insert(tok(T0, Modality.VISION, code=3, payload=payload))
    assert ring.mark_unused(token_id) == 1
    assert ring.mark_unused(token_id) == 2
    shrunk = []

    def shrink(p):
        shrunk.append(p)
        return p[::4]

    assert ring.set_resolution(token_id, Resolution.QUARTER, shrink)
    assert not ring.set_resolution(token_id, Resolution.QUARTER, shrink)  # shrunk only once
    assert len(shrunk) == 1
    held = ring.get(token_id)
    assert held is not None
    assert held.resolution is Resolution.QUARTER and held.unused_rounds == 2
    np.testing.assert_array_equal(held.payload, [0.0, 4.0])
    assert ring.mark_used(token_id)
    assert ring.get(token_id).unused_rounds == 0
    assert ring.mark_unused(12345) is None
    assert not ring.mark_used(12345)


def test_occupancy_counts_held_tokens_per_modality_and_resolution():
    ring = TokenRing(capacity=6)
    for i, modality in enumerate([Modality.AUDIO, Modality.VISION, Modality.AUDIO, Modality.TEXT]):
        ring.insert(tok(T0 + i * MS, modality))
    ring.set_resolution(2, Resolution.QUARTER)
    ring.retire(1)
    assert ring.occupancy() == {
        "audio": 1,
        "vision": 1,
        "text": 1,
        "full": 2,
        "quarter": 1,
        "free": 3,
    }


def test_memory_does_not_grow_over_a_long_stream():
    tracemalloc.start()
    ring = TokenRing(capacity=128)
    t = T0
    for i in range(2000):  # warm up: fill, wrap, allocate what numpy caches
        t += 20 * MS
        ring.insert(tok(t, Modality(i % 3), code=i & 0xFFFF))
    before = tracemalloc.get_traced_memory()[0]
    for i in range(20_000):
        t += 20 * MS
        ring.insert(tok(t, Modality(i % 3), code=i & 0xFFFF))
        if i % 7 == 0:
            ring.insert(tok(t - 30 * MS, Modality.VISION))
        if i % 11 == 0:
            ring.retire(ring.query(t - 200 * MS, t)[0].token_id)
        ring.query(t - 80 * MS, t + 120 * MS)
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert len(ring) == 128
    assert after - before < 4096


# --------------------------------------------------------------------------- properties
class ReferenceRing:
    """The ring's documented semantics, written the obvious way (a sorted list)."""

    def __init__(self, capacity: int, tolerance: int, jump: int) -> None:
        self.capacity, self.tolerance, self.jump = capacity, tolerance, jump
        self.items: list[tuple[int, int, int, int]] = []  # (stamp, id, modality, code)
        self.newest: dict[int, int] = {}  # per modality

    def accepts(self, stamp: int, modality: int) -> bool:
        """Apply reset / late / full rules; True if the token will be held."""
        newest = self.newest.get(modality)
        if newest is not None:
            if newest - stamp > self.jump:
                self.items.clear()
                self.newest.clear()
            elif newest - stamp > self.tolerance:
                return False
        if len(self.items) == self.capacity:
            if stamp < self.items[0][0]:
                return False
            self.items.pop(0)
        return True

    def add(self, stamp: int, token_id: int, modality: int, code: int) -> None:
        self.items.append((stamp, token_id, modality, code))
        self.items.sort(key=lambda item: (item[0], item[1]))  # ties: arrival (= id) order
        self.newest[modality] = max(self.newest.get(modality, stamp), stamp)


OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("insert"),
            st.one_of(st.integers(-150 * MS, 60 * MS), st.just(-3000 * MS)),
            st.sampled_from(list(Modality)),
            st.integers(0, CODE_MAX),
        ),
        st.tuples(st.just("retire"), st.integers(0, 10_000)),
        st.tuples(
            st.just("query"),
            st.integers(-400 * MS, 100 * MS),
            st.integers(0, 300 * MS),
            st.sampled_from([None, *Modality]),
        ),
    ),
    max_size=120,
)


@settings(max_examples=150, deadline=None)
@given(capacity=st.sampled_from([1, 2, 5, 16, 128]), ops=OPS)
def test_ring_matches_a_brute_force_reference(capacity, ops):
    tolerance, jump = 100 * MS, 1000 * MS
    ring = TokenRing(capacity, reorder_tolerance_ns=tolerance, reset_jump_ns=jump)
    ref = ReferenceRing(capacity, tolerance, jump)
    clock = T0
    for op in ops:
        if op[0] == "insert":
            _, delta, modality, code = op
            stamp = clock + delta
            held = ref.accepts(stamp, int(modality))
            token_id = ring.insert(Token(stamp, modality, code))
            assert (token_id is not None) == held
            if held:
                ref.add(stamp, token_id, int(modality), code)
                clock = max(ref.newest.values())  # the newest token (after a reset too)
        elif op[0] == "retire":
            if ref.items:
                victim = ref.items.pop(op[1] % len(ref.items))
                assert ring.retire(victim[1])
        else:
            _, offset, width, modality = op
            start = clock + offset
            got = ring.query(start, start + width, modality)
            want = [
                item
                for item in ref.items
                if start <= item[0] <= start + width and (modality is None or item[2] == modality)
            ]
            assert [(t.stamp_ns, t.token_id, t.modality, t.code) for t in got] == want
        assert len(ring) <= capacity
        ring._check()  # columns and rows agree, free slots hold nothing
        held_now = list(ring)
        assert stamps(held_now) == sorted(stamps(held_now))
        assert [(t.stamp_ns, t.token_id, t.modality, t.code) for t in held_now] == ref.items
