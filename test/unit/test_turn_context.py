"""What a turn is conditioned on: what the camera saw, frames, history and idle time (tier 1,
no ROS)."""

from __future__ import annotations

import pytest

from omniflow.core.dialogue import StartTurn, TurnEnded
from omniflow.core.prompt import DEFAULT_FORMAT, Turn
from omniflow.core.timing import NS_PER_MS, NS_PER_S
from omniflow.core.turn_context import (
    FRAME_MATCH_NS,
    TRIGGER_MATCH_NS,
    TURN_PARAMS,
    Seen,
    TurnContext,
    trim_oldest,
)

T0 = 1_700_000_000 * NS_PER_S  # a plausible node clock
MAX_AGE = 3000 * NS_PER_MS
SYSTEM = "You are a robot."


def spoken(turn_id: int = 1, text: str = "what is this", utterance: int = 5) -> StartTurn:
    return StartTurn(turn_id, text, "speech", utterance)


def context_with_speech(start_ns: int = T0) -> TurnContext:
    ctx = TurnContext(T0)
    ctx.utterance_started(5, start_ns)
    return ctx


def test_the_association_of_the_utterance_names_what_was_seen():
    ctx = context_with_speech()
    ctx.add_association(T0 - 5 * NS_PER_S, [(T0 - 5 * NS_PER_S, "a dog")])  # another one
    ctx.add_association(
        T0 + 30 * NS_PER_MS, [(T0 - 100, "a red cup"), (T0 - 50, "a red cup"), (T0 - 20, "a hand")]
    )
    ctx.add_scene(T0, "The camera shows a table.", False)
    assert ctx.seen(5, T0 + NS_PER_S, MAX_AGE) == Seen(
        "a red cup; a hand", (T0 - 100, T0 - 50, T0 - 20)
    )


@pytest.mark.parametrize("chosen", [[], None])
def test_without_a_matching_choice_the_newest_recent_scene_is_used(chosen):
    ctx = context_with_speech()
    if chosen is None:  # the only association is too far from the utterance
        ctx.add_association(T0 + TRIGGER_MATCH_NS + 1, [(T0, "a dog")])
    else:  # it matches but chose nothing
        ctx.add_association(T0, chosen)
    ctx.add_scene(T0 - NS_PER_S, "old", False)
    ctx.add_scene(T0, "The camera shows a face.", True)
    assert ctx.seen(5, T0 + NS_PER_S, MAX_AGE) == Seen("The camera shows a face.", (T0,))


def test_a_stale_scene_is_not_described():
    ctx = TurnContext(T0)
    ctx.add_scene(T0, "The camera shows a face.", True)
    assert ctx.seen(0, T0 + MAX_AGE, MAX_AGE).text == "The camera shows a face."
    assert ctx.seen(0, T0 + MAX_AGE + 1, MAX_AGE) == Seen()


def test_frames_nearest_the_chosen_stamps_at_most_two():
    ctx = TurnContext(T0)
    for i in range(10):
        ctx.add_frame(T0 + i * 200 * NS_PER_MS, f"frame{i}")
    stamps = [T0 + 210 * NS_PER_MS, T0 + 10 * NS_PER_S, T0 + 400 * NS_PER_MS]
    assert ctx.frames(stamps) == ["frame1"]  # the second is too far; the third is not looked at
    edge = T0 + 1000 * NS_PER_MS + FRAME_MATCH_NS
    assert ctx.frames([edge, T0]) == ["frame5", "frame0"]
    assert ctx.frames([edge + 1]) == []
    ctx.clear_frames()
    assert ctx.frames([T0]) == []


def test_a_turn_prompt_carries_scene_history_and_decoded_frames():
    ctx = context_with_speech()
    ctx.add_association(T0, [(T0, "a red cup"), (T0 + 66 * NS_PER_MS, "a red cup")])
    ctx.add_frame(T0, "good")
    ctx.add_frame(T0 + 66 * NS_PER_MS, "broken")
    decode = {"good": "RGB", "broken": None}.get  # a frame that does not decode is skipped
    prompt = ctx.begin_turn(spoken(), SYSTEM, T0, vision=True, max_age_ns=MAX_AGE, decode=decode)
    assert (prompt.system, prompt.user, prompt.scene, prompt.images) == (
        SYSTEM,
        "what is this",
        "a red cup",
        ("RGB",),
    )
    assert ctx.begin_turn(spoken(2), SYSTEM, T0, vision=True, max_age_ns=MAX_AGE).images == ()
    blind = ctx.begin_turn(spoken(3), SYSTEM, T0, vision=False, max_age_ns=MAX_AGE, decode=decode)
    assert (blind.scene, blind.images) == ("", ())


def test_the_words_evaluated_ahead_with_the_scene_are_a_prefix_of_the_turns_prompt():
    ctx = context_with_speech()
    ctx.add_association(T0, [(T0, "a red cup")])
    warm = ctx.warm_prompt(SYSTEM, "what is", 5, T0 + NS_PER_S, vision=True, max_age_ns=MAX_AGE)
    ahead = DEFAULT_FORMAT.render(warm, open_turn=False)
    turn = ctx.begin_turn(spoken(), SYSTEM, T0 + NS_PER_S, vision=True, max_age_ns=MAX_AGE)
    assert DEFAULT_FORMAT.render(turn).startswith(ahead)
    assert "a red cup" in ahead


def test_history_keeps_what_was_said_and_only_finished_sentences_of_a_cut_answer():
    ctx = TurnContext(T0)
    ctx.begin_turn(spoken(1, "what is this"), SYSTEM, T0, vision=False, max_age_ns=0)
    ctx.end_turn(TurnEnded(1, "done", " It is a cup. ", "finished"), T0, 16)
    ctx.begin_turn(spoken(2, "tell me more"), SYSTEM, T0, vision=False, max_age_ns=0)
    ctx.end_turn(TurnEnded(2, "interrupted", "It is red. It holds", "barge-in"), T0, 16)
    ctx.begin_turn(spoken(3, "and now"), SYSTEM, T0, vision=False, max_age_ns=0)
    ctx.end_turn(TurnEnded(3, "cancelled", "Well", "preempted"), T0, 16)
    assert ctx.history == (
        Turn("user", "what is this"),
        Turn("robot", "It is a cup."),
        Turn("user", "tell me more"),
        Turn("robot", "It is red."),
        Turn("user", "and now"),
    )
    prompt = ctx.begin_turn(spoken(4, "bye"), SYSTEM, T0, vision=False, max_age_ns=0)
    assert prompt.history == ctx.history
    assert ctx.warm_prompt(SYSTEM, "by", 0, T0, vision=False, max_age_ns=MAX_AGE).history == (
        ctx.history
    )


def test_history_keeps_the_scene_each_turn_was_asked_in():
    ctx = context_with_speech()
    ctx.add_association(T0, [(T0, "a red cup")])
    ctx.begin_turn(spoken(1), SYSTEM, T0, vision=True, max_age_ns=MAX_AGE)
    ctx.end_turn(TurnEnded(1, "done", "It is a cup.", "finished"), T0, 16)
    ctx.add_scene(T0, "a person waving", True)
    ctx.begin_turn(StartTurn(2, "", "proactive", 0), SYSTEM, T0, vision=True, max_age_ns=MAX_AGE)
    ctx.end_turn(TurnEnded(2, "done", "Hello there.", "finished"), T0, 16)
    assert ctx.history == (
        Turn("user", "what is this", "a red cup"),
        Turn("robot", "It is a cup."),
        Turn("robot", "Hello there.", "a person waving"),  # no user line: the scene stays
    )


def test_history_is_trimmed_to_max_turns_oldest_first():
    ctx = TurnContext(T0)
    for turn in range(1, 5):
        ctx.begin_turn(spoken(turn, f"q{turn}"), SYSTEM, T0, vision=False, max_age_ns=0)
        ctx.end_turn(TurnEnded(turn, "done", f"a{turn}.", ""), T0, 3)
    assert ctx.history == (Turn("robot", "a3."), Turn("user", "q4"), Turn("robot", "a4."))
    ctx.end_turn(TurnEnded(9, "failed", "", "boom"), T0, 0)
    assert ctx.history == ()


def test_idle_time_is_on_the_node_clock_and_restarts_at_each_turn_end():
    ctx = TurnContext(T0)
    assert ctx.idle_s(T0 + 90 * NS_PER_S) == 90.0
    ctx.end_turn(TurnEnded(1, "done", "Hi.", ""), T0 + 100 * NS_PER_S, 16)
    assert ctx.idle_s(T0 + 105 * NS_PER_S) == 5.0


def test_idle_time_starts_with_the_clock_and_again_when_it_goes_back():
    ctx = TurnContext(0)  # sim time before the first /clock
    assert ctx.idle_s(0) == 0.0
    assert ctx.idle_s(T0) == 0.0  # the clock started: counting from now
    assert ctx.idle_s(T0 + 2 * NS_PER_S) == 2.0
    assert ctx.idle_s(T0 - NS_PER_S) == 0.0  # a replay restarted
    assert ctx.idle_s(T0) == 1.0


def test_proactive_rules_see_idle_time_power_and_people_on_the_node_clock():
    params = {spec.name: spec.default for spec in TURN_PARAMS}
    params["proactive.rules"] = (
        "idle_s > 60 and battery_percent < 15 => Say the battery is "
        "low.\nperson_appeared => Greet them."
    )
    params["proactive.min_interval_s"] = 30.0
    ctx = TurnContext.from_params(params, T0)
    assert ctx.proactive(T0 + 61 * NS_PER_S, listening=True) is None  # battery unknown
    ctx.set_power(12.0, 50.0)
    assert ctx.proactive(T0 + 62 * NS_PER_S, listening=False) is None
    rule = ctx.proactive(T0 + 63 * NS_PER_S, listening=True)
    assert rule is not None and rule.instruction == "Say the battery is low."
    ctx.add_scene(T0 + 64 * NS_PER_S, "", False)
    ctx.add_scene(T0 + 65 * NS_PER_S, "a face", True)
    assert ctx.proactive(T0 + 70 * NS_PER_S, listening=True) is None  # within min_interval
    ctx.set_power(80.0, 50.0)
    ctx.add_scene(T0 + 90 * NS_PER_S, "", False)
    ctx.add_scene(T0 + 91 * NS_PER_S, "a face", True)
    rule = ctx.proactive(T0 + 94 * NS_PER_S, listening=True)
    assert rule is not None and rule.instruction == "Greet them."


def test_the_proactive_idle_fact_follows_a_replayed_clock_not_the_wall_clock():
    params = {spec.name: spec.default for spec in TURN_PARAMS}
    params["proactive.rules"] = "idle_s >= 600 => Ask if they need anything."
    ctx = TurnContext.from_params(params, 0)
    sim_start = 1_600_000_000 * NS_PER_S
    assert ctx.proactive(sim_start, listening=True) is None
    assert ctx.proactive(sim_start + 599 * NS_PER_S, listening=True) is None
    assert ctx.proactive(sim_start + 600 * NS_PER_S, listening=True) is not None


def test_trim_oldest_keeps_the_newest_entries():
    table = {i: str(i) for i in range(10)}
    trim_oldest(table, 3)
    assert table == {7: "7", 8: "8", 9: "9"}


def test_the_newest_association_of_the_utterance_wins_over_the_one_at_its_start():
    ctx = context_with_speech()
    ctx.add_association(T0, [(T0, "cup; dining table")], utterance_id=5)  # at START: time
    ctx.add_association(T0, [(T0 - 2 * NS_PER_S, "cat")], utterance_id=5)  # by the words
    ctx.add_association(T0, [(T0, "something else")], utterance_id=6)
    assert ctx.seen(5, T0, MAX_AGE) == Seen("cat", (T0 - 2 * NS_PER_S,))


def test_a_chosen_frame_is_kept_until_the_turn_of_its_utterance_ends():
    ctx = context_with_speech()
    cat_ns = T0 - 2 * NS_PER_S
    ctx.add_frame(cat_ns, "cat frame")
    ctx.add_scene(cat_ns, "a cat", False)  # fusion encoded it: kept beyond the newest 48
    for i in range(100):  # 3.3 s at 30 frames/s push it out of the newest frames
        ctx.add_frame(T0 + i * 33 * NS_PER_MS, f"frame {i}")
    ctx.add_association(T0, [(cat_ns, "a cat")], utterance_id=5)
    for i in range(100, 160):  # the final takes a while; the encoded frames roll on too
        ctx.add_frame(T0 + i * 33 * NS_PER_MS, f"frame {i}")
        ctx.add_scene(T0 + i * 33 * NS_PER_MS, "a cup", False)
    assert ctx.frames([cat_ns]) == ["cat frame"]  # pinned by the association
    prompt = ctx.begin_turn(spoken(), SYSTEM, T0, vision=True, max_age_ns=MAX_AGE, decode=str)
    assert prompt.images == ("cat frame",)
    ctx.end_turn(TurnEnded(1, "done", "It is grey.", "finished"), T0, 16)
    assert ctx.frames([cat_ns]) == []  # released with its turn


def test_a_frame_chosen_before_it_arrives_is_kept_when_it_comes():
    ctx = context_with_speech()
    ctx.add_association(T0, [(T0, "a cup")], utterance_id=5)
    ctx.add_frame(T0 + 10 * NS_PER_MS, "late frame")
    for i in range(1, 100):
        ctx.add_frame(T0 + i * 33 * NS_PER_MS, f"frame {i}")
    assert ctx.frames([T0]) == ["late frame"]
