"""A stamp seconds ahead of the receiver's clock (capture on one host, association on another
whose clock disagrees) is refused with a diagnostic that names the clock offset and the fix."""

from __future__ import annotations

import pytest

from omniflow.ros.fusion_messages import stamp_problem

NOW = 1_000_000_000_000
MAX_FUTURE = 200_000_000  # 200 ms


@pytest.mark.parametrize(
    ("ahead_ms", "refused", "names_clocks"),
    [(50, False, False), (500, True, False), (3000, True, True), (120_000, True, True)],
)
def test_a_stamp_far_ahead_names_the_clock_offset(ahead_ms, refused, names_clocks) -> None:
    problem = stamp_problem(NOW + ahead_ms * 1_000_000, NOW, MAX_FUTURE)
    assert (problem is not None) == refused
    if refused:
        assert f"{ahead_ms} ms ahead" in problem
        assert ("chrony or PTP" in problem) == names_clocks
    if names_clocks:
        assert f"about {ahead_ms / 1000:.1f} s ahead of this host's" in problem
