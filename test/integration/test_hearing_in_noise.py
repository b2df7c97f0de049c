"""A question asked in a room with steady noise, through the real graph over DDS (tier 2): the
fusion node (its VAD tracking the room's noise floor), the dialogue node (embedded Gemma) and
the speech node in their own processes, the room in this process playing pink noise at 10 dB
below the question's active speech level from the first chunk on.

Without the floor gate webrtcvad takes that noise for speech that never ends: no final
transcript comes, the dialogue stays in USER_SPEAKING and nothing is answered
(test/unit/test_vad.py shows the detector alone doing it). ``vad.max_utterance_s`` is the
last resort then: the utterance it cuts still gets its final transcript.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from dialogue_graph import ANSWER_TIMEOUT_S
from room import spoken
from test_conversation import Conversation

from omniflow.core.clarify import CLARIFY_PARAMS
from omniflow.core.params import defaults
from omniflow.core.room_sounds import active_rms, pink_noise
from omniflow.core.text import edit_distance, words
from omniflow.msg import Transcript, VoiceActivity
from omniflow.ros.monitor import TopicRecorder
from omniflow.ros.qos import EVENTS

QUESTION = "What colour is the cup on the table?"
SNR_DB = 10.0
CLARIFY = defaults(CLARIFY_PARAMS)


pytestmark = pytest.mark.serial  # the words heard


@pytest.fixture(scope="module")
def question() -> np.ndarray:
    return spoken(QUESTION)


def room_noise(question: np.ndarray, snr_db: float) -> np.ndarray:
    """20 s of pink noise (looped by the room) at ``snr_db`` below the question's voice."""
    noise = pink_noise(20 * 16_000, np.random.default_rng(5))
    return noise * active_rms(question) / 10 ** (snr_db / 20)


@pytest.mark.parametrize("denoise", ["none", "speex"])
def test_a_question_in_steady_pink_noise_at_10_db_is_heard_and_answered(
    ros_node, start_node, question, denoise
):
    """By default, and with Speex's noise suppressor in front of the VAD and the recogniser
    (``audio.denoise``): the question is found, heard and answered either way."""
    talk = Conversation(
        ros_node,
        start_node,
        fusion_params={"audio.denoise": denoise},
        user=question,
        noise=room_noise(question, SNR_DB),
    )
    heard = TopicRecorder(ros_node, Transcript, f"{talk.namespace}/transcript", EVENTS)
    try:
        assert [m for m in talk.activity.messages if m.event == VoiceActivity.START] == [], (
            "the noise alone started speech"
        )
        talk.room.user_speaks(ros_node.get_clock().now().nanoseconds)
        finals = heard.wait_until(
            lambda ms: any(m.is_final for m in ms),
            timeout=ANSWER_TIMEOUT_S,
            what="the question's final transcript",
        )
        final = next(m for m in finals if m.is_final)
        errors = edit_distance(words(QUESTION), words(final.text))
        assert errors <= 3, f"heard {final.text!r} for {QUESTION!r}"
        _, answer = talk.answer()
        assert answer.strip()
        # answered, not asked to say it again (heard at 0.64-0.65 in two runs; clarify.below)
        assert answer != CLARIFY["clarify.reply"], f"asked again: heard at {final.confidence}"
        status = json.loads(talk.fusion_status.messages[-1].data)
        assert status["forced_ends"] == 0, status  # the question ended by itself
    except (TimeoutError, AssertionError) as err:
        raise AssertionError(f"{err}\n{talk.outputs()}") from err
    finally:
        talk.close()


def test_speech_cut_at_max_utterance_still_gets_its_final_transcript(
    ros_node, start_node, question
):
    """The floor gate off: webrtcvad's endless "speech" in the noise is cut at 2 s, and that
    utterance's final transcript comes all the same."""
    talk = Conversation(
        ros_node,
        start_node,
        # A long closing silence too: webrtcvad alone hears the noise as speech with short
        # gaps, so the utterance never ends by itself.
        fusion_params={
            "vad.noise.margin_db": 0.0,
            "vad.min_silence_ms": 1000,
            "vad.max_utterance_s": 2.0,
        },
        user=question,
        noise=room_noise(question, SNR_DB),
    )
    heard = TopicRecorder(ros_node, Transcript, f"{talk.namespace}/transcript", EVENTS)
    try:
        talk.fusion_status.wait_until(
            lambda ms: json.loads(ms[-1].data).get("forced_ends", 0) >= 1,
            timeout=30,
            what="an utterance cut at vad.max_utterance_s",
        )
        ends = talk.activity.wait_until(
            lambda ms: any(m.event == VoiceActivity.END for m in ms),
            timeout=10,
            what="the cut utterance's END",
        )
        cut = next(m for m in ends if m.event == VoiceActivity.END).utterance_id
        heard.wait_until(
            lambda ms: any(m.is_final and m.utterance_id == cut for m in ms),
            timeout=ANSWER_TIMEOUT_S,
            what=f"the final transcript of the cut utterance {cut}",
        )
    except (TimeoutError, AssertionError) as err:
        raise AssertionError(f"{err}\n{talk.outputs()}") from err
    finally:
        talk.close()
