"""The per-kind log throttle (tier 1, no ROS)."""

from __future__ import annotations

import pytest

from omniflow.core.throttle import KindThrottle


@pytest.mark.parametrize(("later_s", "due"), [(0.0, False), (4.9, False), (5.0, True)])
def test_one_kind_is_due_once_per_period_whatever_its_numbers(later_s, due):
    throttle = KindThrottle(5.0)
    assert throttle.due("audio: sample_rate 44100 Hz", 100.0)
    assert throttle.due("audio: sample_rate 48000 Hz", 100.0 + later_s) is due


def test_another_kind_is_not_hidden_by_a_flood_of_one():
    throttle = KindThrottle(5.0)
    assert throttle.due("audio: empty chunk", 1.0)
    assert not throttle.due("audio: empty chunk", 1.1)
    assert throttle.due("image: zero size (0x0)", 1.2)


def test_the_kinds_remembered_are_bounded():
    throttle = KindThrottle(5.0, max_kinds=3)
    for name in "abc":
        assert throttle.due(name, 0.0)
    assert throttle.due("d", 0.0)  # memory started afresh
    assert throttle.due("a", 0.1)
