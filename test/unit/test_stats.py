"""Tier 1 tests of omniflow.core.stats.CaptureStats: diagnostic level, summary and values."""

from __future__ import annotations

import pytest

from omniflow.core.stats import ERROR, OK, WARN, CaptureStats


def test_levels_are_the_diagnostic_status_bytes() -> None:
    # diagnostic_msgs/DiagnosticStatus: OK=0, WARN=1, ERROR=2.
    assert (OK, WARN, ERROR) == (0, 1, 2)


def test_fresh_stats_are_ok_and_say_not_configured() -> None:
    stats = CaptureStats()
    assert stats.level == OK
    assert stats.message == "not configured"


@pytest.mark.parametrize(
    ("counters", "level"),
    [
        ({}, OK),
        ({"published": 1000}, OK),
        ({"restarts": 2}, OK),  # a restarted source lost nothing
        ({"pacing_resyncs": 3}, OK),  # a paced file skipped ahead: nothing lost either
        ({"overflows": 1}, WARN),
        ({"gaps": 1, "missing": 4}, WARN),
        ({"dropped": 7}, WARN),
        ({"errors": 1}, WARN),  # the error itself was cleared by a later good read
        ({"overflows": 1, "gaps": 2, "missing": 2, "dropped": 3, "errors": 4}, WARN),
    ],
)
def test_level_is_warn_exactly_when_data_was_lost(counters: dict[str, int], level: int) -> None:
    assert CaptureStats(status="streaming", **counters).level == level


@pytest.mark.parametrize("counters", [{}, {"dropped": 5}, {"published": 10, "gaps": 1}])
def test_level_is_error_while_an_error_is_set(counters: dict[str, int]) -> None:
    stats = CaptureStats(status="streaming: mic", error="device unplugged", **counters)
    assert stats.level == ERROR
    assert stats.message == "streaming: mic: device unplugged"


def test_ok_message_is_the_status() -> None:
    assert CaptureStats(status="streaming: hello.wav", published=50).message == (
        "streaming: hello.wav"
    )


def test_warn_message_lists_every_loss_counter() -> None:
    stats = CaptureStats(
        status="streaming: mic", overflows=1, gaps=2, missing=5, dropped=3, errors=4
    )
    assert stats.message == (
        "streaming: mic; lost data: 1 overflows, 2 gaps (5 missing), 3 dropped, 4 read errors"
    )


def test_values_are_every_counter_as_text_in_declaration_order() -> None:
    stats = CaptureStats(
        published=12,
        overflows=1,
        gaps=2,
        missing=3,
        dropped=4,
        restarts=5,
        errors=6,
        pacing_resyncs=7,
        status="s",
        error="e",
    )
    assert stats.values() == [
        ("errors", "6"),
        ("published", "12"),
        ("overflows", "1"),
        ("gaps", "2"),
        ("missing", "3"),
        ("dropped", "4"),
        ("restarts", "5"),
        ("pacing_resyncs", "7"),
    ]


def test_instances_do_not_share_counters() -> None:
    first, second = CaptureStats(), CaptureStats()
    first.dropped += 1
    assert second.dropped == 0


def test_a_finished_source_is_reported_as_ok() -> None:
    # What omniflow.ros.device_node.DeviceNode sets when its source raises SourceExhausted.
    stats = CaptureStats(status="finished: end of hello.wav", published=25)
    assert stats.level == OK
    assert stats.message.startswith("finished")
