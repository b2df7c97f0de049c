"""The speech node in its own process, driven over real DDS (tier 2)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import soundfile
from dialogue_graph import say_at_once
from std_srvs.srv import Trigger

from omniflow.msg import AudioChunk, DialogueState, ResponseChunk, SpeechState
from omniflow.ros.conversions import audio_samples, header, ns_from_time
from omniflow.ros.monitor import TopicRecorder, wait_for_publishers
from omniflow.ros.qos import LATCHED, RESPONSE, SENSOR_DATA, STATE_CHANGES
from ros_helpers import call, topic

MODULE = "omniflow.nodes.speech"
LONG_ANSWER = (
    "The red box on the table is a toolbox. It holds screwdrivers, a hammer, "
    "pliers and a tape measure. I can bring it to you if you want, or tell you "
    "more about what is inside it and where each tool goes."
)


class Conversation:
    """Publishes what a dialogue manager would, and records what the speech node says."""

    def __init__(self, node, process):
        self.node = node
        self.response = node.create_publisher(ResponseChunk, topic(process, "response"), RESPONSE)
        self.dialogue = node.create_publisher(
            DialogueState, topic(process, "dialogue_state"), LATCHED
        )
        self.states = TopicRecorder(
            node, SpeechState, topic(process, "speech_state"), STATE_CHANGES
        )
        self.played = TopicRecorder(node, AudioChunk, topic(process, "played_audio"), SENSOR_DATA)
        deadline = time.monotonic() + 15
        while self.response.get_subscription_count() < 1:
            assert time.monotonic() < deadline, "the speech node never subscribed"
            time.sleep(0.05)
        wait_for_publishers(node, topic(process, "played_audio"), 1, timeout=15)
        self.states.wait_for(1, timeout=10)  # the latched idle state: the node is active

    def say(
        self, turn_id: int, text: str, token_interval_s: float = 0.0, *, ends: bool = True
    ) -> int:
        """Stream ``text`` word by word as one turn, after the THINKING state that starts it
        (``ends``: the last word is the final chunk); returns the first token's stamp (ns)."""
        self.dialogue.publish(
            DialogueState(
                header=header(time.time_ns(), ""),
                state=DialogueState.THINKING,
                turn_id=turn_id,
                reason="a question",
            )
        )
        words = text.split(" ")
        first_ns = None
        for index, word in enumerate(words):
            stamp_ns = time.time_ns()
            first_ns = first_ns or stamp_ns
            delta = word if index == 0 else " " + word
            self.response.publish(
                ResponseChunk(
                    header=header(stamp_ns, ""),
                    turn_id=turn_id,
                    index=index,
                    text_delta=delta,
                    is_final=ends and index == len(words) - 1,
                )
            )
            if token_interval_s:
                time.sleep(token_interval_s)
        return first_ns

    def interrupt(self, turn_id: int) -> int:
        stamp_ns = time.time_ns()
        self.dialogue.publish(
            DialogueState(
                header=header(stamp_ns, ""),
                state=DialogueState.INTERRUPTED,
                turn_id=turn_id,
                reason="user spoke",
            )
        )
        return stamp_ns

    def wait_speaking(self, turn_id: int, timeout: float = 10) -> None:
        self.states.wait_until(
            lambda states: any(s.speaking and s.turn_id == turn_id for s in states),
            timeout,
            f"speaking turn {turn_id}",
        )

    def wait_idle_after_speaking(self, timeout: float) -> list[SpeechState]:
        return self.states.wait_until(
            lambda states: any(s.speaking for s in states) and not states[-1].speaking,
            timeout,
            "idle after speaking",
        )


def start_speech(start_node, **parameters):
    return start_node(MODULE, "speech", {"sink": "null", **parameters})


def test_a_streamed_answer_is_spoken_from_its_first_phrase_and_written_to_wav(
    ros_node, start_node, tmp_path
):
    wav = tmp_path / "spoken.wav"
    process = start_speech(start_node, sink="wav", **{"wav.path": str(wav)})
    talk = Conversation(ros_node, process)
    first_token_ns = talk.say(1, LONG_ANSWER, token_interval_s=0.025)
    talk.wait_speaking(1)
    # It starts while the answer is still streaming in, not after the last token.
    first_audio = talk.played.wait_for(1, timeout=5)[0]
    latency_ms = (ns_from_time(first_audio.header.stamp) - first_token_ns) / 1e6
    assert latency_ms < 1000
    states = talk.wait_idle_after_speaking(timeout=30)
    assert [s.phrase_index for s in states if s.speaking] == sorted(
        {s.phrase_index for s in states if s.speaking}
    )
    assert max(s.phrase_index for s in states if s.speaking) >= 3

    played = talk.played.messages
    stamps = np.array([ns_from_time(c.header.stamp) for c in played])
    assert np.median(np.diff(stamps)) == pytest.approx(20e6, abs=2e6)  # 20 ms blocks
    # Numbered in order without repeats; played_audio is best effort, so this subscriber
    # may miss a burst under load (14 of 610 blocks once in CI), not the node.
    sequences = [c.sequence for c in played]
    assert sequences == sorted(set(sequences))
    assert len(played) >= 0.9 * (sequences[-1] - sequences[0] + 1)
    assert {(c.sample_rate, c.channels) for c in played} == {(16000, 1)}
    start_node_output = process.output()
    process.stop()  # finalises the WAV
    audio, rate = soundfile.read(wav, dtype="int16")
    assert rate == 16000
    assert 4.0 < len(audio) / rate < 20.0, start_node_output
    heard = np.concatenate([audio_samples(c)[:, 0] for c in played])
    assert np.abs(heard.astype(np.int32)).max() > 1000  # real speech, not silence


def test_a_first_sentence_is_spoken_at_its_full_stop_before_the_answer_ends(ros_node, start_node):
    # No time budget to release it: only the full stop can.
    process = start_speech(start_node, **{"chunker.first_max_wait_ms": 5000})
    talk = Conversation(ros_node, process)
    talk.say(3, "This is a cup.", ends=False)  # the answer's end (its next token) never comes
    talk.wait_speaking(3, timeout=4)
    assert [s.phrase_index for s in talk.states.messages if s.speaking] == [0]


def test_barge_in_silences_the_speaker_within_a_block_and_says_so_at_once(ros_node, start_node):
    process = start_speech(start_node)
    talk = Conversation(ros_node, process)
    talk.say(7, LONG_ANSWER)
    talk.wait_speaking(7)
    time.sleep(0.3)
    interrupt_ns = talk.interrupt(7)
    talk.states.wait_until(lambda s: not s[-1].speaking, timeout=2, what="idle")
    idle_at_ns = talk.states.received[-1].wall_ns
    time.sleep(0.3)
    after = [c for c in talk.played.messages if ns_from_time(c.header.stamp) > interrupt_ns]
    # Blocks already on their way out (at most one 20 ms block plus DDS delivery).
    assert len(after) <= 2
    assert (idle_at_ns - interrupt_ns) / 1e6 < 100
    assert talk.states.messages[-1].turn_id == 7


def test_stop_service_and_a_newer_turn_stop_the_current_one(ros_node, start_node):
    process = start_speech(start_node)
    talk = Conversation(ros_node, process)
    talk.say(1, LONG_ANSWER)
    talk.wait_speaking(1)
    talk.say(2, "Never mind. Here is something else to say instead.")
    talk.wait_speaking(2)
    states = talk.states.messages
    first_of_two = next(i for i, s in enumerate(states) if s.speaking and s.turn_id == 2)
    assert not states[first_of_two - 1].speaking  # turn 1 was stopped before turn 2 spoke
    assert not any(s.turn_id == 1 for s in states[first_of_two:])
    response = call(ros_node, Trigger, topic(process, "speech/stop"), Trigger.Request())
    assert response.success
    talk.states.wait_until(lambda s: not s[-1].speaking, timeout=2, what="idle")


HOSTILE = {
    "shell": "; touch /tmp/omniflow-pwned $(touch /tmp/omniflow-pwned2) "
    "`touch /tmp/omniflow-pwned3`",
    "option": "--help me",
    "emoji": "🤖🎉",
    "empty": "",
    "very-long": "and so on " * 3000,
}


def test_hostile_or_unsayable_text_is_spoken_or_skipped_never_executed(ros_node, start_node):
    process = start_speech(start_node)
    talk = Conversation(ros_node, process)
    turn = 2
    for kind, text in HOSTILE.items():
        turn += 2
        say_at_once(talk.response, text, turn)
        try:  # spoken (the shell, option and long texts), or skipped as unsayable
            talk.wait_speaking(turn, timeout=1.5)
        except TimeoutError:
            pass
        # The node is still up and speaks the next turn (which stops whatever it still says:
        # a phrase being synthesised ends first, and the long text's phrases are long).
        talk.say(turn + 1, "Still here.")
        talk.wait_speaking(turn + 1, timeout=30)
        assert process.running, kind
        for name in ("omniflow-pwned", "omniflow-pwned2", "omniflow-pwned3"):
            assert not (Path("/tmp") / name).exists(), kind


def test_unknown_engine_is_refused_at_start_up_naming_the_allowed_values(start_node):
    process = start_speech(start_node, engine="festival")
    assert process.wait(timeout=20) == 2
    assert "allowed values: espeak-ng, piper" in process.output()
