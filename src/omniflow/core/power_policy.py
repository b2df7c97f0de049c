"""The power manager's policy: which mode the robot should be in, and what each mode asks of
the camera, the vision encoder, the LLM and the CPU. Pure and clock-free (times are passed
in, in seconds), so it is table-tested without ROS.

Modes, from the most to the least power (the values are ``omniflow/msg/PowerState``'s):

- ACTIVE: in conversation (the dialogue is anywhere but LISTENING, or the user's voice was
  heard), and for ``active_hold_s`` after it, so pauses between turns do not flap;
- LISTEN: waiting for speech, up to ``idle_after_s`` after the last interaction;
- IDLE: nobody around, up to ``sleep_after_s``;
- SLEEP: the LLM unloaded, the camera and the vision encoder at their lowest rates; the
  microphone and the voice detector keep running, so speech still wakes the robot;
- THERMAL_LIMIT: over the temperature or power budget, whatever the conversation; the
  conversation goes on, throttled.

Rules, in priority order:

1. Over budget (temperature >= ``temperature_c``; measured power averaged over
   ``power_window_s`` above ``sustained_w``, or one reading above ``peak_w``) enters
   THERMAL_LIMIT at once. It is left only when every reading is back under its budget minus
   the hysteresis (``temperature_hysteresis_c``; ``power_hysteresis`` as a fraction) and the
   mode has lasted ``min_dwell_s``.
2. Conversation wakes to ACTIVE at once, from any mode (no dwell): the robot must answer.
3. Otherwise the time since the last interaction picks LISTEN, IDLE or SLEEP; moving to a
   lower-power mode needs ``min_dwell_s`` in the current one. With the battery low
   (<= ``battery_low_percent`` and not charging) LISTEN is skipped and SLEEP comes at
   ``idle_after_s``.

Power estimated by a model (no sensor) is reported but only counts against the budget with
``power_from_estimate``: a model of a PC's load is no reason to throttle it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import IntEnum

NAN = float("nan")


class Mode(IntEnum):
    """The power modes; values match omniflow/msg/PowerState."""

    ACTIVE = 0
    LISTEN = 1
    IDLE = 2
    SLEEP = 3
    THERMAL_LIMIT = 4


# Lower-power order of the conversation modes (THERMAL_LIMIT stands apart).
_DEPTH = {Mode.ACTIVE: 0, Mode.LISTEN: 1, Mode.IDLE: 2, Mode.SLEEP: 3}


@dataclass(frozen=True)
class PolicyConfig:
    """Timeouts and budgets (phone-class defaults from the source material)."""

    active_hold_s: float = 10.0
    idle_after_s: float = 60.0
    sleep_after_s: float = 300.0
    min_dwell_s: float = 5.0
    temperature_c: float = 40.0
    temperature_hysteresis_c: float = 3.0
    sustained_w: float = 2.0
    peak_w: float = 5.0
    power_window_s: float = 30.0
    power_hysteresis: float = 0.1
    power_from_estimate: bool = False
    battery_low_percent: float = 20.0


@dataclass(frozen=True)
class PolicyInput:
    """One tick's inputs. ``conversation``: True while the dialogue is not LISTENING (or
    voice was heard since the last tick), False while LISTENING, None before any dialogue
    state arrived. NaN readings are unknown and never trigger anything."""

    now_s: float
    conversation: bool | None = None
    temperature_c: float = NAN
    power_w: float = NAN
    power_estimated: bool = False
    battery_percent: float = NAN
    battery_charging: bool = False


@dataclass(frozen=True)
class Decision:
    """The mode, why, and the mode the conversation alone asks for (``wanted``: what
    THERMAL_LIMIT throttles)."""

    mode: Mode
    reason: str
    wanted: Mode
    changed: bool = False
    sustained_w: float = NAN


class PowerPolicy:
    """Decides the mode once per tick from :class:`PolicyInput`; keeps the state it needs
    (current mode and since when, last interaction, the power average)."""

    def __init__(self, config: PolicyConfig | None = None) -> None:
        self.config = config or PolicyConfig()
        self.mode = Mode.LISTEN
        self.reason = "starting"
        self._since: float | None = None
        self._start: float | None = None
        self._last_interaction: float | None = None
        self._average_w = NAN
        self._last_power_s: float | None = None
        self._wanted = Mode.LISTEN

    @property
    def sustained_w(self) -> float:
        """Measured power averaged over ``power_window_s`` (exponentially); NaN if none."""
        return self._average_w

    def step(self, inp: PolicyInput) -> Decision:
        now = inp.now_s
        first = self._start is None
        if first:
            self._start = self._since = now
        if inp.conversation:
            self._last_interaction = now
        power = inp.power_w if (self.config.power_from_estimate or not inp.power_estimated) else NAN
        self._average(power, now)

        wanted, wanted_reason = self._conversation_mode(inp)
        dwelt = first or now - self._since >= self.config.min_dwell_s
        over = self._over_budget(inp.temperature_c, power)
        if over:
            mode, reason = Mode.THERMAL_LIMIT, over
        elif self.mode == Mode.THERMAL_LIMIT and not (
            dwelt and self._under_budget(inp.temperature_c, power)
        ):
            mode = Mode.THERMAL_LIMIT
            reason = (
                self.reason
                if not dwelt
                else "cooling down: readings not yet under the budget minus the hysteresis"
            )
        elif self.mode == Mode.THERMAL_LIMIT:
            mode, reason = wanted, f"back under budget; {wanted_reason}"
        elif _DEPTH[wanted] > _DEPTH[self.mode] and not dwelt:
            mode = self.mode
            reason = f"{self.reason} (holding {self.config.min_dwell_s:g} s before {wanted.name})"
        else:
            mode, reason = wanted, wanted_reason
        changed = mode != self.mode
        if changed:
            self._since = now
        self.mode, self.reason, self._wanted = mode, reason, wanted
        return Decision(mode, reason, wanted, changed, self._average_w)

    # ----------------------------------------------------------------- rules
    def _conversation_mode(self, inp: PolicyInput) -> tuple[Mode, str]:
        config = self.config
        now = inp.now_s
        if inp.conversation:
            return Mode.ACTIVE, "in conversation"
        last = self._last_interaction
        if last is not None and now - last < config.active_hold_s:
            return Mode.ACTIVE, f"conversation paused {now - last:.0f} s ago"
        quiet = now - (last if last is not None else self._start)
        idle_after, sleep_after = config.idle_after_s, config.sleep_after_s
        low = (
            not math.isnan(inp.battery_percent)
            and not inp.battery_charging
            and inp.battery_percent <= config.battery_low_percent
        )
        if low:
            idle_after, sleep_after = 0.0, config.idle_after_s
        since = "since the last interaction" if last is not None else "since start"
        battery = f"battery low ({inp.battery_percent:.0f} %); " if low else ""
        if quiet >= sleep_after:
            return Mode.SLEEP, f"{battery}quiet for {quiet:.0f} s {since}"
        if quiet >= idle_after:
            return Mode.IDLE, f"{battery}quiet for {quiet:.0f} s {since}"
        return Mode.LISTEN, f"waiting for speech ({quiet:.0f} s {since})"

    def _average(self, power: float, now: float) -> None:
        if math.isnan(power):
            return
        if math.isnan(self._average_w) or self._last_power_s is None:
            self._average_w = power
        else:
            dt = max(now - self._last_power_s, 0.0)
            alpha = (
                1.0 - math.exp(-dt / self.config.power_window_s)
                if self.config.power_window_s > 0
                else 1.0
            )
            self._average_w += alpha * (power - self._average_w)
        self._last_power_s = now

    def _over_budget(self, temperature: float, power: float) -> str:
        config = self.config
        if temperature >= config.temperature_c:
            return f"temperature {temperature:.1f} °C >= limit {config.temperature_c:g} °C"
        if power > config.peak_w:
            return f"power {power:.2f} W > peak budget {config.peak_w:g} W"
        if self._average_w > config.sustained_w:
            return f"sustained power {self._average_w:.2f} W > budget {config.sustained_w:g} W"
        return ""

    def _under_budget(self, temperature: float, power: float) -> bool:
        config = self.config
        keep = 1.0 - config.power_hysteresis
        return (
            not temperature > config.temperature_c - config.temperature_hysteresis_c
            and not power > config.peak_w * keep
            and not self._average_w > config.sustained_w * keep
        )


# --------------------------------------------------------------------------- actions
@dataclass(frozen=True)
class ActionConfig:
    """What each mode asks of the other nodes and the CPU."""

    camera_fps: dict[Mode, float] = field(
        default_factory=lambda: {
            Mode.ACTIVE: 30.0,
            Mode.LISTEN: 15.0,
            Mode.IDLE: 10.0,
            Mode.SLEEP: 2.0,
            Mode.THERMAL_LIMIT: 10.0,
        }
    )
    vision_rate_hz: dict[Mode, float] = field(
        default_factory=lambda: {
            Mode.ACTIVE: 5.0,
            Mode.LISTEN: 2.0,
            Mode.IDLE: 1.0,
            Mode.SLEEP: 0.5,
            Mode.THERMAL_LIMIT: 1.0,
        }
    )
    llm_threads: int = 2  # 0: leave the LLM's threads alone
    llm_threads_thermal: int = 1
    llm_unload_in_sleep: bool = True
    governor_awake: str = "schedutil"  # "": leave the governor alone
    governor_asleep: str = "powersave"
    thermal_max_freq_ratio: float = 0.6


@dataclass(frozen=True)
class Plan:
    """The settings a decision asks for. ``llm_threads`` 0: leave alone; ``governor`` "":
    leave alone; ``max_freq_ratio``: the CPU's frequency cap over its hardware maximum."""

    camera_fps: float
    vision_rate_hz: float
    llm_threads: int
    llm_active: bool
    governor: str
    max_freq_ratio: float


def plan(decision: Decision, config: ActionConfig) -> Plan:
    """The settings for ``decision``. Under THERMAL_LIMIT each rate is the lower of the
    thermal one and the one the conversation asks for, and the LLM stays loaded if the
    conversation needs it (fewer threads): throttled, not deaf."""
    # The mode held (dwell may keep it above what the conversation asks), or under
    # THERMAL_LIMIT the one the conversation asks for.
    wanted = decision.wanted if decision.mode == Mode.THERMAL_LIMIT else decision.mode
    asleep = wanted in (Mode.IDLE, Mode.SLEEP)
    llm_active = not (config.llm_unload_in_sleep and wanted == Mode.SLEEP)
    if decision.mode == Mode.THERMAL_LIMIT:
        thermal = Mode.THERMAL_LIMIT
        return Plan(
            camera_fps=min(config.camera_fps[thermal], config.camera_fps[wanted]),
            vision_rate_hz=min(config.vision_rate_hz[thermal], config.vision_rate_hz[wanted]),
            llm_threads=config.llm_threads_thermal if config.llm_threads else 0,
            llm_active=llm_active,
            governor=config.governor_asleep,
            max_freq_ratio=config.thermal_max_freq_ratio,
        )
    return Plan(
        camera_fps=config.camera_fps[wanted],
        vision_rate_hz=config.vision_rate_hz[wanted],
        llm_threads=config.llm_threads,
        llm_active=llm_active,
        governor=config.governor_asleep if asleep else config.governor_awake,
        max_freq_ratio=1.0,
    )
