"""Tier 3: the bundled session replayed through the graph on /clock, its outputs compared with
the golden file (`make golden` rewrites it on purpose; review the diff), and its final
transcripts with the words spoken in it (word error rate at most regression.MAX_WER)."""

from __future__ import annotations

import json
import uuid

import pytest

from omniflow import demo, regression, report

pytestmark = pytest.mark.serial  # what was heard, against the words spoken


def test_replaying_the_sample_session_matches_the_golden_file(tmp_path):
    result = demo.run_session(
        demo.default_bag(),
        out_dir=tmp_path,
        quiet=True,
        rate=regression.REPLAY_RATE,
        overrides=regression.OVERRIDES,
        namespace=f"/t{uuid.uuid4().hex[:6]}",
    )
    summary = regression.summarize(result.run)
    # What the session is made of: a question while pointing, an echo, a barge-in.
    assert len(summary["transcript"]) >= 2, summary
    assert summary["associations"] and summary["associations"][0]["chosen_s"], summary
    first = summary["associations"][0]
    assert 0.8 <= first["trigger_s"] <= 1.3 and 0.8 <= first["chosen_s"][0] <= 1.4
    # The robot answered the question and did not take its own voice for the user's.
    # ... about the cup the hand pointed at (greedy decoding: the same answer every run).
    assert summary["response"] == [{"nonempty": True, "names": ["cup"]}], summary
    assert not any(0.0 < t["start_s"] - 3.2 < 2.5 for t in summary["transcript"]), summary
    golden = json.loads(regression.golden_path().read_text(encoding="utf-8"))
    problems = regression.compare(summary, golden)
    assert problems == [], (
        "\n".join(problems)
        + "\nthis run: "
        + json.dumps(summary)
        + "\n(if the change is intended: make golden, and review the diff)"
    )


def test_the_session_heard_by_moonshine_is_answered_about_what_was_pointed_at(tmp_path):
    """``asr.engine: moonshine`` in the whole graph: the session's words within the same word
    error rate, and both questions answered about the object in view."""
    golden = json.loads(regression.golden_path().read_text(encoding="utf-8"))
    result = demo.run_session(
        demo.default_bag(),
        out_dir=tmp_path,
        quiet=True,
        rate=regression.REPLAY_RATE,
        overrides={
            "fusion": {"asr.engine": "moonshine", "asr.moonshine.partial_interval_ms": 5000}
        },
        namespace=f"/t{uuid.uuid4().hex[:6]}",
    )
    summary = regression.summarize(result.run)
    heard = regression.hearing(summary["transcript"], golden[regression.SPOKEN])
    assert heard["wer"] <= regression.MAX_WER, heard
    answers = [regression.named_objects(r["text"]) for r in report.responses(result.run)]
    assert answers[:1] == [["cup"]] and ["cat"] in answers[1:], answers
