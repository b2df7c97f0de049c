"""The speech planner: which phrases to speak, and when to stop (tier 1, no ROS)."""

from __future__ import annotations

import pytest

from omniflow.core.phrases import PhraseChunker
from omniflow.core.speech_turns import Speak, SpeechPlanner, Stop, TurnDone


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
