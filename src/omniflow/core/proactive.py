"""When the robot may speak unprompted: rules over a few facts, checked at a fixed rate.

A rule is one line of configuration, ``CONDITION [and CONDITION ...] => INSTRUCTION``::

    person_appeared => Someone just came into view. Greet them in one short sentence.
    idle_s > 600 and battery_percent < 15 => Say that your battery is low.

A condition is a fact name alone (true when the fact is truthy) or ``FACT OP NUMBER`` with
``OP`` one of ``< <= > >= == !=``. The facts the dialogue node supplies:

- ``person_present``: the newest scene shows a face or a body;
- ``person_appeared``: true on the first check after ``person_present`` went from false to
  true (someone came into view) when no person was seen for ``person_gone_s`` before: a
  detector that misses a person in a frame or two, or a camera that looks away for a moment,
  does not make the one in view a new arrival; a person already in view when the node starts
  does not count;
- ``idle_s``: seconds since the last turn ended (or since start-up);
- ``battery_percent``, ``temperature_c``: from the power state (NaN when unknown: every
  comparison with NaN is false, so such a rule never fires without the reading).

The policy fires at most one rule per check, only while the dialogue is listening, never
within ``after_turn_s`` of the end of the last turn (the user may be about to answer the
robot: a greeting there talks over the conversation), never within ``min_interval_s`` of its
previous proactive turn, and each rule not within its own ``min_interval_s`` either. No ROS
imports.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from omniflow.errors import ConfigError

__all__ = ["FACTS", "ProactivePolicy", "Rule", "parse_rule"]

#: Fact names a rule may use.
FACTS = ("person_present", "person_appeared", "idle_s", "battery_percent", "temperature_c")

_OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    ">": operator.gt,
}
_CONDITION = re.compile(r"^\s*([a-z_]+)\s*(?:(<=|>=|==|!=|<|>)\s*(-?[0-9.]+)\s*)?$")


@dataclass(frozen=True)
class Condition:
    """``fact`` alone, or ``fact op value``."""

    fact: str
    op: str = ""
    value: float = 0.0

    def holds(self, facts: Mapping[str, float | bool]) -> bool:
        current = facts.get(self.fact)
        if current is None:
            return False
        if not self.op:
            return bool(current) and not (isinstance(current, float) and math.isnan(current))
        return _OPS[self.op](float(current), self.value)


@dataclass(frozen=True)
class Rule:
    """Conditions that must all hold, and what to tell the model when they do."""

    text: str  # the rule as configured, for logs
    conditions: tuple[Condition, ...]
    instruction: str

    def holds(self, facts: Mapping[str, float | bool]) -> bool:
        return all(c.holds(facts) for c in self.conditions)


def parse_rule(text: str) -> Rule:
    """Parse one ``CONDITION [and CONDITION ...] => INSTRUCTION`` line.

    Raises:
        ConfigError: naming what is wrong in the line and what is allowed.
    """
    if "=>" not in text:
        raise ConfigError(
            f"proactive rule {text!r} has no '=>': write 'CONDITION [and CONDITION] => INSTRUCTION'"
        )
    when, instruction = (part.strip() for part in text.split("=>", 1))
    if not instruction:
        raise ConfigError(f"proactive rule {text!r} says nothing after '=>'")
    conditions = []
    for part in re.split(r"\s+and\s+", when):
        match = _CONDITION.match(part)
        if match is None:
            raise ConfigError(
                f"proactive rule {text!r}: cannot read the condition {part!r}; "
                "use FACT or FACT OP NUMBER (OP: < <= > >= == !=)"
            )
        fact, op, value = match.groups()
        if fact not in FACTS:
            raise ConfigError(
                f"proactive rule {text!r}: unknown fact {fact!r}; known: {', '.join(FACTS)}"
            )
        try:
            number = float(value) if value is not None else 0.0
        except ValueError:
            raise ConfigError(f"proactive rule {text!r}: {value!r} is not a number") from None
        conditions.append(Condition(fact, op or "", number))
    return Rule(text, tuple(conditions), instruction)


class ProactivePolicy:
    """Decides, at each check, whether a rule fires (see the module docstring).

    Args:
        rules: configured rule lines (parsed here; a bad line raises ConfigError).
        min_interval_s: at least this long between two proactive turns, and between two
            firings of one rule.
        person_gone_s: a person in view counts as having appeared only when none was seen
            for at least this long before (0: every return to view counts).
        after_turn_s: no rule fires until the last turn ended this long ago (``idle_s``).
    """

    def __init__(
        self,
        rules: Sequence[str],
        *,
        min_interval_s: float = 30.0,
        person_gone_s: float = 0.0,
        after_turn_s: float = 0.0,
    ) -> None:
        for name, value in (
            ("min_interval_s", min_interval_s),
            ("person_gone_s", person_gone_s),
            ("after_turn_s", after_turn_s),
        ):
            if not value >= 0:
                raise ConfigError(f"proactive {name} must be >= 0, got {value!r}")
        self.rules = tuple(parse_rule(r) for r in rules if r.strip())
        self.min_interval_s = min_interval_s
        self.person_gone_s = person_gone_s
        self.after_turn_s = after_turn_s
        self._last_fired = -math.inf
        self._rule_fired: dict[str, float] = {}
        self._person_seen: bool | None = None  # None: no scene yet
        self._person_seen_at: float | None = None  # the last scene with a person in it
        self._appeared = False
        self.fired = 0

    def observe_person(self, present: bool, now: float) -> None:
        """A new scene at ``now`` (s, the scene's stamp): remember when a person comes into
        view after none was seen for ``person_gone_s``. A scene stamped before the last
        one with a person (a replay restarted) counts as a long absence."""
        if present:
            seen_at = self._person_seen_at
            gone = seen_at is None or not 0 <= now - seen_at < self.person_gone_s
            if self._person_seen is False and gone:
                self._appeared = True
            self._person_seen_at = now
        self._person_seen = present

    def check(
        self,
        now: float,
        *,
        listening: bool,
        idle_s: float,
        battery_percent: float = math.nan,
        temperature_c: float = math.nan,
    ) -> Rule | None:
        """The rule that fires now, or None. A person's appearance is used up by the check
        that sees it, whether a rule fires or not (it is an event, not a state)."""
        facts: dict[str, float | bool] = {
            "person_present": bool(self._person_seen),
            "person_appeared": self._appeared,
            "idle_s": idle_s,
            "battery_percent": battery_percent,
            "temperature_c": temperature_c,
        }
        self._appeared = False
        if (
            not listening
            or idle_s < self.after_turn_s
            or now - self._last_fired < self.min_interval_s
        ):
            return None
        for rule in self.rules:
            if now - self._rule_fired.get(rule.text, -math.inf) < self.min_interval_s:
                continue
            if rule.holds(facts):
                self._last_fired = self._rule_fired[rule.text] = now
                self.fired += 1
                return rule
        return None
