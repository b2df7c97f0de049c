"""One language model on one thread: queued turns, evaluating ahead, cancellable generation.

The dialogue node submits a :class:`Job` per turn, the user's growing words to evaluate
ahead, and the words of a tentative end of turn to score; :meth:`ModelWorker.run` (the
node's worker thread) generates the jobs in order and, while none is waiting, scores the
newest words asked about (``on_score``), then evaluates the newest words so the end of the
turn finds them in the KV cache. Each job has its own cancel event: a barge-in cancels the
generation between two tokens (or two prompt chunks).

The owner's lock is shared: every delta is handed to ``on_delta`` with the lock held and only
while the job is not cancelled, and a cancel is set with the lock held too, so no piece of an
answer is delivered after its cancel. ``on_done`` follows the last delta (with the error text,
"" when the model finished) unless the job was cancelled. No ROS imports.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from omniflow.core.prompt import Prompt
from omniflow.engines.llm import LLM_PARAMS, GenerationStats, LlmBackend, make_backend
from omniflow.engines.llm.inprocess import InProcessBackend
from omniflow.engines.memory import release_free_memory
from omniflow.errors import EngineError

__all__ = ["Job", "ModelWorker", "WorkerStats", "llm_values", "sees_images", "warm_up"]

# How long the idle worker sleeps before it looks at its stop event again.
_IDLE_WAIT_S = 0.5
_LLM_NAMES = frozenset(spec.name for spec in LLM_PARAMS)


def llm_values(params: Mapping[str, Any]) -> dict[str, Any]:
    """The language model's parameters (``LLM_PARAMS`` names) among ``params``."""
    return {name: value for name, value in params.items() if name in _LLM_NAMES}


def sees_images(params: Mapping[str, Any]) -> bool:
    """Whether the model these parameters select takes images (then frames are worth
    keeping): ``minicpmv``, or ``remote`` with ``llm.remote.images``."""
    return params["llm.backend"] == "minicpmv" or (
        params["llm.backend"] == "remote" and bool(params["llm.remote.images"])
    )


# The warm-up question: short, so the warm-up costs little beyond the system text.
_WARM_UP_QUESTION = "Hello."


def warm_up(backend: LlmBackend, system: str) -> None:
    """Answer a short question with one token, so the first turn after start is as fast as
    later ones: llama.cpp allocates its compute buffers and touches every weight page in its
    first decode, and the system text stays in the KV cache for the first turn's prompt to
    reuse. Only for a model in this process (a remote server warms itself): for the others
    a no-op. EngineError when the model fails."""
    if not isinstance(backend, InProcessBackend):
        return
    for _ in backend.generate(
        Prompt(system=system, user=_WARM_UP_QUESTION), cancel=threading.Event(), max_tokens=1
    ):
        pass


@dataclass
class Job:
    """One turn to answer; ``turn_start_ns`` is when the user finished (for the chunks).
    ``reply``, when set, is the whole answer: delivered as one delta, the model not asked."""

    turn_id: int
    prompt: Prompt
    turn_start_ns: int
    cancel: threading.Event = field(default_factory=threading.Event)
    reply: str = ""


@dataclass
class WorkerStats:
    """What the model did, for diagnostics."""

    warm_tokens: int = 0
    releases: int = 0  # answers after which freed memory went back to the system
    last_first_token_ms: float = float("nan")
    last_tokens_per_s: float = float("nan")

    def record(self, stats: GenerationStats) -> None:
        """Take the timing of one generation."""
        self.last_first_token_ms = stats.first_token_s * 1000
        if stats.total_s > stats.first_token_s and stats.generated_tokens > 1:
            self.last_tokens_per_s = (stats.generated_tokens - 1) / (
                stats.total_s - stats.first_token_s
            )


# on_delta(job, index, text) and on_done(job, pieces, error), called with the lock held.
DeltaHandler = Callable[[Job, int, str], None]
DoneHandler = Callable[[Job, int, str], None]
# on_score(key, probability): the end-of-turn probability asked for with ``key`` (None: the
# model could not tell), called with the lock held.
ScoreHandler = Callable[[int, float | None], None]


class ModelWorker:
    """Runs a backend's generations on the thread that calls :meth:`run`.

    Args:
        lock: the owner's lock (re-entrant), held around every callback.
        on_delta: a piece of a job's answer, with its index.
        on_done: a job finished (not called for a cancelled job).
        on_warning: a problem worth a (throttled) log line; the worker goes on.
        on_score: the answer to :meth:`score` (every request gets one, unless a newer
            request replaced it or the worker stopped).
    """

    def __init__(
        self,
        lock: threading.RLock,
        *,
        on_delta: DeltaHandler,
        on_done: DoneHandler,
        on_warning: Callable[[str], None],
        on_score: ScoreHandler | None = None,
    ) -> None:
        self._lock = lock
        self._work = threading.Condition(lock)
        self._on_delta = on_delta
        self._on_done = on_done
        self._on_warning = on_warning
        self._on_score = on_score
        self.backend: LlmBackend | None = None
        self.stats = WorkerStats()
        self._jobs: deque[Job] = deque()
        self._cancels: dict[int, threading.Event] = {}  # turn id -> its job's cancel
        self._warm_prompt: Prompt | None = None
        self._score: tuple[int, Prompt] | None = None
        self._warm_cancel = threading.Event()
        self._warming = False  # run() is evaluating words ahead (under ``_work``)

    # ----------------------------------------------------------------- the owner's side
    def load(self, params: Mapping[str, Any]) -> str:
        """Build and load the backend that ``params`` (their ``llm.*`` ones) select; return
        a description. Raises ConfigError (bad values) or EngineError (no model, no server)."""
        backend = make_backend(llm_values(params))
        started = time.monotonic()
        backend.load()
        loaded = time.monotonic()
        warm_up(backend, str(params["llm.system_prompt"]))
        self.attach(backend)
        return (
            f"model loaded ({backend.name}) in {loaded - started:.1f} s, warmed up in "
            f"{time.monotonic() - loaded:.1f} s"
        )

    def attach(self, backend: LlmBackend) -> None:
        """Use this (loaded) backend from the next job on."""
        with self._lock:
            self.backend = backend

    def update(self, changes: Mapping[str, Any]) -> None:
        """Apply the live ``llm.*`` parameters among ``changes`` to the loaded backend (from
        its next token); ConfigError or EngineError when it refuses them."""
        values = llm_values(changes)
        backend = self.backend
        if backend is not None and values:
            backend.update(values)

    def unload(self) -> None:
        """Drop all queued work and close the backend (after :meth:`run` has returned)."""
        with self._work:
            backend, self.backend = self.backend, None
            for job in self._jobs:
                job.cancel.set()
            self._jobs.clear()
            self._warm_prompt = self._score = None
        if backend is not None:
            backend.close()

    def submit(self, turn_id: int, prompt: Prompt, turn_start_ns: int, reply: str = "") -> Job:
        """Queue a turn (answered with ``reply`` as it is, when given); what was being
        evaluated ahead stops (the turn starts over it)."""
        with self._work:
            self._warm_cancel.set()
            self._warm_prompt = None
            job = Job(turn_id, prompt, turn_start_ns, reply=reply)
            self._cancels[turn_id] = job.cancel
            self._jobs.append(job)
            self._work.notify_all()
            return job

    def warm(self, prompt: Prompt) -> None:
        """Evaluate this prompt ahead when no job waits (replaces an older one)."""
        with self._work:
            self._warm_prompt = prompt
            self._work.notify_all()

    def score(self, key: int, prompt: Prompt) -> None:
        """Ask how likely ``prompt.user`` ends the user's turn, before any evaluation ahead
        (replaces an older request); ``on_score(key, probability)`` answers. An evaluation
        ahead in progress stops at its next prompt chunk: the turn's end waits for the
        score, and the score evaluates the same words anyway."""
        with self._work:
            if self._warming:
                self._warm_cancel.set()
            self._score = (key, prompt)
            self._work.notify_all()

    def cancel(self, turn_id: int) -> None:
        """Stop the turn's generation before its next delta."""
        with self._lock:
            event = self._cancels.get(turn_id)
            if event is not None:
                event.set()

    def forget(self, turn_id: int) -> None:
        """The turn is over: its cancel event is no longer needed."""
        with self._lock:
            self._cancels.pop(turn_id, None)

    def wake(self) -> None:
        """Cancel everything in progress and wake :meth:`run` (to see its stop event)."""
        with self._work:
            self._warm_cancel.set()
            for event in self._cancels.values():
                event.set()
            self._work.notify_all()

    # ----------------------------------------------------------------- the worker thread
    def run(self, stop: threading.Event) -> None:
        """Generate queued jobs; between them, evaluate the newest words ahead; return once
        ``stop`` is set (call :meth:`wake` after setting it)."""
        while not stop.is_set():
            with self._work:
                while (
                    not stop.is_set()
                    and not self._jobs
                    and self._score is None
                    and self._warm_prompt is None
                ):
                    self._work.wait(_IDLE_WAIT_S)
                if stop.is_set():
                    return
                job = self._jobs.popleft() if self._jobs else None
                score = None if job is not None else self._score
                if score is not None:
                    self._score = None
                warm = None if job is not None or score is not None else self._warm_prompt
                if score is None:  # a score leaves the words to evaluate ahead for later
                    self._warm_prompt = None
                backend = self.backend
                self._warm_cancel.clear()
                self._warming = backend is not None and warm is not None
            if backend is None:
                continue
            if job is not None:
                self._generate(backend, job)
                self._release_if_idle()
            elif score is not None:
                self._score_turn(backend, *score)
            elif warm is not None:
                self._warm(backend, warm)
                with self._work:
                    self._warming = False

    def _release_if_idle(self) -> None:
        """An answer ends a burst: with nothing waiting, hand what it freed back to the
        system (:mod:`omniflow.engines.memory`), outside the owner's lock."""
        with self._work:
            if self._jobs or self._score is not None or self._warm_prompt is not None:
                return
        if release_free_memory():
            with self._lock:
                self.stats.releases += 1

    def _score_turn(self, backend: LlmBackend, key: int, prompt: Prompt) -> None:
        try:
            probability = backend.turn_end_probability(prompt, self._warm_cancel)
        except EngineError as err:
            self._on_warning(f"scoring the end of the turn failed: {err}")
            probability = None
        with self._lock:
            if self._on_score is not None:
                self._on_score(key, probability)

    def _warm(self, backend: LlmBackend, prompt: Prompt) -> None:
        try:
            evaluated = backend.warm(prompt, self._warm_cancel)
        except EngineError as err:
            self._on_warning(f"evaluating ahead failed: {err}")
            return
        with self._lock:
            self.stats.warm_tokens += evaluated

    def _generate(self, backend: LlmBackend, job: Job) -> None:
        index = 0
        error = ""
        try:
            deltas = [job.reply] if job.reply else backend.generate(job.prompt, cancel=job.cancel)
            for delta in deltas:
                if job.cancel.is_set():
                    break
                with self._lock:
                    if job.cancel.is_set():
                        break
                    self._on_delta(job, index, delta)
                    index += 1
        except EngineError as err:
            error = f"the model failed: {err}"
        except Exception as err:  # noqa: BLE001 - a backend bug must not end the conversation
            error = f"the model failed unexpectedly: {type(err).__name__}: {err}"
        stats = None if job.reply else backend.last_stats
        with self._lock:
            if stats is not None:
                self.stats.record(stats)
            if not job.cancel.is_set():
                self._on_done(job, index, error)
