"""Asking the user to say it again when the recogniser is unsure (ClarifyPolicy, and the
dialogue manager applying it to spoken turns)."""

from __future__ import annotations

import doctest
import math

import pytest

from omniflow.core import clarify
from omniflow.core.clarify import CLARIFY_PARAMS, ClarifyPolicy
from omniflow.core.dialogue import (
    DIALOGUE_PARAMS,
    DialogueManager,
    DialogueStats,
    StartTurn,
    State,
    StateChanged,
    UserSaid,
)
from omniflow.core.end_of_turn import EndOfTurnPolicy
from omniflow.core.params import defaults

REPLY = "Sorry, I didn't catch that. Could you say it again?"


def of(actions, kind):
    return [a for a in actions if isinstance(a, kind)]


def test_the_examples_in_the_module_hold():
    assert doctest.testmod(clarify).failed == 0


@pytest.mark.parametrize(
    ("text", "confidence", "asked"),
    [
        ("What's in different box?", 0.44, True),
        ("What's in different box?", 0.45, False),  # at the threshold: answered
        ("Turn left.", 0.2, False),  # a short command is answered whatever its confidence
        ("Bring the cup.", 0.2, True),  # three words
        ("What is this?", math.nan, False),  # a recogniser without a confidence
        ("", 0.0, False),
        ("... , !", 0.0, False),  # no words at all
    ],
)
def test_a_final_is_asked_again_when_unsure_and_long_enough(text, confidence, asked):
    assert ClarifyPolicy.default().asks(text, confidence) is asked


def test_off_never_asks():
    assert not ClarifyPolicy.off().asks("What's in different box?", 0.0)
    zero = ClarifyPolicy.from_params({**defaults(CLARIFY_PARAMS), "clarify.below": 0.0})
    assert not zero.asks("What's in different box?", 0.0)


@pytest.mark.parametrize(("below", "min_words"), [(-0.1, 3), (1.5, 3), (0.45, 0)])
def test_bad_values_are_refused_by_name(below, min_words):
    with pytest.raises(ValueError, match=r"clarify\.below .* clarify\.min_words"):
        ClarifyPolicy(below, min_words, REPLY)


def manager(**kwargs) -> DialogueManager:
    return DialogueManager(clarify=ClarifyPolicy.default(), **kwargs)


def heard(dm: DialogueManager, text: str, confidence: float, utterance: int = 1, now=1.0):
    dm.voice_start(utterance, 0.09, now - 0.5)
    return dm.transcript(utterance, text, True, now, confidence=confidence)


def test_an_unsure_final_gets_the_request_to_say_it_again_not_an_answer():
    dm = manager()
    stats = DialogueStats()
    actions = heard(dm, "What's in different box?", 0.31)
    for action in actions:
        stats.record(action)
    start = of(actions, StartTurn)[0]
    assert (start.user_text, start.reply) == ("What's in different box?", REPLY)
    assert of(actions, UserSaid)[0].text == "What's in different box?"
    assert "unsure" in of(actions, StateChanged)[-1].reason
    assert dm.state == State.THINKING
    assert (stats.turns, stats.asked_again) == (1, 1)


def test_a_sure_final_and_a_short_unsure_one_are_answered():
    dm = manager()
    assert of(heard(dm, "What is that animal?", 0.57), StartTurn)[0].reply == ""
    dm.cancel("next", 2.0)
    assert of(heard(dm, "Turn left.", 0.2, utterance=2, now=3.0), StartTurn)[0].reply == ""


def test_a_stop_request_is_never_asked_about():
    dm = manager(stop_reply="Okay.")
    start = of(heard(dm, "Okay, hold on a second.", 0.1), StartTurn)[0]
    assert start.reply == "Okay."


def test_an_empty_reply_listens_again_without_a_turn():
    dm = DialogueManager(clarify=ClarifyPolicy(0.45, 3, ""))
    actions = heard(dm, "What's in different box?", 0.31)
    assert not of(actions, StartTurn)
    assert of(actions, UserSaid)
    assert dm.state == State.LISTENING and dm.active_turn == 0


def test_an_unsure_final_after_the_end_of_turn_wait_is_asked_again():
    dm = manager(end_of_turn=EndOfTurnPolicy.default())
    actions = heard(dm, "What's in different box?", 0.31)
    assert not of(actions, StartTurn)  # waiting for the score
    actions = dm.turn_score(1, 0.9, 1.0) + dm.tick(2.5)
    assert of(actions, StartTurn)[0].reply == REPLY


def test_the_words_asked_about_are_not_carried_into_the_next_turn():
    dm = manager()
    heard(dm, "What's in different box?", 0.31)
    dm.voice_start(2, 0.09, 1.2)  # the user repeats while the request is still pending
    start = of(dm.transcript(2, "What is in the box?", True, 2.0, confidence=0.8), StartTurn)[0]
    assert (start.user_text, start.reply) == ("What is in the box?", "")


def test_a_question_held_while_speaking_keeps_its_confidence():
    dm = manager(barge_in=False)
    heard(dm, "What is this?", 0.9)
    turn = dm.turn_id
    dm.token(turn, "A cup.", 1.2)
    dm.speech(True, turn, 1.3)
    assert dm.transcript(2, "What's in different box?", True, 1.5, confidence=0.31) == []
    dm.generated(turn, 1.6)
    start = of(dm.speech(False, turn, 2.0), StartTurn)[0]
    assert start.reply == REPLY


def test_the_node_parameters_turn_it_on_and_change_it_live():
    params = {**defaults(DIALOGUE_PARAMS), "end_of_turn.enabled": False}
    dm = DialogueManager.from_params(params)
    assert dm.clarify == ClarifyPolicy.default()
    dm.set_params({**params, "clarify.below": 0.2, "clarify.reply": " Pardon? "})
    assert dm.clarify.reply == "Pardon?"
    assert of(heard(dm, "What's in different box?", 0.31), StartTurn)[0].reply == ""


def test_a_stop_before_unsure_words_stops_and_asks_about_the_rest():
    dm = manager()
    actions = heard(dm, "Stop. What's in different box?", 0.31)
    assert of(actions, UserSaid)[0].text == "Stop. What's in different box?"
    start = of(actions, StartTurn)[0]
    assert (start.user_text, start.reply) == ("What's in different box?", REPLY)
