"""The proactive policy: rule parsing and when rules fire."""

from __future__ import annotations

import math

import pytest

from omniflow.core.proactive import ProactivePolicy, parse_rule
from omniflow.errors import ConfigError

GREET = "person_appeared => Someone came into view. Greet them."


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("person_appeared", "no '=>'"),
        ("person_appeared =>  ", "says nothing"),
        ("idle_s >> 4 => x", "cannot read the condition"),
        ("mood > 3 => x", "unknown fact 'mood'"),
        ("idle_s > 1.2.3 => x", "not a number"),
    ],
)
def test_bad_rules_say_what_is_wrong(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_rule(text)


def test_a_rule_with_several_conditions():
    rule = parse_rule("idle_s > 600 and battery_percent <= 15 => Say the battery is low.")
    assert rule.instruction == "Say the battery is low."
    assert [(c.fact, c.op, c.value) for c in rule.conditions] == [
        ("idle_s", ">", 600.0),
        ("battery_percent", "<=", 15.0),
    ]
    assert rule.holds({"idle_s": 700, "battery_percent": 10.0})
    assert not rule.holds({"idle_s": 700, "battery_percent": 20.0})
    assert not rule.holds({"idle_s": 700, "battery_percent": math.nan})
    assert not rule.holds({"idle_s": 700})


def test_a_person_appearing_fires_once():
    policy = ProactivePolicy([GREET], min_interval_s=0)
    policy.observe_person(True, 0.0)  # already there at start-up: not an appearance
    assert policy.check(1.0, listening=True, idle_s=1.0) is None
    policy.observe_person(False, 1.0)
    policy.observe_person(True, 1.5)
    rule = policy.check(2.0, listening=True, idle_s=2.0)
    assert rule is not None and rule.instruction.startswith("Someone came")
    assert policy.check(3.0, listening=True, idle_s=3.0) is None  # an event, used up
    assert policy.fired == 1


def test_nothing_fires_while_busy_and_the_event_is_used_up():
    policy = ProactivePolicy([GREET], min_interval_s=0)
    policy.observe_person(False, 0.0)
    policy.observe_person(True, 0.1)
    assert policy.check(1.0, listening=False, idle_s=0.0) is None
    assert policy.check(2.0, listening=True, idle_s=1.0) is None


def test_a_person_missed_for_a_frame_or_a_glance_away_is_not_a_new_arrival():
    # The detector's view of one person standing in front of the robot, 15 frames a second:
    # a frame without them, then the camera on a box for 2.2 s (as in the demo's video).
    policy = ProactivePolicy([GREET], min_interval_s=0, person_gone_s=5.0)
    policy.observe_person(False, 0.0)
    policy.observe_person(True, 0.5)  # came into view: nobody was seen before
    assert policy.check(1.0, listening=True, idle_s=10.0) is not None
    for stamp, present in ((1.93, True), (2.0, False), (4.13, True), (4.53, False)):
        policy.observe_person(present, stamp)
    policy.observe_person(True, 4.6)
    assert policy.check(5.0, listening=True, idle_s=10.0) is None
    policy.observe_person(False, 5.0)  # gone for good ... and someone comes in 6 s later
    policy.observe_person(True, 10.61)
    assert policy.check(11.0, listening=True, idle_s=10.0) is not None
    assert policy.fired == 2


def test_a_replay_that_starts_again_is_a_long_absence():
    policy = ProactivePolicy([GREET], min_interval_s=0, person_gone_s=5.0)
    policy.observe_person(True, 100.0)
    policy.observe_person(False, 100.1)
    policy.observe_person(True, 0.2)  # the stream went back in time
    assert policy.check(1.0, listening=True, idle_s=10.0) is not None


def test_nothing_fires_right_after_a_turn_and_an_appearance_then_is_used_up():
    policy = ProactivePolicy(
        [GREET, "idle_s > 1 => Say something."], min_interval_s=0, after_turn_s=5.0
    )
    policy.observe_person(False, 0.0)
    policy.observe_person(True, 0.1)  # came in while the user and the robot were talking
    assert policy.check(1.0, listening=True, idle_s=0.2) is None  # the user may answer
    assert policy.check(2.0, listening=True, idle_s=4.9) is None
    rule = policy.check(3.0, listening=True, idle_s=5.0)
    assert rule is not None and rule.instruction == "Say something."  # not the greeting


@pytest.mark.parametrize("name", ["min_interval_s", "person_gone_s", "after_turn_s"])
@pytest.mark.parametrize("value", [-1.0, math.nan])
def test_bad_intervals_are_refused_by_name(name, value):
    with pytest.raises(ConfigError, match=f"proactive {name} must be >= 0"):
        ProactivePolicy([GREET], **{name: value})


def test_rate_limit_between_proactive_turns():
    policy = ProactivePolicy(["idle_s > 10 => Say something."], min_interval_s=30)
    assert policy.check(0.0, listening=True, idle_s=5.0) is None
    assert policy.check(1.0, listening=True, idle_s=11.0) is not None
    assert policy.check(20.0, listening=True, idle_s=30.0) is None
    assert policy.check(31.0, listening=True, idle_s=40.0) is not None


def test_blank_rules_are_skipped():
    assert ProactivePolicy(["", "  "]).rules == ()
