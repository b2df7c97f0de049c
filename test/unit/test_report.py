"""Tier 1: the demo report (latency rows, timeline picture, JSON) and the replay regression's
table-driven comparison, on runs built from messages (no ROS)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from omniflow import regression, report
from omniflow.bag import typestore

START = 1_767_225_600 * 10**9
MS = 1_000_000


def T(offset_ms: float):
    sec, nanosec = divmod(START + int(offset_ms * MS), 10**9)
    return typestore().types["builtin_interfaces/msg/Time"](sec=sec, nanosec=nanosec)


def H(offset_ms: float):
    return typestore().types["std_msgs/msg/Header"](stamp=T(offset_ms), frame_id="")


def msg(msgtype: str, **fields):
    return typestore().types[msgtype](**fields)


def transcript(
    utterance: int,
    start_ms: float,
    end_ms: float,
    text: str,
    final=True,
    at_ms: float | None = None,
):
    return msg(
        "omniflow/msg/Transcript",
        header=H(at_ms if at_ms is not None else end_ms + 50),
        utterance_id=utterance,
        start=T(start_ms),
        end=T(end_ms),
        text=text,
        confidence=float("nan"),
        is_final=final,
        words=[],
    )


# TokenRef's explanation of a score, left at "nothing compared" (the report does not read it)
UNEXPLAINED = {"time_offset_ns": 0, "hamming": -1, "bloom_hit": False, "labels": [], "pointed": ""}


def ref(ms: float, chosen: bool, score: float = 0.5):
    return msg(
        "omniflow/msg/TokenRef",
        modality=1,
        stamp=T(ms),
        code=1,
        resolution=0,
        score=score,
        chosen=chosen,
        reason="" if chosen else "lower score",
        summary="hand pointing top-left" if chosen else "",
        **UNEXPLAINED,
    )


def association(decision: int, trigger_ms: float, chosen_ms: list[float], others: list[float] = ()):
    duration = typestore().types["builtin_interfaces/msg/Duration"]
    return msg(
        "omniflow/msg/Association",
        header=H(trigger_ms + 130),
        decision_id=decision,
        trigger=msg(
            "omniflow/msg/TokenRef",
            modality=0,
            stamp=T(trigger_ms),
            code=0,
            resolution=0,
            score=1.0,
            chosen=True,
            reason="",
            summary="",
            **UNEXPLAINED,
        ),
        window_before=duration(sec=0, nanosec=80 * MS),
        window_after=duration(sec=0, nanosec=120 * MS),
        candidates=[ref(c, True) for c in chosen_ms] + [ref(c, False) for c in others],
        utterance_id=0,
        query="",
    )


def image(ms: float, value: int):
    return msg(
        "sensor_msgs/msg/Image",
        header=H(ms),
        height=2,
        width=2,
        encoding="rgb8",
        is_bigendian=0,
        step=6,
        data=np.full(12, value, dtype=np.uint8),
    )


def audio(ms: float, level: int):
    samples = np.full(640, level, dtype="<i2")
    return msg(
        "omniflow/msg/AudioChunk",
        header=H(ms),
        sample_rate=16000,
        channels=1,
        format=1,
        sequence=int(ms // 40),
        data=np.frombuffer(samples.tobytes(), dtype=np.uint8),
    )


def fusion_run() -> report.Run:
    run = report.Run(start_ns=START)
    run.messages["audio"] = [(START + (k * 40 + 2) * MS, audio(k * 40, 100 * k)) for k in range(50)]
    run.messages["image_raw"] = [
        (START + int(k * 66.667 + 5) * MS, image(k * 66.667, k)) for k in range(30)
    ]
    run.messages["transcript"] = [
        (0, transcript(1, 990, 1500, "what", final=False)),
        (0, transcript(1, 990, 1980, "what is this", at_ms=2400)),
    ]
    run.messages["associations"] = [(0, association(1, 990, [1000.0], [933.333]))]
    return run


def test_fusion_only_run_fills_its_rows_and_says_na_for_the_rest():
    table = report.latency(fusion_run())
    assert table["capture"]["median_ms"] == pytest.approx(2.0, abs=3.0)
    assert table["VAD/ASR"]["median_ms"] == pytest.approx(420.0)
    assert table["association"]["median_ms"] == pytest.approx(130.0)
    for stage in ("vision", "end of turn", "first token", "first audio", "end to end"):
        assert table[stage] is None
    text = report.latency_table(table)
    assert text.count("n/a") == 10  # median and p90 of five rows
    assert [line.split()[0] for line in text.splitlines()[2:]] == [
        "capture",
        "VAD/ASR",
        "vision",
        "association",
        "end",
        "first",
        "first",
        "end",
    ]


def test_dialogue_and_speech_rows_appear_when_their_topics_do():
    run = fusion_run()
    response = [
        msg(
            "omniflow/msg/ResponseChunk",
            header=H(2500 + 100 * i),
            turn_id=1,
            index=i,
            text_delta=piece,
            is_final=i == 2,
            turn_start=T(2000),
        )
        for i, piece in enumerate(["It is ", "a cup", "."])
    ]
    run.messages["response"] = [(0, m) for m in response]
    run.messages["speech_state"] = [
        (
            0,
            msg("omniflow/msg/SpeechState", header=H(0), speaking=False, turn_id=0, phrase_index=0),
        ),
        (
            0,
            msg(
                "omniflow/msg/SpeechState", header=H(2560), speaking=True, turn_id=1, phrase_index=0
            ),
        ),
    ]
    run.messages["dialogue_state"] = [
        (0, msg("omniflow/msg/DialogueState", header=H(ms), state=state, turn_id=1, reason=""))
        for ms, state in ((1000, 1), (2430, 2), (2500, 3))
    ]
    table = report.latency(run)
    assert table["end of turn"]["median_ms"] == pytest.approx(2430.0 - 2400.0)
    assert table["first token"]["median_ms"] == pytest.approx(2500.0 - 2430.0)
    assert table["first audio"]["median_ms"] == pytest.approx(60.0)
    assert table["end to end"]["median_ms"] == pytest.approx(2560.0 - 1980.0)
    assert report.responses(run) == [
        {"turn_id": 1, "start_s": 2.0, "final": True, "text": "It is a cup."}
    ]


def test_vision_row_comes_from_the_fusion_diagnostics():
    run = fusion_run()
    kv = typestore().types["diagnostic_msgs/msg/KeyValue"]
    status = msg(
        "diagnostic_msgs/msg/DiagnosticStatus",
        level=0,
        name="fusion",
        message="active",
        hardware_id="fusion",
        values=[
            kv(key="vision_encoded", value="10"),
            kv(key="scheduler.stage_ns_total.encode", value=str(85 * MS)),
        ],
    )
    run.messages["/diagnostics"] = [
        (0, msg("diagnostic_msgs/msg/DiagnosticArray", header=H(0), status=[status]))
    ]
    assert report.latency(run)["vision"]["median_ms"] == pytest.approx(8.5)


def test_chosen_frames_transcripts_and_associations_are_reported():
    run = fusion_run()
    assert report.transcripts(run) == [
        {
            "utterance_id": 1,
            "start_s": 0.99,
            "end_s": 1.98,
            "text": "what is this",
            "confidence": None,
        }
    ]
    (decision,) = report.associations(run)
    assert decision["chosen_s"] == [1.0] and decision["candidates"] == 2
    frames = report.chosen_frames(run)
    assert list(frames) == [1.0] and frames[1.0].shape == (2, 2, 3)
    assert int(frames[1.0][0, 0, 0]) == 15  # the 16th frame, stamped 1000 ms


def test_report_files_are_written(tmp_path):
    paths = report.write(fusion_run(), tmp_path)
    data = json.loads(paths["json"].read_text())
    assert data["transcripts"][0]["text"] == "what is this"
    assert data["latency"]["first token"] is None
    png = paths["timeline"].read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    assert any(p.name.startswith("chosen_frame_") for p in paths.values())


def state(ms: float, value: int, turn: int = 0, *, stamp=None):
    return msg(
        "omniflow/msg/DialogueState",
        header=typestore().types["std_msgs/msg/Header"](stamp=stamp or T(ms), frame_id=""),
        state=value,
        turn_id=turn,
        reason="",
    )


def run_with_states() -> report.Run:
    """A fusion run with the dialogue's states: the first one latched before /clock ran
    (stamped 0), the last ones after the inputs ended, and a long answer near the end."""
    run = fusion_run()
    zero = typestore().types["builtin_interfaces/msg/Time"](sec=0, nanosec=0)
    run.messages["dialogue_state"] = [
        (START, state(0, 0, stamp=zero)),
        (START, state(990, 1, 1)),
        (START, state(2400, 2, 1)),
        (START, state(2500, 3, 1)),
        (START, state(3900, 4, 1)),
        (START, state(3950, 1, 2)),
        (START, state(4100, 2, 2)),
        (START, state(6000, 0, 2)),
    ]
    run.messages["response"] = [
        (
            0,
            msg(
                "omniflow/msg/ResponseChunk",
                header=H(5800),
                turn_id=2,
                index=0,
                text_delta="That is a very long answer that goes on past the end of the "
                "session, on and on.",
                is_final=True,
                turn_start=T(4100),
            ),
        )
    ]
    return run


def test_states_before_the_session_start_collapse_to_the_state_at_zero():
    run = run_with_states()
    sequence = report.states(run, "dialogue_state", "state")
    assert sequence[0] == {"t_s": 0.0, "state": 0, "turn_id": 0}
    assert [entry["state"] for entry in sequence] == [0, 1, 2, 3, 4, 1, 2, 0]
    assert min(entry["t_s"] for entry in report.build(run)["dialogue_states"]) == 0.0
    # two states latched before the start: only the later one is the state at the start
    run.messages["dialogue_state"].insert(1, (START, state(-5000, 2)))
    assert report.states(run, "dialogue_state", "state")[0] == {
        "t_s": 0.0,
        "state": 2,
        "turn_id": 0,
    }


def test_every_timeline_label_lies_inside_the_axes_and_no_time_is_negative():
    fig = report.timeline_figure(run_with_states())
    (ax,) = fig.axes
    renderer = fig.canvas.get_renderer()
    box = ax.get_window_extent(renderer)
    assert len(ax.texts) == 1 + 1 + 8  # a transcript, a response, eight states
    for label in ax.texts:
        extent = label.get_window_extent(renderer)
        assert box.x0 <= extent.x0 and extent.x1 <= box.x1, (
            f"{label.get_text()!r} spans {extent.x0:.0f}-{extent.x1:.0f} px, "
            f"the axes {box.x0:.0f}-{box.x1:.0f}"
        )
    assert {"INTERRUPTED", "LISTENING", "SPEAKING"} <= {label.get_text() for label in ax.texts}
    left, right = ax.get_xlim()
    assert left < 0 <= min(label.get_position()[0] for label in ax.texts)
    assert right >= 6.0  # the last state, after the inputs (2 s) ended
    for line in ax.get_lines():
        assert min(line.get_xdata(), default=0) >= 0, line


# ------------------------------------------------------------------- regression comparison
GOLDEN = {
    "spoken": [{"at_s": 1.0, "text": "What is this?"}],
    "transcript": [{"utterance_id": 1, "start_s": 0.99, "end_s": 1.98}],
    "associations": [{"trigger_s": 0.99, "chosen_s": [1.0]}],
}
RUN = {
    "transcript": [{"utterance_id": 1, "start_s": 0.99, "end_s": 1.98, "text": "What is this?"}],
    "associations": [{"trigger_s": 0.99, "chosen_s": [1.0]}],
}


def test_a_run_within_the_tolerances_matches():
    actual = json.loads(json.dumps(RUN))
    actual["transcript"][0]["end_s"] += 0.1
    actual["transcript"][0]["text"] = "what is this one"  # 1 error in 3 words: 0.33
    actual["associations"][0]["chosen_s"] = [1.067]
    assert regression.compare(actual, GOLDEN, max_wer=0.34) == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            lambda a: a["transcript"][0].update(start_s=1.5),
            "transcript[0].start_s: 1.5 s is 510 ms",
        ),
        (
            lambda a: a["transcript"][0].update(text="what is now telling me"),
            f"word error rate 1.000 (3 of 3 words spoken), at most {regression.MAX_WER}",
        ),
        (lambda a: a["transcript"][0].update(utterance_id=2), "utterance_id: 2 != 1"),
        (lambda a: a["associations"][0].update(chosen_s=[1.0, 1.067]), "2 stamps"),
        (
            lambda a: a["associations"].append({"trigger_s": 5.0, "chosen_s": []}),
            "associations: 2 entries, golden has 1",
        ),
        (
            lambda a: a.update(response=[{"turn_id": 1, "text": "hi", "nonempty": True}]),
            "response: produced but not in the golden file",
        ),
        (lambda a: a.pop("associations"), "associations: in the golden file but not produced"),
    ],
)
def test_differences_are_named(change, expected):
    actual = json.loads(json.dumps(RUN))
    change(actual)
    problems = regression.compare(actual, GOLDEN)
    assert len(problems) == 1 and expected in problems[0], problems


def test_hearing_gives_each_spoken_line_its_finals_and_the_session_its_word_error_rate():
    spoken = [
        {"at_s": 1.0, "text": "What is this?"},
        {"at_s": 7.5, "text": "Stop. What is that animal?"},
    ]
    finals = [
        {"start_s": 0.3, "text": "Um"},  # before the first line: counted against it
        {"start_s": 0.95, "text": "What is this?"},
        {"start_s": 7.7, "text": "up."},
        {"start_s": 8.33, "text": "What is now telling me?"},
    ]
    result = regression.hearing(finals, spoken)
    assert [(line["heard"], line["errors"], line["words"]) for line in result["lines"]] == [
        ("Um What is this?", 1, 3),
        ("up. What is now telling me?", 4, 5),
    ]
    assert result["wer"] == pytest.approx(5 / 8, abs=1e-3)
    assert "4 error(s) in 5 words" in regression.hearing_text(result, 0.6)


def test_a_line_nothing_was_heard_for_is_all_errors_and_no_lines_is_refused():
    result = regression.hearing([], [{"at_s": 1.0, "text": "What is this?"}])
    assert result["wer"] == 1.0 and result["lines"][0]["heard"] == ""
    with pytest.raises(ValueError, match="spoken"):
        regression.hearing([], [])


def test_the_golden_file_records_the_compared_fields_not_what_was_heard():
    assert regression.golden_entries(RUN)["transcript"] == GOLDEN["transcript"]


def test_the_golden_file_holds_the_lines_the_sample_session_says():
    sys.path.insert(0, str(Path(__file__).parents[2] / "scripts"))
    try:
        import make_sample_session
    finally:
        sys.path.pop(0)
    said = make_sample_session.SCENARIOS["session"].user_lines
    golden = json.loads(regression.golden_path().read_text())
    assert [(line["at_s"], line["text"]) for line in golden["spoken"]] == list(said)


def test_compared_topics_grow_with_the_graph_by_name():
    assert {"transcript", "associations"} <= set(regression.compared_topics(("fusion",)))
    assert "response" not in regression.compared_topics(("fusion", "speech"))
    later = regression.compared_topics(("fusion", "speech", "dialogue"))
    assert {"dialogue_state", "response"} <= set(later)
    assert set(regression.summarize(fusion_run(), ["transcript", "associations"])) == {
        "transcript",
        "associations",
    }


def test_the_golden_file_matches_the_table():
    golden = json.loads(regression.golden_path().read_text())
    assert set(golden) == {regression.SPOKEN, *regression.compared_topics()}
    assert golden["transcript"] and golden["associations"]


# ------------------------------------------------------------------- no answer, said rightly
def test_no_answer_without_any_dialogue_state_says_the_state_never_came():
    assert "no dialogue_state was received" in report.why_no_answer(fusion_run())


def test_no_answer_while_the_speech_never_ended_names_the_running_node_and_the_cause():
    run = fusion_run()
    run.messages["transcript"] = [(0, transcript(1, 150, 1500, "what", final=False))]
    run.messages["dialogue_state"] = [(START, state(0, 0)), (START, state(150, 1, 1))]
    why = report.why_no_answer(run)
    assert why.startswith("the dialogue node ran (states: LISTENING -> USER_SPEAKING)"), why
    assert "speech never ended" in why and "vad.noise.margin_db" in why


@pytest.mark.parametrize(
    ("states", "expected"),
    [
        ([0], "1 final transcript(s) came but no turn started"),
        ([0, 1, 2, 0], "a turn started but no response text was published"),
    ],
)
def test_no_answer_after_a_final_says_where_the_turn_stopped(states, expected):
    run = fusion_run()
    run.messages["dialogue_state"] = [(START, state(i * 100, v, 1)) for i, v in enumerate(states)]
    assert report.why_no_answer(run).endswith(expected)


def test_no_answer_when_nothing_was_heard():
    run = fusion_run()
    run.messages["transcript"] = []
    run.messages["dialogue_state"] = [(START, state(0, 0))]
    assert report.why_no_answer(run).endswith(
        "no final transcript came, so there was nothing to answer"
    )
