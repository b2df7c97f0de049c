"""The dialogue state machine: table tests of every transition and its actions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from omniflow.core.clarify import ClarifyPolicy
from omniflow.core.dialogue import (
    DIALOGUE_PARAMS,
    MAX_CARRY_WORDS,
    Busy,
    Cancel,
    CancelReason,
    DialogueManager,
    DialogueStats,
    StartTurn,
    State,
    StateChanged,
    StopPhrases,
    TurnEnded,
    UserSaid,
    Warm,
    complete_sentences,
)
from omniflow.core.end_of_turn import EndOfTurnPolicy


def states(actions) -> list[State]:
    return [a.state for a in actions if isinstance(a, StateChanged)]


def of(actions, kind):
    return [a for a in actions if isinstance(a, kind)]


def spoken_turn(dm: DialogueManager, text: str = "what is this", utterance: int = 1) -> int:
    """Drive one spoken question up to THINKING; returns its turn id."""
    dm.voice_start(utterance, 0.09, 0.0)
    actions = dm.transcript(utterance, text, True, 1.0)
    return of(actions, StartTurn)[0].turn_id


def speaking(dm: DialogueManager) -> int:
    turn = spoken_turn(dm)
    dm.token(turn, "It is", 1.1)
    return turn


def test_a_spoken_question_runs_the_whole_turn():
    dm = DialogueManager()
    assert states(dm.voice_start(1, 0.09, 0.0)) == [State.USER_SPEAKING]
    assert dm.transcript(1, "what", False, 0.3) == [Warm("what")]
    assert dm.transcript(1, "what", False, 0.4) == []  # unchanged partial: nothing to warm
    assert dm.transcript(1, "what is", False, 0.5) == [Warm("what is")]
    assert dm.voice_end(1, 0.9) == []
    actions = dm.transcript(1, "what  is this", True, 1.0)
    assert actions[0] == UserSaid(1, "what is this")
    assert actions[1] == StartTurn(1, "what is this", "speech", 1)
    assert states(actions) == [State.THINKING]
    assert states(dm.token(1, "It is", 1.1)) == [State.SPEAKING]
    assert dm.token(1, " a cup.", 1.2) == []
    assert dm.generated(1, 1.3) == []
    assert dm.speech(True, 1, 1.2) == []
    actions = dm.speech(False, 1, 2.5)
    assert of(actions, TurnEnded) == [
        TurnEnded(1, "done", "It is a cup.", "the robot finished speaking")
    ]
    assert states(actions) == [State.LISTENING]
    assert not of(actions, Cancel)  # nothing to stop: it finished


def test_an_empty_final_transcript_goes_back_to_listening():
    dm = DialogueManager()
    dm.voice_start(1, 0.09, 0.0)
    actions = dm.transcript(1, "  ", True, 1.0)
    assert states(actions) == [State.LISTENING]
    assert not of(actions, StartTurn)


def test_barge_in_while_speaking_cancels_and_interrupts():
    dm = DialogueManager(barge_in_min_speech_s=0.1)
    turn = speaking(dm)
    assert dm.voice_start(2, 0.09, 2.0) == []  # shorter than the threshold: not yet
    actions = dm.voice_ongoing(2, 0.13, 2.04)
    assert of(actions, Cancel) == [Cancel(turn, actions[0].reason, True, CancelReason.BARGE_IN)]
    assert "barge-in" in actions[0].reason
    assert of(actions, TurnEnded)[0].outcome == "interrupted"
    assert of(actions, TurnEnded)[0].response == "It is"
    assert states(actions) == [State.INTERRUPTED]
    assert dm.active_turn == 0
    # the interrupting utterance becomes the next turn
    assert dm.transcript(2, "and", False, 2.2) == [Warm("and")]
    actions = dm.transcript(2, "and that one", True, 2.6)
    assert of(actions, StartTurn) == [StartTurn(2, "and that one", "speech", 2)]
    assert states(actions) == [State.THINKING]


def test_barge_in_on_the_start_event_when_it_is_long_enough():
    dm = DialogueManager(barge_in_min_speech_s=0.09)
    speaking(dm)
    assert states(dm.voice_start(2, 0.09, 2.0)) == [State.INTERRUPTED]


def test_barge_in_on_a_start_whose_float32_length_is_the_threshold():
    # VoiceActivity.speech_s is a float32: the default 60 ms arrives as 0.0599999987 s
    dm = DialogueManager()
    speaking(dm)
    speech_s = float(np.float32(0.06))
    assert speech_s < dm.barge_in_min_speech_s
    assert states(dm.voice_start(2, speech_s, 2.0)) == [State.INTERRUPTED]


def test_barge_in_off_answers_the_utterance_after_the_turn():
    dm = DialogueManager(barge_in=False)
    turn = speaking(dm)
    assert dm.voice_start(2, 0.5, 2.0) == []
    assert dm.transcript(2, "and that", True, 2.5) == []
    dm.generated(turn, 2.6)
    dm.speech(True, turn, 2.7)
    actions = dm.speech(False, turn, 3.0)
    assert states(actions) == [State.LISTENING, State.THINKING]
    assert of(actions, StartTurn) == [StartTurn(2, "and that", "speech", 2)]


def test_speech_while_thinking_cancels_and_keeps_the_words():
    dm = DialogueManager()
    turn = spoken_turn(dm, "what is")
    actions = dm.voice_start(2, 0.09, 1.2)
    assert of(actions, Cancel) == [
        Cancel(turn, "the user went on speaking", False, CancelReason.USER_WENT_ON)
    ]
    assert of(actions, TurnEnded)[0].outcome == "cancelled"
    assert states(actions) == [State.USER_SPEAKING]
    assert dm.transcript(2, "this", False, 1.4) == [Warm("what is this")]
    actions = dm.transcript(2, "this thing", True, 1.8)
    assert of(actions, StartTurn)[0].user_text == "what is this thing"


def test_speech_that_keeps_coming_carries_only_the_newest_words():
    """Every utterance cancels the turn still thinking about the ones before: the words
    carried into the next turn stop growing at MAX_CARRY_WORDS, the newest kept."""
    dm = DialogueManager()
    spoken_turn(dm, "one two three four five six seven eight", utterance=1)
    for utterance in range(2, 12):
        now = float(utterance)
        assert of(dm.voice_start(utterance, 0.09, now), Cancel)
        words = f"u{utterance} " + " ".join(["word"] * 7)
        (start,) = of(dm.transcript(utterance, words, True, now + 0.5), StartTurn)
    carried = start.user_text.split()
    assert len(carried) == MAX_CARRY_WORDS + 8
    assert carried[-8:] == ["u11", *["word"] * 7] and "u7" in carried and "u6" not in carried


def test_a_goal_prompt_is_refused_while_busy_unless_preempting():
    dm = DialogueManager()
    actions = dm.prompt("say hello", "goal", 0.0)
    assert of(actions, StartTurn) == [StartTurn(1, "say hello", "goal", 0)]
    with pytest.raises(Busy):
        dm.prompt("another", "goal", 0.1)
    actions = dm.prompt("another", "goal", 0.2, preempt=True)
    assert of(actions, Cancel) == [
        Cancel(1, "preempted by a goal turn", True, CancelReason.PREEMPTED)
    ]
    assert of(actions, TurnEnded)[0].outcome == "cancelled"
    assert of(actions, StartTurn) == [StartTurn(2, "another", "goal", 0)]
    assert states(actions) == [State.THINKING]


def test_an_empty_prompt_is_refused():
    with pytest.raises(ValueError, match="empty"):
        DialogueManager().prompt("   ", "goal", 0.0)


def test_a_prompt_preempting_user_speech_starts_at_once():
    dm = DialogueManager()
    dm.voice_start(1, 0.09, 0.0)
    actions = dm.prompt("hello", "goal", 0.1, preempt=True)
    assert not of(actions, Cancel)
    assert states(actions) == [State.THINKING]


def test_cancel_silences_and_listens():
    dm = DialogueManager()
    turn = speaking(dm)
    actions = dm.cancel("goal cancelled", 2.0)
    assert of(actions, Cancel) == [Cancel(turn, "goal cancelled", True, CancelReason.REQUESTED)]
    assert states(actions) == [State.LISTENING]
    assert dm.cancel("again", 2.1) == []


def test_a_failed_generation_ends_the_turn_and_listens():
    dm = DialogueManager()
    turn = spoken_turn(dm)
    actions = dm.generated(turn, 1.5, error="the model failed")
    assert of(actions, TurnEnded) == [TurnEnded(turn, "failed", "", "the model failed")]
    assert states(actions) == [State.LISTENING]
    assert not of(actions, Cancel)  # it already stopped


def test_an_empty_answer_ends_the_turn():
    dm = DialogueManager()
    turn = spoken_turn(dm)
    dm.token(turn, "  ", 1.1)
    assert dm.state == State.THINKING
    actions = dm.generated(turn, 1.2)
    assert of(actions, TurnEnded)[0].outcome == "empty"
    assert states(actions) == [State.LISTENING]


def test_an_answer_nobody_plays_times_out():
    dm = DialogueManager(speech_start_timeout_s=2.0)
    turn = speaking(dm)
    dm.generated(turn, 1.5)
    assert dm.tick(3.0) == []
    actions = dm.tick(3.5)
    (ended,) = of(actions, TurnEnded)
    assert ended.outcome == "unplayed"
    assert "not played" in ended.reason and "speech_start_timeout_s" in ended.reason
    assert states(actions) == [State.LISTENING]
    stats = DialogueStats()
    for action in actions:
        stats.record(action)
    assert stats.unplayed == 1 and stats.turns_done == 0


def test_a_speech_node_lost_while_playing_ends_the_turn_with_the_reason():
    dm = DialogueManager()
    turn = speaking(dm)
    assert dm.speech_lost(1.2) == []  # not playing yet: the speech_start_timeout_s rule
    dm.speech(True, turn, 1.3)
    actions = dm.speech_lost(2.0)
    assert of(actions, Cancel) == [
        Cancel(
            turn,
            "the speech node went away while it played the answer",
            False,
            CancelReason.SPEECH_LOST,
        )
    ]
    ended = of(actions, TurnEnded)[0]
    assert (ended.turn_id, ended.outcome) == (turn, "failed")
    assert states(actions) == [State.LISTENING]
    assert dm.speech_lost(2.5) == []


def test_an_utterance_nothing_more_is_heard_of_is_given_up():
    dm = DialogueManager(user_turn_timeout_s=6.0)
    dm.voice_start(1, 0.09, 0.0)
    dm.voice_ongoing(1, 0.5, 1.0)
    dm.voice_end(1, 2.0)
    assert dm.tick(7.9) == []  # the final is still due
    actions = dm.tick(8.0)
    assert states(actions) == [State.LISTENING]
    assert "no final transcript" in actions[0].reason
    # A final that comes after all is still answered.
    assert of(dm.transcript(1, "what is this", True, 9.0), StartTurn)


def test_an_interruption_nothing_more_is_heard_of_is_given_up():
    dm = DialogueManager(user_turn_timeout_s=3.0)
    speaking(dm)
    dm.voice_ongoing(2, 0.5, 2.0)
    assert dm.state == State.INTERRUPTED
    assert states(dm.tick(5.0)) == [State.LISTENING]


def test_messages_for_old_turns_are_ignored():
    dm = DialogueManager()
    turn = speaking(dm)
    dm.cancel("x", 2.0)
    assert dm.token(turn, "late", 2.1) == []
    assert dm.generated(turn, 2.2) == []
    assert dm.speech(False, turn, 2.3) == []
    assert dm.state == State.LISTENING


def test_a_final_transcript_without_a_start_event_still_starts_a_turn():
    dm = DialogueManager()
    actions = dm.transcript(5, "hello", True, 1.0)
    assert of(actions, StartTurn) == [StartTurn(1, "hello", "speech", 5)]


def test_parameters_are_checked():
    with pytest.raises(ValueError):
        DialogueManager(barge_in_min_speech_s=-1)
    with pytest.raises(ValueError):
        DialogueManager(speech_start_timeout_s=0)


EVENTS = st.sampled_from(
    [
        "start",
        "ongoing",
        "partial",
        "final",
        "unsure",
        "empty",
        "stop",
        "token",
        "generated",
        "failed",
        "speech_on",
        "speech_off",
        "speech_lost",
        "tick",
        "prompt",
        "preempt",
        "cancel",
        "score_high",
        "score_low",
        "score_none",
        "heard",
        "heard_back",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(EVENTS, max_size=60), st.booleans())
def test_any_sequence_of_inputs_keeps_the_machine_consistent(events, end_of_turn):
    """Whatever order messages come in, the machine never raises (other than Busy), a turn
    in progress is always the newest one, and LISTENING never has a turn in progress; with
    end-of-turn waits too, and finals the recogniser is unsure of."""
    dm = DialogueManager(
        end_of_turn=EndOfTurnPolicy.default() if end_of_turn else None,
        clarify=ClarifyPolicy.default(),
    )
    now = 0.0
    for i, event in enumerate(events):
        now += 0.5
        turn = dm.active_turn or dm.turn_id
        if event == "start":
            dm.voice_start(i, 0.09, now)
        elif event == "ongoing":
            dm.voice_ongoing(i, 0.5, now)
        elif event == "partial":
            dm.transcript(i, "words", False, now)
        elif event == "unsure":
            dm.transcript(i, "three heard words", True, now, confidence=0.1)
        elif event in ("final", "empty", "stop"):
            dm.transcript(i, {"final": "words", "empty": "", "stop": "stop"}[event], True, now)
        elif event == "token":
            dm.token(turn, "x", now)
        elif event in ("generated", "failed"):
            dm.generated(turn, now, error="boom" if event == "failed" else "")
        elif event in ("speech_on", "speech_off"):
            dm.speech(event == "speech_on", turn, now)
        elif event == "speech_lost":
            dm.speech_lost(now)
        elif event == "tick":
            dm.tick(now + 7)
        elif event in ("heard", "heard_back"):  # the stream runs 0.3 s behind, or loops
            dm.heard(now - 0.3 if event == "heard" else 0.0, now)
        elif event.startswith("score_"):
            probability = {"score_high": 0.5, "score_low": 0.0, "score_none": None}[event]
            dm.turn_score(i - 1, probability, now)
        elif event in ("prompt", "preempt"):
            try:
                dm.prompt("hi", "goal", now, preempt=event == "preempt")
            except Busy:
                assert dm.busy
        else:
            dm.cancel("cancel", now)
        if dm.active_turn:
            assert dm.active_turn == dm.turn_id
            assert dm.state in (State.THINKING, State.SPEAKING)
        if dm.state == State.LISTENING:
            assert dm.active_turn == 0


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("This is", ""),
        ("It is a cup. It holds", "It is a cup."),
        ("Yes! Sure? Of course.", "Yes! Sure? Of course."),
        ("Version 2.5 is out", ""),
        ("", ""),
    ],
)
def test_a_cut_off_answer_keeps_its_finished_sentences(text, kept):
    assert complete_sentences(text) == kept


def test_a_cancel_carries_the_cause_it_is_given():
    dm = DialogueManager()
    turn = speaking(dm)
    actions = dm.cancel("timed out after 5 s", 2.0, cause=CancelReason.TIMED_OUT)
    assert of(actions, Cancel) == [
        Cancel(turn, "timed out after 5 s", True, CancelReason.TIMED_OUT)
    ]


def test_stats_count_barge_ins_by_their_cause_not_their_text():
    dm = DialogueManager(barge_in_min_speech_s=0.1)
    stats = DialogueStats()
    record = lambda actions: [stats.record(a) for a in actions]  # noqa: E731
    record(dm.voice_start(1, 0.09, 0.0))
    record(dm.transcript(1, "what is this", True, 1.0))
    record(dm.token(1, "It is a cup.", 1.1))
    record(dm.voice_ongoing(2, 0.2, 1.5))  # a barge-in
    record(dm.transcript(2, "and that", True, 2.0))
    record(dm.cancel("the robot's barge-in test", 2.1))  # the text says barge-in
    record(dm.prompt("(greet)", "proactive", 3.0))
    record(dm.generated(dm.turn_id, 3.5, error="the model failed: boom"))
    assert (stats.turns, stats.barge_ins, stats.cancelled, stats.failed, stats.proactive) == (
        3,
        1,
        2,
        1,
        1,
    )
    assert stats.last_error == "the model failed: boom"


def test_the_manager_takes_its_parameters_by_name():
    params = {spec.name: spec.default for spec in DIALOGUE_PARAMS}
    dm = DialogueManager.from_params(params)
    assert (dm.barge_in, dm.barge_in_min_speech_s, dm.speech_start_timeout_s) == (True, 0.06, 3.0)
    dm.set_params({**params, "barge_in.enabled": False, "barge_in.min_speech_ms": 200})
    assert (dm.barge_in, dm.barge_in_min_speech_s) == (False, 0.2)
    dm.set_params({**params, "stop.words": "halt", "stop.reply": " Okay. "})
    assert dm.stop.split("stop") == (False, "stop") and dm.stop.split("halt")[0]
    assert dm.stop_reply == "Okay."


@pytest.mark.parametrize(
    ("text", "stop", "rest"),
    [
        ("stop", True, ""),
        ("Stop.", True, ""),
        ("Wait, stop!", True, ""),
        ("Okay, hold on a second.", True, ""),
        ("That’s enough, thank you.", True, ""),
        ("Be quiet please", True, ""),
        ("Shut up.", True, ""),
        ("Stop. What is that animal?", True, "What is that animal?"),
        ("Wait, what is this?", True, "what is this?"),
        ("Stop the music.", False, "Stop the music."),
        ("What is that?", False, "What is that?"),
        ("Okay.", False, "Okay."),  # fillers alone ask for nothing
        ("Um, what is it?", False, "Um, what is it?"),
        ("", False, ""),
    ],
)
def test_stop_requests_are_stop_phrases_and_fillers_in_leading_clauses(text, stop, rest):
    dm = DialogueManager()
    assert dm.stop.split(text) == (stop, rest)


def test_stop_phrases_come_from_the_parameters():
    phrases = StopPhrases.parse("halt, hold it", "bitte")
    assert phrases.split("Bitte, halt!") == (True, "")
    assert phrases.split("stop") == (False, "stop")
    assert phrases.split("hold it") == (True, "")
    assert phrases.split("hold") == (False, "hold")


def test_a_stop_request_after_a_barge_in_gets_no_answer():
    dm = DialogueManager(barge_in_min_speech_s=0.1)
    turn = speaking(dm)
    actions = dm.voice_ongoing(2, 0.2, 2.0)
    assert of(actions, Cancel)[0].turn_id == turn
    actions = dm.transcript(2, "Wait, stop.", True, 2.5)
    assert not of(actions, StartTurn)
    assert of(actions, UserSaid) == [UserSaid(2, "Wait, stop.")]
    assert states(actions) == [State.LISTENING]
    assert "stop" in actions[-1].reason
    assert dm.active_turn == 0 and dm.turn_id == turn


def test_words_begun_before_a_stop_requests_final_are_the_users_turn():
    """The bundled session: "Stop." over the robot, then "What is that animal?", begun before
    the stop's final came. The user is speaking: not LISTENING, and the new words are
    evaluated ahead."""
    dm = DialogueManager(barge_in_min_speech_s=0.1)
    speaking(dm)
    dm.voice_start(2, 0.09, 7.7)
    dm.voice_ongoing(2, 0.2, 7.9)
    dm.voice_end(2, 8.1)
    dm.voice_start(3, 0.09, 8.33)
    actions = dm.transcript(2, "Stop.", True, 9.08)
    assert not of(actions, StartTurn)
    assert states(actions) == [State.USER_SPEAKING]
    assert "stop" in actions[-1].reason and "the user is speaking" in actions[-1].reason
    assert dm.utterance == 3
    assert dm.transcript(3, "What is that?", False, 9.4) == [Warm("What is that?")]
    dm.voice_end(3, 9.6)
    actions = dm.transcript(3, "What is that animal?", True, 10.3)
    assert of(actions, StartTurn)[0].user_text == "What is that animal?"


def test_a_stop_requests_final_after_the_voice_ended_listens():
    dm = DialogueManager(barge_in_min_speech_s=0.1)
    speaking(dm)
    dm.voice_start(2, 0.09, 7.7)
    dm.voice_ongoing(2, 0.2, 7.9)
    dm.voice_start(3, 0.09, 8.33)
    dm.voice_end(3, 8.6)  # heard and ended before the stop's final: its own final follows
    assert states(dm.transcript(2, "Stop.", True, 9.08)) == [State.LISTENING]


def test_the_robot_ending_while_the_user_speaks_hands_over_to_the_user():
    dm = DialogueManager(barge_in_min_speech_s=1.0)
    turn = speaking(dm)
    dm.generated(turn, 1.5)
    dm.speech(True, turn, 1.6)
    dm.voice_start(2, 0.09, 2.9)  # too short to barge in yet
    actions = dm.speech(False, turn, 3.0)
    assert of(actions, TurnEnded)[0].outcome == "done"
    assert states(actions) == [State.USER_SPEAKING]
    assert dm.utterance == 2
    dm.voice_end(2, 3.5)
    actions = dm.tick(10.0)  # no final within user_turn_timeout_s: listening again
    assert states(actions) == [State.LISTENING]


def test_a_stop_request_while_idle_gets_no_answer():
    dm = DialogueManager()
    dm.voice_start(1, 0.09, 0.0)
    actions = dm.transcript(1, "stop", True, 0.5)
    assert not of(actions, StartTurn)
    assert states(actions) == [State.LISTENING]


def test_a_stop_request_heard_without_a_barge_in_cancels_and_silences():
    dm = DialogueManager(barge_in=False)
    turn = speaking(dm)
    actions = dm.transcript(2, "Hold on.", True, 2.0)
    assert of(actions, Cancel) == [
        Cancel(turn, "the user asked the robot to stop", True, CancelReason.STOP_REQUEST)
    ]
    assert of(actions, TurnEnded)[0].outcome == "interrupted"
    assert not of(actions, StartTurn)
    assert states(actions) == [State.LISTENING]


def test_a_stop_then_a_question_answers_the_question_alone():
    dm = DialogueManager()
    spoken_turn(dm, "what is")  # thinking: the user goes on
    dm.voice_start(2, 0.09, 1.2)
    actions = dm.transcript(2, "Stop. What is that animal?", True, 2.0)
    assert of(actions, UserSaid) == [UserSaid(2, "Stop. What is that animal?")]
    assert of(actions, StartTurn)[0].user_text == "What is that animal?"  # no carried words
    assert states(actions) == [State.THINKING]


def test_a_stop_request_drops_a_question_held_for_later():
    dm = DialogueManager(barge_in=False)
    turn = speaking(dm)
    assert dm.transcript(2, "and that", True, 2.0) == []  # held: barge-in is off
    dm.transcript(3, "Stop.", True, 2.5)
    dm.generated(turn, 2.6)
    assert not of(dm.speech(False, turn, 3.0), StartTurn)
    assert dm.state == State.LISTENING


def test_speech_over_an_acknowledgement_carries_no_old_question():
    dm = DialogueManager(stop_reply="Okay.")
    spoken_turn(dm, "what is this")
    dm.voice_start(2, 0.09, 1.2)  # the user goes on while the model thinks
    ack = of(dm.transcript(2, "wait", True, 1.5), StartTurn)[0]
    assert ack.reply == "Okay."
    dm.voice_start(3, 0.09, 1.6)  # and speaks again while the acknowledgement is pending
    actions = dm.transcript(3, "the red one", True, 2.0)
    assert of(actions, StartTurn)[0].user_text == "the red one"


def test_a_stop_request_can_get_a_fixed_acknowledgement():
    dm = DialogueManager(stop_reply="Okay.")
    speaking(dm)
    dm.voice_ongoing(2, 0.2, 2.0)
    actions = dm.transcript(2, "stop", True, 2.5)
    start = of(actions, StartTurn)[0]
    assert (start.user_text, start.reply) == ("stop", "Okay.")
    assert states(dm.token(start.turn_id, "Okay.", 2.6)) == [State.SPEAKING]
