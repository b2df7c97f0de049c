"""No first answer lost (tier 2, real DDS, the embedded model): an answer made before the
speech node is up, or right after it restarts, is spoken from its first piece; one that
nobody played in time is reported, and a speech node that joins later never speaks it, nor
any answer whose turn is over (a turn being played when the speech node dies ends with the
reason).

The ``response`` topic keeps its last chunks for late joiners (transient local); the speech
node speaks only the turn the dialogue node's latched state says is in progress."""

from __future__ import annotations

import json
import time

from action_msgs.msg import GoalStatus
from dialogue_graph import (
    ANSWER_TIMEOUT_S,
    LONG_PROMPT,
    SLOW_SPEECH,
    SPEECH,
    START_TIMEOUT_S,
    Graph,
    wait_future,
    wait_into_answer,
)
from std_msgs.msg import String

from omniflow.msg import AudioChunk, DialogueState, SpeechState
from omniflow.ros.conversions import header
from omniflow.ros.monitor import TopicRecorder
from omniflow.ros.qos import LATCHED, LEASED_STATE, SENSOR_DATA


def start_speech(graph: Graph, start_node):
    """A speech node in the graph's namespace, and the record of its ``~/status``."""
    process = start_node(SPEECH, "speech", {"sink": "null"}, namespace=graph.namespace)
    status = TopicRecorder(graph.node, String, graph.topic("speech/status"), LATCHED)
    return process, status


def counters(msg: String) -> dict[str, int]:
    """The counters of a speech node's ``~/status`` (its values are text)."""
    return {k: int(v) for k, v in json.loads(msg.data).items() if str(v).isdigit()}


def speech_status(status: TopicRecorder, what: str, test) -> dict[str, int]:
    """The counters of the first ``~/status`` of the speech node that passes ``test``."""
    status.wait_until(lambda ms: any(test(counters(m)) for m in ms), START_TIMEOUT_S, what)
    return next(counters(m) for m in status.messages if test(counters(m)))


def answered(graph: Graph, turn_id: int) -> str:
    """The whole answer of ``turn_id`` once its final chunk was published."""
    graph.chunks.wait_until(
        lambda cs: any(c.turn_id == turn_id and c.is_final for c in cs),
        ANSWER_TIMEOUT_S,
        f"the final chunk of turn {turn_id}",
    )
    return "".join(c.text_delta for c in graph.chunks.messages if c.turn_id == turn_id)


def spoke(graph: Graph, turn_id: int) -> bool:
    return any(s.speaking and s.turn_id == turn_id for s in graph.speech_states.messages)


def wait_speaking(graph: Graph, turn_id: int) -> None:
    graph.speech_states.wait_until(
        lambda ss: any(s.speaking and s.turn_id == turn_id for s in ss),
        ANSWER_TIMEOUT_S,
        f"the speech node speaking turn {turn_id}",
    )


def wait_spoken_to_the_end(graph: Graph, turn_id: int) -> None:
    graph.states.wait_until(
        lambda ms: any(
            m.state == DialogueState.LISTENING
            and m.turn_id == turn_id
            and m.reason == "the robot finished speaking"
            for m in ms
        ),
        ANSWER_TIMEOUT_S,
        f"turn {turn_id} spoken to the end",
    )


def goal_turn(graph: Graph, prompt: str):
    """Send a prompt goal; its handle and the turn it started."""

    def newest(states) -> int:
        return max((m.turn_id for m in states if m.state == DialogueState.THINKING), default=0)

    before = newest(graph.states.messages)
    handle, _ = graph.send(prompt)
    assert handle.accepted
    graph.states.wait_until(
        lambda ms: newest(ms) > before, ANSWER_TIMEOUT_S, "the goal's turn started"
    )
    return handle, newest(graph.states.messages)


def test_an_answer_made_before_the_speech_node_starts_is_spoken(ros_node, start_node):
    graph = Graph(ros_node, start_node, speech=False, speech_start_timeout_s=60.0)
    graph.wait_active()
    handle, turn_id = goal_turn(graph, "What is two plus two?")
    assert answered(graph, turn_id).strip()  # made with no speech node anywhere

    speech, status = start_speech(graph, start_node)
    # Spoken, as the dialogue node saw it: the new speech node may say "speaking" and "idle"
    # before this test's reader of its latched state has found it, and then only the last
    # (idle) reaches the test (a hogged fresh-clone run did that).
    try:
        wait_spoken_to_the_end(graph, turn_id)
    except TimeoutError as err:
        raise AssertionError(
            f"{err}\ndialogue states: "
            f"{[(m.state, m.turn_id, m.reason) for m in graph.states.messages]}\n"
            f"speech node said:\n{speech.output()[-3000:]}"
        ) from err
    outcome = wait_future(handle.get_result_async(), ANSWER_TIMEOUT_S)
    assert outcome.status == GoalStatus.STATUS_SUCCEEDED, outcome.result.error
    values = speech_status(status, "the speech node's turn counted", lambda v: v["turns"] >= 1)
    assert values["phrases"] >= 1, values
    assert values["ended_chunks"] == 0 and values["ignored_chunks"] == 0, values
    assert speech.running, speech.output()


def test_an_answer_nobody_played_in_time_is_reported_and_never_spoken_late(ros_node, start_node):
    graph = Graph(ros_node, start_node, speech=False, speech_start_timeout_s=0.5)
    graph.wait_active()
    handle, turn_id = goal_turn(graph, "What is two plus two?")
    outcome = wait_future(handle.get_result_async(), ANSWER_TIMEOUT_S)
    assert outcome.status == GoalStatus.STATUS_SUCCEEDED, outcome.result.error
    assert outcome.result.response.strip()
    graph.states.wait_until(
        lambda ms: any("not played" in m.reason and m.turn_id == turn_id for m in ms),
        ANSWER_TIMEOUT_S,
        "the dialogue state saying the answer was not played",
    )
    graph.status.wait_until(
        lambda ms: any(json.loads(m.data)["unplayed"] == 1 for m in ms),
        START_TIMEOUT_S,
        "the dialogue node counting the unplayed answer",
    )

    # A speech node that starts now hears the kept answer, sees that its turn is over.
    _, status = start_speech(graph, start_node)
    values = speech_status(
        status, "the speech node dropping the ended turn", lambda v: v["ended_turns"] >= 1
    )
    assert values["ended_chunks"] >= 1 and values["turns"] == 0, values
    # ... and still speaks the next answer.
    handle, next_turn = goal_turn(graph, "And three plus three?")
    wait_speaking(graph, next_turn)
    outcome = wait_future(handle.get_result_async(), ANSWER_TIMEOUT_S)
    assert outcome.status == GoalStatus.STATUS_SUCCEEDED, outcome.result.error
    assert not spoke(graph, turn_id)


def test_a_short_answer_played_between_two_turns_of_the_executor_ends_its_turn(
    ros_node, start_node
):
    """A speech node that starts and finishes a short answer ("Yes.") within a few ms says
    speaking and idle back to back: the dialogue node reads both (a depth-1 reader kept only
    the idle one, and the turn ended as unplayed after ``speech_start_timeout_s``)."""
    graph = Graph(ros_node, start_node, speech=False, speech_start_timeout_s=30.0)
    graph.wait_active()
    speech = ros_node.create_publisher(SpeechState, graph.topic("speech_state"), LEASED_STATE)
    deadline = time.monotonic() + START_TIMEOUT_S
    while speech.get_subscription_count() < 2:  # the state, and the liveliness watch
        assert time.monotonic() < deadline, "the dialogue node never read speech_state"
        time.sleep(0.05)
    handle, turn_id = goal_turn(graph, "What is two plus two?")
    answered(graph, turn_id)
    for speaking in (True, False):
        speech.publish(
            SpeechState(header=header(time.time_ns(), ""), speaking=speaking, turn_id=turn_id)
        )
    outcome = wait_future(handle.get_result_async(), 10.0)
    assert outcome.status == GoalStatus.STATUS_SUCCEEDED, outcome.result.error
    graph.states.wait_until(
        lambda ms: any(
            m.turn_id == turn_id and m.reason == "the robot finished speaking" for m in ms
        ),
        10.0,
        f"turn {turn_id} ended as spoken",
    )


def test_a_speech_node_killed_mid_answer_ends_the_turn_and_its_successor_speaks_the_next(
    ros_node, start_node
):
    # The slow voice is still talking when the kill comes: the answer is one sentence.
    graph = Graph(
        ros_node,
        start_node,
        speech_params=SLOW_SPEECH,
        speech_start_timeout_s=10.0,
        **{"llm.max_tokens": 40},
    )
    graph.wait_active()
    played = TopicRecorder(ros_node, AudioChunk, graph.topic("played_audio"), SENSOR_DATA)
    handle, turn_id = goal_turn(graph, LONG_PROMPT)
    wait_speaking(graph, turn_id)
    wait_into_answer(played)

    graph.speech.process.kill()  # in the middle of the answer: the dialogue node notices
    graph.speech.wait(START_TIMEOUT_S)
    outcome = wait_future(handle.get_result_async(), ANSWER_TIMEOUT_S)
    assert outcome.status == GoalStatus.STATUS_ABORTED
    assert "speech node went away" in outcome.result.error

    # The restarted node hears the kept chunks of the ended turn and drops them ...
    graph.speech_states.clear()
    _, status = start_speech(graph, start_node)
    values = speech_status(
        status, "the speech node dropping the ended turn", lambda v: v["ended_turns"] >= 1
    )
    assert values["turns"] == 0, values
    assert not any(s.speaking for s in graph.speech_states.messages)
    # ... and speaks the answer made right after it is back.
    _, next_turn = goal_turn(graph, "What is two plus two?")
    wait_speaking(graph, next_turn)
    wait_spoken_to_the_end(graph, next_turn)
