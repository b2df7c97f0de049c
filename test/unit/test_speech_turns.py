"""The speech planner: which phrases to speak, and when to stop (tier 1, no ROS)."""

from __future__ import annotations

import pytest

from omniflow.core.dialogue import State
from omniflow.core.phrases import PhraseChunker
from omniflow.core.speech_turns import Speak, SpeechPlanner, Stop, TurnDone, TurnGate


def planner(**kwargs) -> SpeechPlanner:
    return SpeechPlanner(
        lambda: PhraseChunker(
            first_min_words=2, first_max_words=6, first_max_wait_s=0.35, min_words=4, max_words=25
        ),
        **kwargs,
    )


def stream(
    plan: SpeechPlanner, turn: int, text: str, start: int = 0, final: bool = True, now: float = 0.0
) -> list:
    words = text.split(" ")
    actions = []
    for offset, word in enumerate(words):
        delta = word if offset == 0 and start == 0 else " " + word
        actions += plan.on_chunk(
            turn, start + offset, delta, final and offset == len(words) - 1, now + 0.025 * offset
        )
    return actions


def spoken(actions) -> list[str]:
    return [a.phrase.text for a in actions if isinstance(a, Speak)]


def test_a_whole_turn_is_spoken_phrase_by_phrase_then_done():
    plan = planner()
    actions = stream(plan, 1, "Sure, the red box is a toolbox. It holds a hammer.")
    assert " ".join(spoken(actions)) == "Sure, the red box is a toolbox. It holds a hammer."
    assert len(spoken(actions)) >= 2
    assert actions[-1] == TurnDone(1)
    assert [a.phrase.index for a in actions if isinstance(a, Speak)] == list(
        range(len(spoken(actions)))
    )
    assert plan.current_turn is None


def test_the_first_phrase_goes_before_the_turn_ends():
    plan = planner()
    actions = stream(plan, 1, "Hello there, I can see a red box on the table", final=False)
    assert spoken(actions)  # released without waiting for the rest
    assert not any(isinstance(a, TurnDone) for a in actions)


def test_a_newer_turn_stops_the_current_one_and_late_chunks_of_it_are_ignored():
    plan = planner()
    stream(plan, 1, "This answer goes on and on without", final=False)
    actions = stream(plan, 2, "New answer.", final=False)
    assert actions[0] == Stop(1, "turn 2 started")
    assert stream(plan, 1, "an end", start=7) == []
    assert plan.counts.stale_chunks == 2


def test_an_interrupt_stops_the_turn_and_its_remaining_chunks_are_ignored():
    plan = planner()
    stream(plan, 5, "Let me tell you about", final=False)
    assert plan.interrupt("user spoke") == [Stop(5, "user spoke")]
    assert plan.interrupt("again") == []  # idle: nothing to stop
    assert stream(plan, 5, "the toolbox.", start=5) == []


def test_repeated_chunks_are_ignored_and_early_ones_wait_for_the_gap():
    plan = planner()
    assert plan.on_chunk(1, 0, "One", False, 0.0) == []
    assert plan.on_chunk(1, 0, "One", False, 0.0) == []
    assert plan.counts.duplicate_chunks == 1
    assert plan.on_chunk(1, 2, " three.", True, 0.0) == []  # waits for index 1
    actions = plan.on_chunk(1, 1, " two", False, 0.01)
    assert spoken(actions) == ["One two three."]
    assert actions[-1] == TurnDone(1)


def test_a_missing_chunk_is_skipped_after_the_gap_timeout():
    plan = planner(gap_timeout_s=0.5)
    plan.on_chunk(1, 0, "One", False, 0.0)
    plan.on_chunk(1, 2, " three.", True, 0.1)
    assert not any(isinstance(a, TurnDone) for a in plan.poll(0.3))  # still waiting
    actions = plan.poll(0.7)
    assert " ".join(spoken(actions)) == "One three."
    assert actions[-1] == TurnDone(1)
    assert plan.counts.skipped_chunks == 1


def test_the_time_budget_releases_the_first_words_without_new_text():
    plan = planner()
    assert plan.on_chunk(1, 0, "Well ", False, 0.0) == []
    assert spoken(plan.poll(0.5)) == ["Well"]


def test_a_restarted_dialogue_manager_starting_again_at_turn_zero_is_heard():
    plan = planner()
    stream(plan, 40, "Old answer.")
    actions = stream(plan, 0, "Fresh start.")
    assert spoken(actions) == ["Fresh start."]


@pytest.mark.parametrize("text", ["", "   "])
def test_an_empty_final_chunk_ends_the_turn_with_nothing_to_say(text):
    plan = planner()
    actions = plan.on_chunk(3, 0, text, True, 0.0)
    assert spoken(actions) == []
    assert actions == [TurnDone(3)]


def test_a_new_turn_stops_the_previous_one_while_it_is_still_audible():
    plan = planner()
    stream(plan, 1, "A whole answer that arrived at once.")  # open and closed, still playing
    actions = stream(plan, 2, "Another.")
    assert actions[0] == Stop(1, "turn 2 started")
    plan.played_out(2)
    assert stream(plan, 3, "Third.")[0] != Stop(2, "turn 3 started")


def test_an_interrupt_stops_a_turn_that_is_only_audible_and_then_nothing():
    plan = planner()
    stream(plan, 1, "Decoded already.")
    assert plan.interrupt("barge-in") == [Stop(1, "barge-in")]
    assert plan.interrupt("again") == []
    stream(plan, 2, "Next.")
    plan.played_out(2)
    assert plan.interrupt("late") == []


def test_a_lost_source_ends_the_open_turn_with_what_it_holds():
    plan = planner()
    actions = stream(plan, 4, "The red box is a toolbox and it", final=False)
    held = spoken(actions)
    actions = plan.source_lost()
    assert " ".join(held + spoken(actions)) == "The red box is a toolbox and it"
    assert actions[-1] == TurnDone(4)
    assert plan.current_turn is None
    assert plan.source_lost() == []  # nothing open any more


def test_a_restarted_source_reuses_turn_ids_that_were_closed():
    plan = planner()
    stream(plan, 1, "Hello there.")
    stream(plan, 2, "Hi again.")
    assert stream(plan, 1, "New answer.") == []  # the old source's turn 1: stale
    plan.source_restarted()
    assert spoken(stream(plan, 1, "New answer.")) == ["New answer."]


# ----------------------------------------------------------------- the turn gate


def test_the_turn_in_progress_passes_from_the_history_and_ended_turns_do_not():
    """A speech node (re)starting mid-answer: the kept chunks of the ended turn 4 and of
    turn 5, which the dialogue node is still speaking, arrive with its latched state."""
    gate = TurnGate(wait_s=0.5)
    gate.dialogue(State.SPEAKING, 5)
    history = [(4, "4:0"), (4, "4:1"), (5, "5:0"), (5, "5:1")]
    passed = [c for turn, c in history for c in gate.offer(turn, c, 0.0)]
    assert passed == ["5:0", "5:1"]
    assert (gate.counts.ended_chunks, gate.counts.ended_turns) == (2, 1)
    assert gate.offer(5, "5:2", 0.1) == ["5:2"]  # later chunks at once
    gate.dialogue(State.LISTENING, 5)
    assert gate.offer(5, "5:3", 0.2) == ["5:3"]  # a turn let through stays let through


@pytest.mark.parametrize("state", [State.LISTENING, State.USER_SPEAKING, State.INTERRUPTED])
def test_the_answer_of_a_turn_that_is_over_is_never_spoken(state: State):
    gate = TurnGate(wait_s=0.5)
    gate.dialogue(state, 3)
    assert gate.offer(3, "3:0", 0.0) == [] and gate.offer(2, "2:0", 0.0) == []
    assert gate.poll(10.0) == [] and gate.waiting == 0
    assert gate.counts.ended_turns == 2


def test_chunks_that_come_before_their_state_wait_for_it():
    gate = TurnGate(wait_s=0.5)
    assert gate.offer(1, "1:0", 0.0) == []  # no state yet
    assert gate.waiting == 1
    gate.dialogue(State.LISTENING, 1)  # turn 1 is over: dropped, never spoken
    assert gate.poll(0.01) == [] and gate.counts.ended_chunks == 1
    assert gate.offer(2, "2:0", 0.02) == []  # newer than the state: waits
    assert gate.offer(2, "2:1", 0.03) == []
    gate.dialogue(State.THINKING, 2)
    assert gate.poll(0.04) == ["2:0", "2:1"]
    assert gate.counts.unconfirmed_turns == 0


def test_without_a_dialogue_node_a_turn_goes_after_the_wait_and_then_flows():
    gate = TurnGate(wait_s=0.5)
    assert gate.offer(7, "7:0", 0.0) == []
    assert gate.offer(7, "7:1", 0.2) == []
    assert gate.poll(0.49) == []
    assert gate.poll(0.5) == ["7:0", "7:1"]
    assert gate.offer(7, "7:2", 0.6) == ["7:2"]
    assert gate.counts.unconfirmed_turns == 1


def test_a_restarted_dialogue_node_counts_turns_from_one_again():
    gate = TurnGate(wait_s=0.5)
    gate.dialogue(State.SPEAKING, 9)
    assert gate.offer(9, "9:0", 0.0) == ["9:0"]
    gate.dialogue(State.LISTENING, 0)  # the new dialogue node's first state
    gate.dialogue(State.THINKING, 1)
    assert gate.offer(1, "1:0", 1.0) == ["1:0"]


def test_an_unknown_state_value_changes_nothing():
    gate = TurnGate(wait_s=0.5)
    gate.dialogue(State.SPEAKING, 2)
    assert gate.dialogue(42, 1) is False
    assert gate.offer(2, "2:0", 0.0) == ["2:0"]
    with pytest.raises(ValueError):
        TurnGate(wait_s=-1)


def test_a_respawned_dialogue_node_numbers_its_turns_from_one_again():
    gate = TurnGate(wait_s=0.5)
    gate.dialogue(State.SPEAKING, 7)
    assert gate.offer(7, "7:0", 0.0) == ["7:0"]
    gate.source_lost()
    gate.source_restarted()
    assert gate.offer(1, "1:0", 1.0) == []  # the old node's state is gone: waits for the new
    gate.dialogue(State.THINKING, 1)  # the new node's latched state
    assert gate.poll(1.1) == ["1:0"]


@pytest.mark.parametrize("lost_before", [False, True])
def test_the_new_nodes_state_is_kept_when_it_comes_before_the_sign_of_life(lost_before):
    """A speech node joining late (or a respawned dialogue node) may get the latched state
    before the liveliness event that says the dialogue node is there: the state stays, so the
    kept answer of a turn it ended is dropped, not let through after the wait and spoken."""
    gate = TurnGate(wait_s=0.5)
    if lost_before:
        gate.dialogue(State.SPEAKING, 7)
        gate.source_lost()
    gate.dialogue(State.LISTENING, 1)  # the (new) node's latched state: turn 1 is over
    gate.source_restarted()  # then its sign of life
    assert gate.offer(1, "1:0", 0.0) == [] and gate.poll(10.0) == []
    assert (gate.counts.ended_turns, gate.counts.unconfirmed_turns) == (1, 0)
