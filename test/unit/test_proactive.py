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
    policy.observe_person(True)  # already there at start-up: not an appearance
    assert policy.check(1.0, listening=True, idle_s=1.0) is None
    policy.observe_person(False)
    policy.observe_person(True)
    rule = policy.check(2.0, listening=True, idle_s=2.0)
    assert rule is not None and rule.instruction.startswith("Someone came")
    assert policy.check(3.0, listening=True, idle_s=3.0) is None  # an event, used up
    assert policy.fired == 1


def test_nothing_fires_while_busy_and_the_event_is_used_up():
    policy = ProactivePolicy([GREET], min_interval_s=0)
    policy.observe_person(False)
    policy.observe_person(True)
    assert policy.check(1.0, listening=False, idle_s=0.0) is None
    assert policy.check(2.0, listening=True, idle_s=1.0) is None


def test_rate_limit_between_proactive_turns():
    policy = ProactivePolicy(["idle_s > 10 => Say something."], min_interval_s=30)
    assert policy.check(0.0, listening=True, idle_s=5.0) is None
    assert policy.check(1.0, listening=True, idle_s=11.0) is not None
    assert policy.check(20.0, listening=True, idle_s=30.0) is None
    assert policy.check(31.0, listening=True, idle_s=40.0) is not None


def test_blank_rules_are_skipped():
    assert ProactivePolicy(["", "  "]).rules == ()
