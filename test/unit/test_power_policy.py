"""The power policy as tables: timelines of inputs and the modes they must give."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from omniflow.core.power_policy import (
    ActionConfig,
    Decision,
    Mode,
    PolicyConfig,
    PolicyInput,
    PowerPolicy,
    plan,
)

ACT, LIS, IDL, SLP, HOT = Mode.ACTIVE, Mode.LISTEN, Mode.IDLE, Mode.SLEEP, Mode.THERMAL_LIMIT
NAN = float("nan")
CONFIG = PolicyConfig(
    active_hold_s=10,
    idle_after_s=60,
    sleep_after_s=300,
    min_dwell_s=5,
    temperature_c=40,
    temperature_hysteresis_c=3,
    sustained_w=2,
    peak_w=5,
    power_window_s=30,
    power_hysteresis=0.1,
    battery_low_percent=20,
)


def run(rows, config=CONFIG):
    """rows: (time s, input fields, expected mode); returns the decisions."""
    policy = PowerPolicy(config)
    decisions = []
    for now, fields, expected in rows:
        decision = policy.step(PolicyInput(now_s=now, **fields))
        assert decision.mode == expected, (now, fields, decision)
        decisions.append(decision)
    return decisions


LISTENING = {"conversation": False}
TALKING = {"conversation": True}


@pytest.mark.parametrize(
    "rows",
    [
        pytest.param(
            [(0, {}, LIS), (59, {}, LIS), (60, {}, IDL), (299, {}, IDL), (300, {}, SLP)],
            id="no dialogue: listen, idle, sleep from start",
        ),
        pytest.param(
            [
                (0, LISTENING, LIS),
                (1, TALKING, ACT),
                (2, LISTENING, ACT),
                (11, LISTENING, LIS),
                (60, LISTENING, LIS),
                (61, LISTENING, IDL),
                (301, LISTENING, SLP),
            ],
            id="conversation then quiet: active hold, then timeouts from the last turn",
        ),
        pytest.param(
            [(0, LISTENING, LIS), (400, LISTENING, SLP), (400.5, TALKING, ACT)],
            id="wake on speech at once from sleep",
        ),
        pytest.param(
            [(0, LISTENING, LIS), (60, LISTENING, IDL), (61, TALKING, ACT)],
            id="wake on speech at once from idle, no dwell",
        ),
    ],
)
def test_conversation_timeline(rows):
    run(rows)


def test_dwell_holds_a_lower_power_mode_change():
    config = PolicyConfig(active_hold_s=1, idle_after_s=2, sleep_after_s=6, min_dwell_s=5)
    decisions = run(
        [
            (0, TALKING, ACT),
            (1, LISTENING, ACT),
            (2, LISTENING, ACT),
            (4.9, LISTENING, ACT),
            (5, LISTENING, IDL),  # straight to what is wanted
            (7, LISTENING, IDL),
            (9.9, LISTENING, IDL),
            (10, LISTENING, SLP),
        ],
        config,
    )
    assert "holding 5 s before IDLE" in decisions[2].reason
    assert decisions[2].wanted == IDL and decisions[6].wanted == SLP


@pytest.mark.parametrize(("temperature", "expected"), [(39.9, LIS), (40.0, HOT), (45.0, HOT)])
def test_thermal_limit_at_the_temperature(temperature, expected):
    run([(0, {"temperature_c": temperature}, expected)])


def test_thermal_hysteresis_and_dwell_before_leaving():
    decisions = run(
        [
            (0, {"temperature_c": 35.0, **TALKING}, ACT),
            (1, {"temperature_c": 41.0, **TALKING}, HOT),  # priority over conversation
            (2, {"temperature_c": 39.0, **TALKING}, HOT),  # under the limit, above 37
            (3, {"temperature_c": 36.0, **TALKING}, HOT),  # under 37 but dwell (5 s) not reached
            (6, {"temperature_c": 36.0, **TALKING}, ACT),  # cleared: back to what is wanted
            (7, {"temperature_c": 39.5, **TALKING}, ACT),  # between the bounds: no re-entry
        ]
    )
    assert decisions[1].wanted == ACT and "41.0 °C" in decisions[1].reason
    assert "back under budget" in decisions[4].reason


def test_unknown_temperature_never_throttles():
    run([(0, {"temperature_c": NAN}, LIS), (10, {"temperature_c": NAN, **TALKING}, ACT)])


def test_measured_power_peak_and_sustained_budgets():
    decisions = run(
        [
            (0, {"power_w": 1.0}, LIS),
            (1, {"power_w": 5.5}, HOT),  # one reading over the 5 W peak
            (7, {"power_w": 1.0}, LIS),  # average ~1.2 W, peak clear, dwell done
        ]
    )
    assert "peak" in decisions[1].reason
    # 3 W held: the 30 s average crosses 2 W after ~30 * ln(2) = 21 s, not at once.
    policy = PowerPolicy(CONFIG)
    modes = [
        policy.step(PolicyInput(now_s=t, power_w=1.0 if t == 0 else 3.0)).mode for t in range(0, 40)
    ]
    first = modes.index(HOT)
    assert 15 <= first <= 25 and all(m == LIS for m in modes[:first])
    assert "sustained" in policy.reason


def test_estimated_power_counts_only_when_asked():
    estimated = {"power_w": 6.0, "power_estimated": True}
    run([(0, estimated, LIS)])
    config = PolicyConfig(**{**CONFIG.__dict__, "power_from_estimate": True})
    run([(0, estimated, HOT)], config)


@pytest.mark.parametrize(
    ("battery", "charging", "expected_at_15_s"),
    [
        (15.0, False, IDL),  # low, discharging: LISTEN skipped
        (15.0, True, LIS),  # charging: normal timeouts
        (50.0, False, LIS),
        (NAN, False, LIS),  # no battery
    ],
)
def test_battery_low_skips_listen(battery, charging, expected_at_15_s):
    fields = {"battery_percent": battery, "battery_charging": charging, **LISTENING}
    run([(0, fields, LIS if expected_at_15_s == LIS else IDL), (15, fields, expected_at_15_s)])


def test_battery_low_sleeps_at_the_idle_timeout():
    fields = {"battery_percent": 10.0, **LISTENING}
    decisions = run([(0, fields, IDL), (59, fields, IDL), (60, fields, SLP)])
    assert "battery low (10 %)" in decisions[-1].reason


def test_plan_rates_per_mode_and_thermal_takes_the_lower():
    config = ActionConfig()
    assert [plan(Decision(m, "", m), config).camera_fps for m in (ACT, LIS, IDL, SLP)] == [
        30.0,
        15.0,
        10.0,
        2.0,
    ]
    sleeping = plan(Decision(SLP, "", SLP), config)
    assert not sleeping.llm_active and sleeping.governor == "powersave"
    assert plan(Decision(ACT, "", ACT), config).governor == "schedutil"
    hot_talking = plan(Decision(HOT, "", ACT), config)
    assert hot_talking.camera_fps == 10.0 and hot_talking.llm_active
    assert hot_talking.llm_threads == 1 and hot_talking.max_freq_ratio == 0.6
    hot_asleep = plan(Decision(HOT, "", SLP), config)
    assert hot_asleep.camera_fps == 2.0 and not hot_asleep.llm_active
    held = plan(Decision(LIS, "holding", SLP), config)  # dwell holds LISTEN: LISTEN's rates
    assert held.camera_fps == 15.0 and held.llm_active
    keep_llm = ActionConfig(llm_unload_in_sleep=False, llm_threads=0)
    assert plan(Decision(SLP, "", SLP), keep_llm).llm_active
    assert plan(Decision(HOT, "", ACT), keep_llm).llm_threads == 0


@settings(max_examples=200)
@given(
    st.lists(
        st.tuples(
            st.floats(0.01, 30),
            st.one_of(st.none(), st.booleans()),
            st.one_of(st.just(NAN), st.floats(20, 90)),
            st.one_of(st.just(NAN), st.floats(0, 10)),
        ),
        max_size=60,
    )
)
def test_invariants(steps):
    """Whatever happens: over the limit means THERMAL_LIMIT; conversation under the limit
    means ACTIVE; a step down in power waits for the dwell time."""
    policy = PowerPolicy(CONFIG)
    now, since, previous = 0.0, 0.0, Mode.LISTEN
    for dt, conversation, temperature, power in steps:
        now += dt
        decision = policy.step(
            PolicyInput(
                now_s=now, conversation=conversation, temperature_c=temperature, power_w=power
            )
        )
        if temperature >= CONFIG.temperature_c or power > CONFIG.peak_w:
            assert decision.mode == HOT
        elif conversation and decision.mode != HOT:
            assert decision.mode == ACT
        if decision.mode != previous:
            lower = (
                previous != HOT and decision.mode != HOT and decision.mode.value > previous.value
            )
            if lower or previous == HOT:
                assert now - since >= CONFIG.min_dwell_s
            since = now
        previous = decision.mode
