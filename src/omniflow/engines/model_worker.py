"""One language model on one thread: queued turns, evaluating ahead, cancellable generation.

The dialogue node submits a :class:`Job` per turn, the user's growing words to evaluate
ahead, the words of a tentative end of turn to score, and the prompt of a turn that may start
soon, to answer ahead; :meth:`ModelWorker.run` (the node's worker thread) generates the jobs
in order and, while none is waiting, scores the newest words asked about (``on_score``), then
starts the newest answer ahead, then evaluates the newest words so the end of the turn finds
them in the KV cache, and otherwise goes on with the answer ahead. Each job has its own
cancel event: a barge-in cancels the generation between two tokens (or two prompt chunks).

An answer ahead (:meth:`ModelWorker.answer_ahead`) is a generation nobody receives yet: its
pieces are kept, not delivered. When the turn it was made for starts (a job with the same
prompt), the job takes it over: the pieces kept so far are delivered at once and the same
generation goes on for the job. Anything else that comes first (another job, other words to
score or evaluate: the user went on) stops it between two tokens and it is dropped, so
nothing of it is ever delivered for a turn that did not start with exactly its prompt.

The owner's lock is shared: every delta is handed to ``on_delta`` with the lock held and only
while the job is not cancelled, and a cancel is set with the lock held too, so no piece of an
answer is delivered after its cancel. ``on_done`` follows the last delta (with the error text,
"" when the model finished) unless the job was cancelled. No ROS imports.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
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
class _Ahead:
    """An answer generated before its turn started: its prompt, its own cancel event, the
    generation (suspended between two pieces), the pieces it gave so far and whether it is
    whole."""

    prompt: Prompt
    cancel: threading.Event
    stream: Iterator[str]
    pieces: list[str] = field(default_factory=list)
    finished: bool = False

    def close(self) -> None:
        """Stop the generation (the backend lets go of the model)."""
        self.cancel.set()
        close = getattr(self.stream, "close", None)
        if close is not None:
            close()


@dataclass
class WorkerStats:
    """What the model did, for diagnostics."""

    warm_tokens: int = 0
    answers_ahead: int = 0  # turns' answers started before the turn (answer_ahead)
    answers_taken_over: int = 0  # of them, taken over by their turn
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
        # The prompt :meth:`answer_ahead` asked for last (None inside: answer nothing ahead).
        self._ahead_request: tuple[Prompt | None] | None = None
        self._ahead: _Ahead | None = None  # the answer ahead, running or whole

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
            self._warm_prompt = self._score = self._ahead_request = None
        self._take_ahead(None)
        if backend is not None:
            backend.close()

    def submit(self, turn_id: int, prompt: Prompt, turn_start_ns: int, reply: str = "") -> Job:
        """Queue a turn (answered with ``reply`` as it is, when given); what was being
        evaluated ahead stops (the turn starts over it)."""
        with self._work:
            self._warm_cancel.set()
            self._warm_prompt = self._ahead_request = None
            job = Job(turn_id, prompt, turn_start_ns, reply=reply)
            self._cancels[turn_id] = job.cancel
            self._jobs.append(job)
            self._work.notify_all()
            return job

    def answer_ahead(self, prompt: Prompt | None) -> None:
        """Start answering this prompt (a turn's, text only) before its turn starts, when
        no job waits; a job with this prompt takes it over. The same prompt again leaves
        the answer ahead going; another one, or None, drops it."""
        with self._work:
            self._ahead_request = (prompt,)
            self._warm_prompt = None  # older words: the answer evaluates the newer ones
            self._work.notify_all()

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
            if self._ahead is not None:
                self._ahead.cancel.set()
            self._work.notify_all()

    # ----------------------------------------------------------------- the worker thread
    def run(self, stop: threading.Event) -> None:
        """Generate queued jobs; between them, score, answer ahead and evaluate the newest
        words ahead; return once ``stop`` is set (call :meth:`wake` after setting it)."""
        while not stop.is_set():
            with self._work:
                while not stop.is_set() and not self._waiting() and not self._ahead_running():
                    self._work.wait(_IDLE_WAIT_S)
                if stop.is_set():
                    return
                job = self._jobs.popleft() if self._jobs else None
                score = None if job is not None else self._score
                if score is not None:
                    self._score = None
                request = None if job or score else self._ahead_request
                if request is not None:
                    self._ahead_request = None
                warm = None if job or score or request else self._warm_prompt
                if score is None and request is None:  # those leave the words for later
                    self._warm_prompt = None
                backend = self.backend
                self._warm_cancel.clear()
                self._warming = backend is not None and warm is not None
            if backend is None:
                self._take_ahead(None)
                continue
            if job is not None:
                self._generate(backend, job, self._take_ahead(job))
                self._release_if_idle()
            elif score is not None:
                self._score_turn(backend, *score)
            elif request is not None:
                self._start_ahead(backend, *request)
            elif warm is not None:
                self._take_ahead(None)  # the user went on
                self._warm(backend, warm)
                with self._work:
                    self._warming = False
            else:
                self._continue_ahead()

    def _waiting(self) -> bool:
        """Whether anything asks for the model (the lock is held)."""
        return bool(
            self._jobs
            or self._score is not None
            or self._ahead_request is not None
            or self._warm_prompt is not None
        )

    def _ahead_running(self) -> bool:
        """Whether an answer ahead has more to generate (the lock is held)."""
        return self._ahead is not None and not self._ahead.finished

    def _start_ahead(self, backend: LlmBackend, prompt: Prompt | None) -> None:
        """Carry out an :meth:`answer_ahead` request: keep the answer ahead of the same
        prompt, drop any other, and start the new one."""
        with self._work:
            current = self._ahead
        if current is not None and prompt is not None and current.prompt == prompt:
            return
        self._take_ahead(None)
        if prompt is None:
            return
        cancel = threading.Event()
        try:
            stream = backend.generate(prompt, cancel=cancel)
        except EngineError as err:
            self._on_warning(f"answering ahead failed: {err}")
            return
        with self._work:
            self._ahead = _Ahead(prompt, cancel, stream)
            self.stats.answers_ahead += 1

    def _continue_ahead(self) -> None:
        """Generate the answer ahead, keeping its pieces, until anything else asks for the
        model or it is whole (it then waits for its turn)."""
        with self._work:
            ahead = self._ahead
        if ahead is None:
            return
        try:
            for piece in ahead.stream:
                with self._work:
                    ahead.pieces.append(piece)
                    if self._waiting():
                        return
        except Exception as err:  # noqa: BLE001 - the turn answers afresh; the worker goes on
            self._on_warning(f"answering ahead failed: {type(err).__name__}: {err}")
            self._take_ahead(None)
            return
        with self._work:
            ahead.finished = True

    def _take_ahead(self, job: Job | None) -> _Ahead | None:
        """The answer ahead, when it was made for ``job``'s prompt; otherwise (no job: the
        user went on, or another prompt) it is dropped."""
        with self._work:
            ahead, self._ahead = self._ahead, None
        if ahead is None:
            return None
        if job is None or job.reply or ahead.prompt != job.prompt or job.cancel.is_set():
            ahead.close()
            return None
        with self._work:
            self.stats.answers_taken_over += 1
        return ahead

    def _release_if_idle(self) -> None:
        """An answer ends a burst: with nothing waiting, hand what it freed back to the
        system (:mod:`omniflow.engines.memory`), outside the owner's lock."""
        with self._work:
            if self._waiting():
                return
        if release_free_memory():
            with self._lock:
                self.stats.releases += 1

    def _score_turn(self, backend: LlmBackend, key: int, prompt: Prompt) -> None:
        self._take_ahead(None)  # other words: the user went on
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

    def _generate(self, backend: LlmBackend, job: Job, ahead: _Ahead | None = None) -> None:
        index = 0
        error = ""
        if job.reply:
            deltas: Iterable[str] = [job.reply]
        elif ahead is not None:  # its pieces so far at once, then the same generation goes on
            deltas = itertools.chain(ahead.pieces, ahead.stream)
        else:
            deltas = backend.generate(job.prompt, cancel=job.cancel)
        try:
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
        if ahead is not None:
            ahead.close()
        stats = None if job.reply else backend.last_stats
        with self._lock:
            if stats is not None:
                self.stats.record(stats)
            if not job.cancel.is_set():
                self._on_done(job, index, error)
