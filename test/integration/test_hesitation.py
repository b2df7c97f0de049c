"""The hesitation set through the real graph over DDS (tier 2): fusion (webrtc VAD, Whisper),
dialogue (the embedded Gemma scoring the end of each turn) and speech, each in its own
process, the user a room microphone in this process (see test_conversation.py).

- sentences with 500-800 ms pauses inside them (espeak-ng, several voices): no answer
  starts inside a pause; the whole sentence is one turn, answered after its last word (at
  most one fragment that the recogniser heard as other words, which may read as a
  finished sentence, is let pass: the decision is tested on the words heard);
- finished questions: answered with the short wait (the model scored them complete, and the
  answer started well before the long wait would have ended).
"""

from __future__ import annotations

import json

from dialogue_graph import ANSWER_TIMEOUT_S
from hesitation import RATE, Clip, hesitation_set
from std_msgs.msg import String
from test_conversation import Conversation

from omniflow.core.end_of_turn import EndOfTurnPolicy
from omniflow.core.text import words
from omniflow.msg import DialogueState, Transcript
from omniflow.ros.conversions import ns_from_time
from omniflow.ros.monitor import TopicRecorder
from omniflow.ros.qos import EVENTS, LATCHED

POLICY = EndOfTurnPolicy.default()
NS_PER_S = 1_000_000_000
TAIL_NS = 300_000_000  # the VAD may end the speech this much before the clip's last sample


def said_so_far(heard: str, sentence: str) -> bool:
    """Whether ``heard`` is the start of ``sentence`` word for word, case and punctuation
    aside: the words before a pause heard as they were said ("I would like." of "I would
    like the red cup please.", not "I would like a convert.")."""
    first, whole = words(heard), words(sentence)
    return bool(first) and whole[: len(first)] == first


def say(talk: Conversation, status: TopicRecorder, finals: TopicRecorder, node, clip: Clip) -> dict:
    """Play ``clip`` into the room and wait until the turn holding its last words was
    answered and the robot listens again; what happened, in seconds after the last word."""
    states_before = len(talk.states.messages)
    said_before = len(talk.said.messages)
    start_ns = node.get_clock().now().nanoseconds + 200_000_000
    talk.room.user_speaks(start_ns, clip.samples)
    end_ns = start_ns + clip.speech_end * NS_PER_S // RATE

    def last_words(ms):  # the user_said whose speech ends with the clip's
        return [m for m in ms[said_before:] if ns_from_time(m.end) >= end_ns - TAIL_NS]

    said = last_words(
        talk.said.wait_until(last_words, ANSWER_TIMEOUT_S, f"the turn of {clip.text!r}")
    )[0]
    states = talk.states.wait_until(
        lambda ms: (
            ms[-1].state == DialogueState.LISTENING
            and any(
                m.state == DialogueState.THINKING
                and ns_from_time(m.header.stamp) >= ns_from_time(said.header.stamp)
                for m in ms[states_before:]
            )
        ),
        timeout=ANSWER_TIMEOUT_S,
        what=f"the answer to {clip.text!r} given",
    )
    thinking = [
        ns_from_time(m.header.stamp)
        for m in states[states_before:]
        if m.state == DialogueState.THINKING
    ]
    answers: dict[int, int] = {}  # turn -> its first words, as the speech node got them
    for chunk in talk.chunks.messages:
        stamp = ns_from_time(chunk.header.stamp)
        if stamp >= start_ns and chunk.text_delta.strip():
            answers[chunk.turn_id] = min(answers.get(chunk.turn_id, stamp), stamp)
    final = max(
        (m for m in finals.messages if m.is_final and ns_from_time(m.header.stamp) <= thinking[-1]),
        key=lambda m: ns_from_time(m.header.stamp),
    )
    reports = len(status.messages)  # the next status (1 Hz) holds this turn's score
    status.wait_for(reports + 1, timeout=10)
    return {
        "said": [m.text for m in talk.said.messages[said_before:]],
        "answers": len(answers),
        "answer_after_s": (min(answers.values(), default=0) - end_ns) / NS_PER_S,
        "answers_at_s": sorted(t / NS_PER_S for t in answers.values()),
        # Turns the model began but the user's next words cancelled before any word of it.
        "withdrawn": len(thinking) - len(answers),
        "turn_after_s": (thinking[-1] - end_ns) / NS_PER_S,
        # From the last final transcript to the turn: the dialogue's own wait (and score).
        "held_s": (thinking[-1] - ns_from_time(final.header.stamp)) / NS_PER_S,
        "final_after_s": (ns_from_time(final.header.stamp) - end_ns) / NS_PER_S,
        "pauses_s": [
            (
                (start_ns + a * NS_PER_S // RATE) / NS_PER_S,
                (start_ns + b * NS_PER_S // RATE) / NS_PER_S,
            )
            for a, b in clip.pauses
        ],
        "p": json.loads(status.messages[-1].data)["last_end_of_turn_probability"],
    }


def test_no_answer_starts_inside_a_pause_and_finished_questions_get_the_short_wait(
    ros_node, start_node, tmp_path
):
    unfinished, finished = hesitation_set(tmp_path)
    talk = Conversation(ros_node, start_node)
    status = TopicRecorder(ros_node, String, f"{talk.namespace}/dialogue/status", LATCHED)
    finals = TopicRecorder(ros_node, Transcript, f"{talk.namespace}/transcript", EVENTS)
    results = {}
    misheard = []  # fragments the recogniser turned into questions
    try:
        for clip in unfinished:
            result = results[clip.text] = say(talk, status, finals, ros_node, clip)
            in_pause = any(
                a <= t <= b for t in result["answers_at_s"] for a, b in result["pauses_s"]
            )
            if in_pause or result["answers"] != 1:
                # The decision is tested on the words heard: only a fragment the recogniser
                # heard as other words ("What is the colour of" as "What is the color on?",
                # "I would like the" as "I would like a convert.") may be answered, and at
                # most once in the set. Words heard as said must wait for the rest.
                assert not said_so_far(result["said"][0], clip.text), result
                misheard.append(result["said"][0])
                continue
            # One answer for the whole sentence, after its last word, none in a pause.
            assert result["answer_after_s"] > 0, result
            assert result["said"][-1] == max(result["said"], key=len), result
            heard = len(result["said"][-1].split())
            assert heard > len(clip.parts[-1].split()) + 1, result  # the words before the pause too
        for clip in finished:
            result = results[clip.text] = say(talk, status, finals, ros_node, clip)
            assert result["answers"] == 1 and result["withdrawn"] == 0, result
            # The short wait: the final started the turn at once, while an unfinished one
            # holds it up to the long wait. (A final that comes after the long wait is
            # answered unscored: there is nothing left to wait for.)
            assert result["held_s"] < POLICY.long_wait_s / 2, result
            if result["final_after_s"] < POLICY.long_wait_s - POLICY.short_wait_s:
                assert POLICY.complete(result["p"]), result
        assert len(misheard) <= 1, misheard
    except (TimeoutError, AssertionError) as err:
        raise AssertionError(f"{err}\n{json.dumps(results, indent=1)}\n{talk.outputs()}") from err
    finally:
        talk.close()
    print(json.dumps(results, indent=1))
