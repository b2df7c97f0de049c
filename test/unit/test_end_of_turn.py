"""Semantic end of turn: the wait policy, and the dialogue machine holding a final for it."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from omniflow.core.dialogue import (
    AnswerAhead,
    AwaitTurnEnd,
    DialogueManager,
    DialogueStats,
    ScoreTurn,
    StartTurn,
    State,
    StateChanged,
    UserSaid,
    Warm,
)
from omniflow.core.end_of_turn import (
    END_OF_TURN_PARAMS,
    EndOfTurnPolicy,
    trails_off,
    without_closing_stop,
)
from omniflow.core.params import defaults

POLICY = EndOfTurnPolicy.default()
COMPLETE, UNFINISHED = 0.5, 0.0005


def of(actions, kind):
    return [a for a in actions if isinstance(a, kind)]


def manager(**changes) -> DialogueManager:
    return DialogueManager(end_of_turn=replace(POLICY, **changes))


def heard(text: str, now: float, sure: float = math.nan, **changes) -> DialogueManager:
    """A manager that heard the user say ``text`` (speech 0.0-1.0 s), its final at ``now``,
    its last word recognised with confidence ``sure`` (NaN: none given)."""
    dm = manager(**changes)
    dm.voice_start(1, 0.09, 0.0)
    dm.transcript(1, text, True, now, speech_end=1.0, last_word_confidence=sure)
    return dm


@pytest.mark.parametrize(
    ("probability", "wait_s"),
    [
        (0.5, 0.2),
        (0.05, 0.2),  # the threshold itself counts as complete
        (0.049, 1.0),
        (0.0, 1.0),
        (None, 0.4),
        (math.nan, 0.4),
    ],
)
def test_the_wait_follows_the_end_of_turn_probability(probability, wait_s):
    assert POLICY.wait_s(probability) == pytest.approx(wait_s)


@pytest.mark.parametrize(
    ("text", "scored"),
    [
        ("I would like the.", "I would like the"),
        ("I would like the...", "I would like the"),
        ("I would like the …", "I would like the"),
        ("What is this?", "What is this?"),
        ("Stop!", "Stop!"),
        ("", ""),
    ],
)
def test_the_recognisers_closing_full_stop_is_not_scored(text, scored):
    assert without_closing_stop(text) == scored


def test_a_final_is_scored_without_its_closing_full_stop():
    dm = manager()
    dm.voice_start(1, 0.09, 0.0)
    assert dm.transcript(1, "I would like the.", True, 1.2) == [ScoreTurn(1, "I would like the")]


def test_the_policy_is_read_from_its_parameters():
    values = {
        **defaults(END_OF_TURN_PARAMS),
        "end_of_turn.long_wait_ms": 800,
        "end_of_turn.unsure_word": 0.2,
    }
    assert EndOfTurnPolicy.from_params(values) == replace(POLICY, long_wait_s=0.8, unsure_word=0.2)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("threshold", 1.5, "threshold"),
        ("threshold", -0.1, "threshold"),
        ("long_wait_s", -1, "wait"),
        ("unsure_word", 1.2, "unsure_word"),
    ],
)
def test_an_impossible_policy_is_refused(field, value, message):
    with pytest.raises(ValueError, match=message):
        replace(POLICY, **{field: value})


def test_a_complete_question_starts_its_turn_once_scored():
    dm = manager()
    dm.voice_start(1, 0.09, 0.0)
    actions = dm.transcript(1, "What is this?", True, 1.25, speech_end=1.0)
    assert actions == [ScoreTurn(1, "What is this?")]
    assert dm.state == State.USER_SPEAKING
    actions = dm.turn_score(1, COMPLETE, 1.27)  # 270 ms after the speech: past the short wait
    assert of(actions, UserSaid) == [UserSaid(1, "What is this?")]
    assert of(actions, StartTurn) == [StartTurn(1, "What is this?", "speech", 1)]


def test_a_complete_question_scored_early_waits_only_the_short_wait():
    dm = heard("What is this?", 1.1)
    assert dm.turn_score(1, COMPLETE, 1.12) == [AwaitTurnEnd(1, COMPLETE, 0.2)]  # nothing ahead
    assert dm.tick(1.15) == []
    assert of(dm.tick(1.2), StartTurn)


def test_a_complete_question_scored_early_is_answered_ahead_when_asked():
    dm = heard("What is this?", 1.1, answer_ahead=True)
    assert dm.turn_score(1, COMPLETE, 1.12) == [
        AwaitTurnEnd(1, COMPLETE, 0.2),
        AnswerAhead(1, "What is this?"),
    ]
    assert dm.tick(1.15) == []
    assert of(dm.tick(1.2), StartTurn) == [StartTurn(1, "What is this?", "speech", 1)]


def test_the_answer_ahead_carries_the_words_the_turn_will_answer():
    dm = manager(answer_ahead=True)
    dm.voice_start(1, 0.09, 0.0)
    dm.transcript(1, "I would like the", True, 1.0, speech_end=1.0)
    assert not of(dm.turn_score(1, UNFINISHED, 1.05), AnswerAhead)  # likely to go on
    dm.voice_start(2, 1.5, 1.5)
    dm.transcript(2, "red cup.", True, 2.05, speech_end=2.0)
    ahead = of(dm.turn_score(2, COMPLETE, 2.1), AnswerAhead)
    assert ahead == [AnswerAhead(2, "I would like the red cup.")]
    assert of(dm.tick(2.2), StartTurn)[0].user_text == ahead[0].user_text


def test_the_user_going_on_within_the_wait_drops_the_answer_ahead():
    dm = heard("What is this?", 1.1, answer_ahead=True)
    assert of(dm.turn_score(1, COMPLETE, 1.12), AnswerAhead) == [AnswerAhead(1, "What is this?")]
    assert dm.voice_start(2, 0.09, 1.15) == [AnswerAhead(2, "")]  # not the end after all
    assert dm.voice_start(3, 0.09, 1.5) == []  # nothing left to drop


def test_partials_are_evaluated_ahead_not_answered():
    dm = manager(answer_ahead=True)
    dm.voice_start(1, 0.09, 0.0)
    assert dm.transcript(1, "What is this?", False, 0.5) == [Warm("What is this?")]


@pytest.mark.parametrize(
    ("probability", "text", "enabled"),
    [
        (None, "What is this?", True),  # not scored
        (COMPLETE, "Please vote no...", True),  # trails off: the long wait
        (COMPLETE, "What is this?", False),  # end_of_turn.answer_ahead off
    ],
)
def test_no_answer_ahead_when_the_turn_is_not_clearly_complete(probability, text, enabled):
    dm = manager(answer_ahead=enabled)
    dm.voice_start(1, 0.09, 0.0)
    dm.transcript(1, text, True, 1.05, speech_end=1.0)
    assert of(dm.turn_score(1, probability, 1.06), AwaitTurnEnd)
    assert not of(dm.turn_score(1, probability, 1.06), AnswerAhead)


@pytest.mark.parametrize(
    ("text", "trailing"),
    [
        ("Please vote no...", True),
        ("I would like the …", True),
        ("the red,", True),
        ("Here is the list:", True),
        ("What is this?", False),
        ("Stop!", False),
        ("Bring me the cup.", False),
        ("", False),
    ],
)
def test_a_voice_that_trails_off_is_told_by_the_recognisers_closing_marks(text, trailing):
    assert trails_off(text) is trailing


def test_words_that_trail_off_get_the_long_wait_even_when_the_model_scores_them_complete():
    # "Please put the" heard as "Please vote no...": the words read as a sentence, the
    # ellipsis says the voice stopped in the middle of one.
    dm = heard("Please vote no...", 1.25)
    assert dm.turn_score(1, COMPLETE, 1.3) == [AwaitTurnEnd(1, COMPLETE, 1.0)]
    assert dm.tick(1.6) == []
    assert dm.voice_start(2, 0.09, 1.7) == []  # the user goes on: same turn
    actions = dm.transcript(2, "the shelf.", True, 2.6, speech_end=2.4)
    assert actions == [ScoreTurn(2, "Please vote no the shelf")]


def test_a_guessed_last_word_gets_the_long_wait_even_when_the_model_scores_it_complete():
    # "I would like the" heard as "I would like that." (that: 0.11): a sentence to the
    # model, a word the recogniser made up to close the voice that stopped.
    dm = heard("I would like that.", 1.25, 0.11)
    assert dm.turn_score(1, COMPLETE, 1.3) == [AwaitTurnEnd(1, COMPLETE, 1.0)]
    assert dm.tick(1.6) == []  # in the pause: no answer
    assert dm.voice_start(2, 0.09, 1.7) == []  # the user goes on: same turn
    actions = dm.transcript(2, "red cup please.", True, 2.6, 2.4, last_word_confidence=0.9)
    assert actions == [ScoreTurn(2, "I would like that red cup please")]
    assert of(dm.turn_score(2, COMPLETE, 2.65), StartTurn)  # sure of "please.": at once


@pytest.mark.parametrize(
    ("confidence", "wait_s"),
    [
        (0.11, 1.0),  # a guess
        (0.15, 0.2),  # the bound itself is sure enough
        (0.25, 0.2),  # "stop" alone: 0.25-0.67 (benchmarks/end_of_turn.py --heard)
        (math.nan, 0.2),  # no confidence given (Moonshine): never held
    ],
)
def test_the_wait_follows_how_sure_the_recogniser_is_of_the_last_word(confidence, wait_s):
    dm = heard("What is this?", 1.05, confidence)
    assert dm.turn_score(1, COMPLETE, 1.06) == [AwaitTurnEnd(1, COMPLETE, wait_s)]
    assert dm.tick(1.0 + wait_s - 0.01) == []
    assert of(dm.tick(1.0 + wait_s + 0.01), StartTurn)


def test_a_guessed_word_is_not_answered_ahead():
    dm = heard("Show me that.", 1.05, 0.13, answer_ahead=True)
    actions = dm.turn_score(1, COMPLETE, 1.06)
    assert actions == [AwaitTurnEnd(1, COMPLETE, 1.0)]  # no AnswerAhead


def test_an_unsure_word_bound_of_zero_holds_no_guess():
    dm = heard("I would like that.", 1.05, 0.01, unsure_word=0.0)
    assert dm.turn_score(1, COMPLETE, 1.06) == [AwaitTurnEnd(1, COMPLETE, 0.2)]


def test_an_unfinished_sentence_waits_and_the_user_going_on_makes_one_turn():
    dm = heard("I would like the", 1.25)
    assert dm.turn_score(1, UNFINISHED, 1.3) == [AwaitTurnEnd(1, UNFINISHED, 1.0)]
    assert dm.tick(1.6) == []  # 600 ms into the pause: no answer
    assert dm.voice_start(2, 0.09, 1.7) == []  # the user goes on: same turn, no new state
    assert dm.state == State.USER_SPEAKING
    assert dm.transcript(2, "red", False, 1.9) == [Warm("I would like the red")]
    assert dm.tick(2.1) == []  # the old deadline (2.0) no longer holds
    actions = dm.transcript(2, "red cup please.", True, 2.6, speech_end=2.4)
    assert actions == [ScoreTurn(2, "I would like the red cup please")]
    actions = dm.turn_score(2, COMPLETE, 2.65)
    assert of(actions, StartTurn) == [StartTurn(1, "I would like the red cup please.", "speech", 2)]
    assert of(actions, UserSaid) == [UserSaid(2, "I would like the red cup please.")]


def test_a_final_that_comes_after_the_user_went_on_joins_the_next_utterance():
    dm = manager()
    dm.voice_start(1, 0.09, 0.0)
    dm.voice_end(1, 1.2)
    dm.voice_start(2, 0.09, 1.7)  # the next words start before the first final is decoded
    dm.voice_end(2, 3.1)
    assert dm.transcript(1, "I would like the.", True, 3.15, speech_end=1.0) == []
    assert dm.tick(3.16) == []  # no wait to run out: the pause was over long ago
    actions = dm.transcript(2, "red cup please.", True, 3.2, speech_end=2.9)
    assert actions == [ScoreTurn(2, "I would like the red cup please")]
    assert of(dm.turn_score(2, COMPLETE, 3.25), StartTurn)


def test_a_final_slower_than_the_long_wait_is_a_turn_of_its_own():
    dm = manager()
    dm.voice_start(1, 0.09, 0.0)
    dm.voice_start(2, 0.09, 4.0)  # the user spoke again long after the question
    actions = dm.transcript(1, "What is this?", True, 5.0, speech_end=1.0)
    assert of(actions, StartTurn) == [StartTurn(1, "What is this?", "speech", 1)]


def test_an_unfinished_sentence_is_answered_after_the_long_wait():
    dm = heard("I would like the", 1.25)
    dm.turn_score(1, UNFINISHED, 1.3)
    assert dm.tick(1.95) == []
    actions = dm.tick(2.0)
    assert of(actions, StartTurn) == [StartTurn(1, "I would like the", "speech", 1)]


def test_without_a_score_the_unscored_wait_holds_and_a_lost_score_cannot_wedge_the_turn():
    dm = heard("What is this?", 1.25)
    assert dm.turn_score(1, None, 1.26) == [AwaitTurnEnd(1, None, 0.4)]
    assert of(dm.tick(1.4), StartTurn)
    lost = heard("What is this?", 1.25)
    assert lost.tick(1.9) == []  # no score yet: the longest wait holds
    assert of(lost.tick(2.0), StartTurn)


def test_a_stale_score_is_ignored():
    dm = heard("I would like", 1.25)
    dm.voice_start(2, 0.09, 1.3)  # the user went on before the score came
    assert dm.turn_score(1, COMPLETE, 1.35) == []
    assert dm.turn_score(7, COMPLETE, 1.35) == []


def test_stop_requests_and_empty_finals_are_not_held():
    dm = manager()
    dm.voice_start(1, 0.09, 0.0)
    actions = dm.transcript(1, "Hold on.", True, 1.2, speech_end=1.0)
    assert not of(actions, ScoreTurn) and of(actions, UserSaid)
    dm.voice_start(2, 0.09, 2.0)
    actions = dm.transcript(2, "", True, 2.5)
    assert not of(actions, ScoreTurn) and dm.state == State.LISTENING


def test_end_of_turn_waits_off_start_the_turn_at_the_final():
    dm = manager(enabled=False)
    dm.voice_start(1, 0.09, 0.0)
    assert of(dm.transcript(1, "I would like the", True, 1.2), StartTurn)


def test_a_final_whose_start_was_lost_still_waits_and_keeps_the_words_before_it():
    dm = manager()
    actions = dm.transcript(1, "I would like the", True, 1.2, speech_end=1.0)
    assert [a.state for a in actions if isinstance(a, StateChanged)] == [State.USER_SPEAKING]
    dm.turn_score(1, UNFINISHED, 1.25)
    actions = dm.transcript(2, "red cup.", True, 2.4, speech_end=2.2)  # no voice start
    assert actions == [ScoreTurn(2, "I would like the red cup")]


def test_a_goal_that_preempts_drops_the_held_words():
    dm = heard("I would like the", 1.2)
    actions = dm.prompt("Say hello.", "goal", 1.3, preempt=True)
    assert of(actions, StartTurn)[0].user_text == "Say hello."
    assert dm.tick(5.0) == []  # nothing left to answer


def test_a_speech_end_stamped_after_now_counts_from_now():
    dm = manager()
    dm.voice_start(1, 0.09, 0.0)
    dm.transcript(1, "What is this?", True, 1.0, speech_end=9.0)  # another host's clock
    assert of(dm.turn_score(1, COMPLETE, 1.05), AwaitTurnEnd) == [AwaitTurnEnd(1, COMPLETE, 0.2)]
    assert of(dm.tick(1.2), StartTurn)


def unfinished(speech_end: float, stream: tuple[float, float], final_at: float) -> DialogueManager:
    """A manager that heard "I would like the" (1 s of speech to ``speech_end``, stream
    time), the stream heard to ``stream`` (stream time, node clock), its final at
    ``final_at`` on the node clock."""
    dm = manager()
    dm.voice_start(1, 0.09, stream[1], onset=speech_end - 1.0)
    dm.heard(*stream)
    dm.transcript(1, "I would like the", True, final_at, speech_end=speech_end)
    return dm


def test_the_pause_is_counted_as_far_as_the_fusion_node_has_heard():
    """A fusion node 2.2 s behind (a loaded machine): by the node clock the long wait is over
    before fusion has heard the user go on; by the stream it is not, and it is one turn."""
    dm = unfinished(1.0, (1.2, 3.2), 3.3)
    assert dm.turn_score(1, UNFINISHED, 3.4) == [AwaitTurnEnd(1, UNFINISHED, 1.0)]
    for stream_s in (1.3, 1.4, 1.5, 1.6):  # SILENCE as fusion hears the pause
        assert dm.heard(stream_s, stream_s + 2.2) == []
        assert dm.tick(stream_s + 2.25) == []  # the node clock is past the deadline (2.0)
    assert dm.voice_start(2, 0.09, 3.9, onset=1.7) == []  # the user went on at 1.7 s
    dm.heard(2.6, 4.8)  # END
    actions = dm.transcript(2, "red cup please.", True, 5.0, speech_end=2.4)
    assert actions == [ScoreTurn(2, "I would like the red cup please")]


def test_a_pause_heard_to_its_end_starts_the_turn_however_late_the_stream_runs():
    dm = unfinished(1.0, (1.3, 3.3), 3.3)
    dm.turn_score(1, UNFINISHED, 3.4)
    assert dm.heard(1.96, 4.2) == []
    actions = dm.heard(2.0, 4.25)
    assert of(actions, StartTurn) == [StartTurn(1, "I would like the", "speech", 1)]


def test_a_final_decoded_late_still_waits_for_the_pause_the_stream_has_not_heard():
    """A final that comes 3 s after the speech ended, while fusion has heard only 0.3 s of
    the pause: not "slower than any wait", the wait runs on the stream."""
    dm = unfinished(1.0, (1.3, 3.9), 4.0)
    assert dm.turn_score(1, UNFINISHED, 4.1) == [AwaitTurnEnd(1, UNFINISHED, 1.0)]


def test_a_stream_that_stops_advancing_leaves_the_pause_to_the_node_clock():
    dm = unfinished(1.0, (1.2, 1.2), 1.25)
    dm.turn_score(1, UNFINISHED, 1.3)
    assert dm.tick(2.1) == []  # the stream said 1.2 s less than a second ago
    assert of(dm.tick(2.2), StartTurn)  # no word from it for STREAM_FRESH_S: the clock counts


def test_a_stream_that_goes_back_ends_the_pause_of_the_old_one():
    dm = unfinished(11.0, (11.2, 1.2), 1.25)
    dm.turn_score(1, UNFINISHED, 1.3)
    assert dm.heard(11.5, 1.5) == []
    actions = dm.heard(0.04, 1.6)  # the bag looped
    assert of(actions, StartTurn) == [StartTurn(1, "I would like the", "speech", 1)]


def test_a_final_from_before_a_stream_restart_does_not_join_the_new_streams_words():
    dm = manager()
    dm.voice_start(1, 0.09, 20.0, onset=10.0)
    dm.heard(11.2, 21.2)
    dm.voice_start(2, 0.09, 21.5, onset=0.5)  # the bag looped: new speech at 0.5 s
    actions = dm.transcript(1, "What is this?", True, 21.6, speech_end=11.0)
    assert of(actions, ScoreTurn) == [ScoreTurn(1, "What is this?")]


def test_the_waits_are_counted():
    dm = manager()
    stats = DialogueStats()
    dm.voice_start(1, 0.09, 0.0)
    dm.transcript(1, "I would like the", True, 1.2, speech_end=1.0)
    for action in dm.turn_score(1, UNFINISHED, 1.25):
        stats.record(action)
    assert stats.end_of_turn_waits == 1
