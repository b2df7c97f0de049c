"""The model worker with a scripted backend: jobs in order, cancel between tokens, evaluating
and answering ahead while idle, failures as error texts (tier 1, no ROS, no model)."""

from __future__ import annotations

import math
import threading
import time

import pytest

from omniflow.core.prompt import Prompt
from omniflow.engines.llm import GenerationStats, LlmBackend
from omniflow.engines.model_worker import ModelWorker, llm_values, sees_images
from omniflow.errors import EngineError

TIMEOUT_S = 5.0


class ScriptedBackend(LlmBackend):
    """Answers every prompt with ``pieces``; ``gate`` (when given) must be set before each
    piece after the first, so a test can act between two tokens."""

    name = "scripted"

    def __init__(self, pieces=("It ", "is ", "a ", "cup."), *, fail: str = "") -> None:
        super().__init__()
        self.pieces = pieces
        self.fail = fail
        self.gate: threading.Event | None = None
        self.warmed: list[str] = []
        self.closed = False
        self.updates: list[dict] = []
        self.generations: list[str] = []  # the user text of each generation started
        self.unfinished: list[str] = []  # generations stopped before their last piece

    def load(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    @property
    def loaded(self) -> bool:
        return not self.closed

    def warm(self, prompt: Prompt, cancel: threading.Event | None = None) -> int:
        self.warmed.append(prompt.user)
        return len(prompt.user.split())

    def turn_end_probability(self, prompt: Prompt, cancel: threading.Event | None = None):
        self.warmed.append(f"score: {prompt.user}")
        if self.fail:
            raise EngineError(self.fail)
        return 0.5 if prompt.user.endswith("?") else 0.0

    def update(self, values) -> None:
        self.updates.append(dict(values))

    def generate(self, prompt: Prompt, *, cancel: threading.Event, max_tokens=None):
        self._last_stats = GenerationStats(
            first_token_s=0.1, total_s=0.4, generated_tokens=len(self.pieces)
        )
        self.generations.append(prompt.user)
        finished = False
        try:
            for i, piece in enumerate(self.pieces):
                if i and self.gate is not None:
                    self.gate.wait(TIMEOUT_S)
                    self.gate.clear()
                if cancel.is_set():
                    return
                yield piece
            finished = True
        finally:
            if not finished:
                self.unfinished.append(prompt.user)
        if self.fail:
            raise EngineError(self.fail)


class Harness:
    def __init__(self, backend: ScriptedBackend) -> None:
        self.lock = threading.RLock()
        self.deltas: list[tuple[int, int, str]] = []
        self.done: list[tuple[int, int, str]] = []
        self.warnings: list[str] = []
        self.finished = threading.Event()
        self.scores: list[tuple[int, float | None]] = []
        self.worker = ModelWorker(
            self.lock,
            on_delta=self.on_delta,
            on_done=self.on_done,
            on_warning=self.warnings.append,
            on_score=lambda key, p: self.scores.append((key, p)),
        )
        self.worker.attach(backend)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.worker.run, args=(self.stop,), daemon=True)
        self.thread.start()

    def on_delta(self, job, index, text) -> None:
        assert self.lock._is_owned()  # delivered with the owner's lock held
        self.deltas.append((job.turn_id, index, text))

    def on_done(self, job, pieces, error) -> None:
        self.done.append((job.turn_id, pieces, error))
        self.finished.set()

    def close(self) -> None:
        self.stop.set()
        self.worker.wake()
        self.thread.join(TIMEOUT_S)
        assert not self.thread.is_alive()


@pytest.fixture
def backend() -> ScriptedBackend:
    return ScriptedBackend()


@pytest.fixture
def harness(backend):
    h = Harness(backend)
    yield h
    h.close()


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


def test_jobs_stream_their_pieces_in_order_then_finish(harness):
    harness.worker.submit(1, Prompt("sys", user="what is this"), 123)
    harness.worker.submit(2, Prompt("sys", user="and that"), 456)
    wait_for(lambda: len(harness.done) == 2, "both jobs done")
    assert [d for d in harness.deltas if d[0] == 1] == [
        (1, 0, "It "),
        (1, 1, "is "),
        (1, 2, "a "),
        (1, 3, "cup."),
    ]
    assert harness.done == [(1, 4, ""), (2, 4, "")]
    assert harness.worker.stats.last_first_token_ms == pytest.approx(100.0)
    assert harness.worker.stats.last_tokens_per_s == pytest.approx(3 / 0.3)


def test_an_answer_with_nothing_waiting_hands_freed_memory_back(backend, monkeypatch):
    calls: list[bool] = []

    def release() -> bool:
        calls.append(harness.lock._is_owned())
        return True

    monkeypatch.setattr("omniflow.engines.model_worker.release_free_memory", release)
    backend.gate = threading.Event()
    harness = Harness(backend)
    try:
        harness.worker.submit(1, Prompt("sys", user="what is this"), 123)
        wait_for(lambda: harness.deltas, "the first piece")
        harness.worker.score(7, Prompt("sys", user="and"))  # waits behind the answer
        for _ in backend.pieces[1:]:
            backend.gate.set()
            wait_for(lambda: not backend.gate.is_set(), "the next piece")
        wait_for(lambda: harness.scores, "the score after the answer")
        assert calls == []  # the score was waiting: not idle after the answer
        backend.gate = None  # the second answer runs through
        harness.worker.submit(2, Prompt("sys", user="and that"), 456)
        wait_for(lambda: calls, "memory handed back after the second answer")
        assert calls == [False]  # outside the owner's lock
        assert harness.worker.stats.releases == 1
    finally:
        harness.close()


def test_a_fixed_reply_is_the_whole_answer_without_the_model(backend, harness):
    harness.worker.submit(1, Prompt("sys", user="stop"), 123, reply="Okay.")
    wait_for(lambda: harness.done, "the reply done")
    assert harness.deltas == [(1, 0, "Okay.")]
    assert harness.done == [(1, 1, "")]
    assert math.isnan(harness.worker.stats.last_first_token_ms)  # no model timing to record


def test_a_cancel_between_tokens_stops_the_answer_and_its_end(backend, harness):
    backend.gate = threading.Event()
    harness.worker.submit(7, Prompt("sys", user="tell me a story"), 0)
    wait_for(lambda: harness.deltas, "the first piece")
    with harness.lock:
        harness.worker.cancel(7)
    backend.gate.set()
    time.sleep(0.2)
    assert harness.deltas == [(7, 0, "It ")]
    assert harness.done == []  # a cancelled job has no end: the manager already ended it
    harness.worker.forget(7)
    harness.worker.cancel(7)  # unknown turns are ignored


def test_a_failing_model_ends_the_job_with_the_reason(backend, harness):
    backend.fail = "out of memory"
    harness.worker.submit(3, Prompt("sys", user="hi"), 0)
    wait_for(lambda: harness.done, "the job's end")
    assert harness.done == [(3, 4, "the model failed: out of memory")]


def test_the_users_words_are_evaluated_ahead_while_idle(backend, harness):
    harness.worker.warm(Prompt("sys", user="what is"))
    wait_for(lambda: backend.warmed, "evaluated ahead")
    assert backend.warmed == ["what is"]
    wait_for(lambda: harness.worker.stats.warm_tokens == 2, "warm tokens counted")


def test_a_submitted_turn_replaces_words_waiting_to_be_evaluated(backend):
    h = Harness(backend)
    try:
        with h.lock:  # the worker cannot take either before both are queued
            h.worker.warm(Prompt("sys", user="what is"))
            h.worker.submit(1, Prompt("sys", user="what is this"), 0)
        wait_for(lambda: h.done, "the job")
        time.sleep(0.1)
        assert backend.warmed == []
    finally:
        h.close()


def test_a_score_comes_before_the_words_waiting_to_be_evaluated(backend):
    h = Harness(backend)
    try:
        with h.lock:
            h.worker.warm(Prompt("sys", user="what is"))
            h.worker.score(1, Prompt("sys", user="what is this?"))
            h.worker.score(2, Prompt("sys", user="and that?"))  # replaces the older request
        wait_for(lambda: len(backend.warmed) == 2, "scored, then evaluated ahead")
        assert backend.warmed == ["score: and that?", "what is"]
        assert h.scores == [(2, 0.5)]
    finally:
        h.close()


def test_a_score_stops_the_evaluation_ahead_in_progress(backend, harness):
    warming, stopped = threading.Event(), threading.Event()

    def slow_warm(prompt, cancel=None):  # a long prompt, chunk after chunk until cancelled
        warming.set()
        if cancel.wait(TIMEOUT_S):
            stopped.set()
        return 0

    backend.warm = slow_warm
    harness.worker.warm(Prompt("sys", user="what is the"))
    assert warming.wait(TIMEOUT_S)
    harness.worker.score(3, Prompt("sys", user="what is this?"))
    wait_for(lambda: harness.scores, "the score's answer")
    assert stopped.is_set()
    assert harness.scores == [(3, 0.5)]  # the score itself ran uncancelled


def test_a_score_waiting_behind_a_score_does_not_cancel_it(backend, harness):
    scoring, release = threading.Event(), threading.Event()
    seen: list[bool] = []
    real = backend.turn_end_probability

    def slow_score(prompt, cancel=None):
        if not scoring.is_set():
            scoring.set()
            release.wait(TIMEOUT_S)
        seen.append(cancel.is_set())
        return real(prompt, cancel)

    backend.turn_end_probability = slow_score
    harness.worker.score(1, Prompt("sys", user="what is this?"))
    assert scoring.wait(TIMEOUT_S)
    harness.worker.score(2, Prompt("sys", user="and that?"))
    release.set()
    wait_for(lambda: len(harness.scores) == 2, "both scores answered")
    assert seen == [False, False]
    assert harness.scores == [(1, 0.5), (2, 0.5)]


def test_a_failing_score_is_answered_with_none_and_a_warning(backend, harness):
    backend.fail = "out of memory"
    harness.worker.score(4, Prompt("sys", user="what is"))
    wait_for(lambda: harness.scores, "the score's answer")
    assert harness.scores == [(4, None)]
    assert "out of memory" in harness.warnings[0]


QUESTION = Prompt("sys", scene="a cup", user="What is this?")
ANSWER = [(1, 0, "It "), (1, 1, "is "), (1, 2, "a "), (1, 3, "cup.")]


def test_an_answer_ahead_is_kept_until_its_turn_starts_and_then_delivered_whole(harness):
    backend = harness.worker.backend
    harness.worker.answer_ahead(QUESTION)
    wait_for(lambda: harness.worker.stats.answers_ahead == 1, "answering ahead")
    time.sleep(0.1)
    assert harness.deltas == [] and harness.done == []  # nobody receives it yet
    harness.worker.submit(1, Prompt("sys", scene="a cup", user="What is this?"), 5)
    wait_for(lambda: harness.done, "the turn's answer")
    assert harness.deltas == ANSWER
    assert harness.done == [(1, 4, "")]
    assert backend.generations == ["What is this?"]  # the turn generated nothing again
    assert harness.worker.stats.answers_taken_over == 1


def test_a_turn_takes_over_its_answer_ahead_in_the_middle(backend, harness):
    backend.gate = threading.Event()
    harness.worker.answer_ahead(QUESTION)
    wait_for(lambda: backend.generations, "answering ahead")
    harness.worker.submit(1, QUESTION, 5)
    backend.gate.set()  # the second piece: the worker sees the job and hands it over
    wait_for(lambda: harness.deltas, "the pieces so far")
    assert harness.deltas == ANSWER[:2]  # both at once
    for _ in range(2):
        backend.gate.set()
        wait_for(lambda: not backend.gate.is_set(), "the next piece")
    wait_for(lambda: harness.done, "the turn's answer")
    assert harness.deltas == ANSWER and harness.done == [(1, 4, "")]
    assert backend.generations == ["What is this?"] and backend.unfinished == []


def test_a_turn_with_other_words_drops_the_answer_ahead(backend, harness):
    backend.gate = threading.Event()
    harness.worker.answer_ahead(QUESTION)
    wait_for(lambda: backend.generations, "answering ahead")
    harness.worker.submit(1, Prompt("sys", scene="a cup", user="What is this cup?"), 5)
    while not harness.done:  # piece by piece: the answer ahead stops, the turn's runs
        backend.gate.set()
        wait_for(lambda: not backend.gate.is_set() or harness.done, "the next piece")
    assert harness.deltas == ANSWER and harness.done == [(1, 4, "")]
    assert backend.generations == ["What is this?", "What is this cup?"]
    assert backend.unfinished == ["What is this?"]  # stopped, never delivered
    assert harness.worker.stats.answers_taken_over == 0


def test_the_user_going_on_drops_the_answer_ahead(backend, harness):
    harness.worker.answer_ahead(QUESTION)
    wait_for(lambda: backend.generations, "answering ahead")
    harness.worker.warm(Prompt("sys", scene="a cup", user="What is this and"))
    wait_for(lambda: backend.warmed, "the new words evaluated")
    harness.worker.submit(1, QUESTION, 5)  # the same words after all: answered afresh
    wait_for(lambda: harness.done, "the turn's answer")
    assert harness.deltas == ANSWER
    assert backend.generations == ["What is this?", "What is this?"]
    assert harness.worker.stats.answers_taken_over == 0


def test_a_turn_cancelled_before_it_took_over_its_answer_ahead_gets_none(backend, harness):
    harness.worker.answer_ahead(QUESTION)
    wait_for(lambda: harness.worker.stats.answers_ahead == 1, "answering ahead")
    with harness.lock:
        harness.worker.submit(1, QUESTION, 5)
        harness.worker.cancel(1)
    time.sleep(0.2)
    assert harness.deltas == [] and harness.done == []


def test_answering_nothing_ahead_drops_the_answer_ahead(backend, harness):
    backend.gate = threading.Event()
    harness.worker.answer_ahead(QUESTION)
    wait_for(lambda: backend.generations, "answering ahead")
    harness.worker.answer_ahead(None)  # the user went on
    backend.gate.set()
    wait_for(lambda: backend.unfinished, "the answer ahead stopped")
    assert backend.unfinished == ["What is this?"]
    assert harness.deltas == [] and harness.done == []


def test_an_answer_ahead_that_fails_is_dropped_and_the_turn_answered_afresh(backend, harness):
    backend.fail = "out of memory"
    harness.worker.answer_ahead(QUESTION)
    wait_for(lambda: harness.warnings, "the failure reported")
    assert "answering ahead failed" in harness.warnings[0]
    backend.fail = ""
    harness.worker.submit(1, QUESTION, 5)
    wait_for(lambda: harness.done, "the turn's answer")
    assert harness.deltas == ANSWER and harness.done == [(1, 4, "")]
    assert harness.worker.stats.answers_taken_over == 0


def test_unload_drops_queued_work_and_closes_the_model(backend):
    h = Harness(backend)
    h.close()
    h.worker.submit(1, Prompt("sys", user="hi"), 0)
    h.worker.update({"llm.threads": 1, "barge_in.enabled": False})
    assert backend.updates == [{"llm.threads": 1}]
    h.worker.unload()
    assert backend.closed and h.worker.backend is None
    h.worker.update({"llm.threads": 2})  # nothing loaded: nothing to update


def test_parameter_helpers():
    params = {"llm.backend": "remote", "llm.remote.images": True, "vision.enabled": True}
    assert llm_values(params) == {"llm.backend": "remote", "llm.remote.images": True}
    assert sees_images(params)
    assert sees_images({"llm.backend": "minicpmv", "llm.remote.images": False})
    assert not sees_images({"llm.backend": "embedded", "llm.remote.images": True})
