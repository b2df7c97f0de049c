"""The ``embedded`` and ``gguf`` backends: a GGUF run in process, prefix reuse, chunked prompts.

It evaluates prompts itself, ``prompt_chunk`` tokens at a time, checking the cancel event
between chunks: llama.cpp's own prompt evaluation cannot be interrupted, so a barge-in during
a long prompt would otherwise wait for all of it. It keeps what it evaluated in the KV cache
and, for the next prompt, evaluates only what differs from it (the longest common token
prefix): the system text and history stay warm across turns, and :meth:`LlmBackend.warm`
feeds the user's words while the partial transcript grows, so at the end of the turn only the
last words and ``"\\nRobot:"`` remain. The same evaluation gives, for free, how likely the
user's words end the turn (:meth:`LlamaCppBackend.turn_end_probability`: the probability
that the next token ends the sentence or the ``User:`` line: a full stop, question or
exclamation mark, or a line break), so the end-of-turn score of a partial costs nothing
beyond warming it. Sampling is llama.cpp's own sampler chain, as
``Llama.create_completion`` uses it (top-k, top-p, min-p, temperature, repeat penalty).
"""

from __future__ import annotations

import codecs
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from omniflow.core.prompt import DEFAULT_FORMAT, Prompt, PromptFormat, fit_history
from omniflow.engines.llm.base import GenerationStats, Sampling
from omniflow.engines.llm.files import check_gguf
from omniflow.engines.llm.inprocess import InProcessBackend
from omniflow.engines.llm.stop import StopFilter
from omniflow.errors import EngineError

__all__ = ["LlamaCppBackend", "probability_of"]

# What may come right after the user's last word when the turn ends there: the end of the
# sentence or of the line (benchmarks/end_of_turn.py: with the sentence ends counted,
# finished statements without their full stop score 0.26-0.9 instead of 0.003-0.05, while
# unfinished sentences stay at or below 0.016).
_TURN_ENDS = (b".", b"?", b"!", b"\n", b"\n\n", b"\n\n\n")


def _turn_end_tokens(llm: Any) -> list[int]:
    """The single tokens of ``_TURN_ENDS`` after a word, as in ``User: a?`` (tokenised in
    context: a tokenizer may put a space before text that starts a prompt)."""
    before = b"User: a"
    start = llm.tokenize(before, add_bos=False, special=False)
    found = set()
    for text in _TURN_ENDS:
        ids = llm.tokenize(before + text, add_bos=False, special=False)
        if ids[: len(start)] == start and len(ids) == len(start) + 1:
            found.add(ids[-1])
    return sorted(found)


def _cached(llm: Any, tokens: list[int]) -> int:
    """How many of ``tokens``, from the first, the KV cache of ``llm`` holds."""
    n = min(int(llm.n_tokens), len(tokens))
    differ = np.flatnonzero(llm.input_ids[:n] != np.asarray(tokens[:n], dtype=np.intc))
    return int(differ[0]) if len(differ) else n


def probability_of(logits: np.ndarray, token_ids: list[int]) -> float:
    """The softmax probability mass of ``token_ids`` among ``logits`` (one row).

    >>> round(probability_of(np.log(np.array([0.5, 0.25, 0.25])), [1, 2]), 6)
    0.5
    """
    if not token_ids:
        return 0.0
    shifted = np.exp(logits.astype(np.float64) - float(np.max(logits)))
    return float(shifted[token_ids].sum() / shifted.sum())


class LlamaCppBackend(InProcessBackend):
    """A GGUF model run in process by llama-cpp-python, with prefix reuse and chunked prompts.

    ``fmt`` lays the prompt out as text (a base model needs it: no chat template) and gives
    the stop strings. The KV cache keeps the tokens of the last prompt (and answer); the
    next prompt evaluates only from the first token that differs. ``threads`` can change
    between generations (:meth:`set_threads`, or ``update({"llm.threads": n})``).
    """

    def __init__(
        self,
        model_path: str | Path | Callable[[], Path],
        *,
        n_ctx: int = 2048,
        threads: int = 2,
        seed: int = -1,
        sampling: Sampling | None = None,
        fmt: PromptFormat = DEFAULT_FORMAT,
        name: str = "gguf",
    ) -> None:
        super().__init__(n_ctx=n_ctx, threads=threads, seed=seed, sampling=sampling)
        self.name = name
        self._model_path = model_path
        self.fmt = fmt
        self._generate_waiting = threading.Event()
        self._path: Path | None = None
        self._turn_ends: list[int] = []
        self._turn_end: tuple[tuple[int, ...], float] | None = None  # tokens -> probability
        # The answer's prompt whose last token's logits are at hand (scored with its turn).
        self._answer_ready: tuple[int, ...] | None = None

    # lifecycle --------------------------------------------------------------------------
    @property
    def model_path(self) -> Path | None:
        """The GGUF file in use (after :meth:`load`)."""
        return self._path

    def load(self) -> None:
        if self._llm is not None:
            return
        path = self._model_path() if callable(self._model_path) else self._model_path
        path = check_gguf(path)
        try:
            llm = self._new_llama(path, n_batch=512)
        except (ValueError, RuntimeError, OSError) as err:
            raise EngineError(
                f"llama.cpp could not load {path} ({path.stat().st_size} bytes, GGUF magic "
                f"present): the file is truncated, corrupt or of an architecture this "
                f"llama.cpp does not know ({err}); download or assemble it again"
            ) from err
        self._llm = llm
        self._path = path
        self._vocab = self._lib.llama_model_get_vocab(llm.model)
        self._is_eog = self._lib.llama_vocab_is_eog
        self._turn_ends = _turn_end_tokens(llm)
        self._turn_end = None

    @property
    def llama(self) -> Any:
        """The underlying ``llama_cpp.Llama`` (None when not loaded), for tools and benchmarks.

        Using it directly between generations is allowed; the next prompt then simply reuses
        whatever prefix of its tokens the cache still holds.
        """
        return self._llm

    def reset(self) -> None:
        """Forget the KV cache (and the last end-of-turn score): the next prompt is
        evaluated from its first token."""
        with self._lock:
            self._turn_end = self._answer_ready = None
            if self._llm is not None:
                self._llm.reset()

    # tokens -----------------------------------------------------------------------------
    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` as a prompt (with the BOS token)."""
        return len(self._tokenize(text))

    def _tokenize(self, text: str) -> list[int]:
        return self._require().tokenize(text.encode("utf-8"), add_bos=True, special=False)

    def _fit(self, prompt: Prompt, reserve: int, *, open_turn: bool) -> tuple[list[int], int]:
        """Tokens of the rendered prompt, trimmed to leave ``reserve`` tokens for the answer."""
        fitted, dropped = self._fitted(prompt, reserve)
        return self._tokenize(self.fmt.render(fitted, open_turn=open_turn)), dropped

    def _fitted(self, prompt: Prompt, reserve: int) -> tuple[Prompt, int]:
        """``prompt`` trimmed to leave ``reserve`` tokens for the answer, and the turns dropped."""
        budget = max(self._n_ctx - reserve, 16)

        def count(text: str) -> int:
            return len(self._tokenize(text))

        # Counted with the turn open in both cases, so warm() and generate() trim alike.
        return fit_history(prompt, count, budget, fmt=self.fmt)

    def _sync(self, llm: Any, tokens: list[int], stop: Callable[[], bool]) -> int:
        """Make the KV cache hold ``tokens``; return how many were already there.

        Evaluates what differs, ``prompt_chunk`` tokens per decode, and returns early (the
        cache then holds a prefix of ``tokens``) when ``stop()`` is true between chunks.
        """
        common = _cached(llm, tokens)
        llm.n_tokens = common  # eval() first removes everything after n_tokens from the KV
        chunk = max(int(self.sampling.prompt_chunk), 1)
        for start in range(common, len(tokens), chunk):
            if stop():
                break
            llm.eval(tokens[start : start + chunk])
        return common

    def warm(self, prompt: Prompt, cancel: threading.Event | None = None) -> int:
        """Evaluate system, history, scene and the user's words so far (not ``"Robot:"``).

        Returns the tokens evaluated now (0 when everything was cached, or when a
        generation is running: warming is an optimisation and never waits). It also stops
        between chunks as soon as a :meth:`generate` call waits for the model, so a long
        warm never delays an answer by more than one chunk.
        """
        if not self._lock.acquire(blocking=False):
            return 0

        def stop() -> bool:
            return (cancel is not None and cancel.is_set()) or self._generate_waiting.is_set()

        try:
            llm = self._require()
            self._apply_threads(llm)
            tokens, _ = self._fit(prompt, self._reserve(None), open_turn=False)
            common = self._sync(llm, tokens, stop)
            if llm.n_tokens > common:
                self._answer_ready = None
            if llm.n_tokens == len(tokens) > common:  # the last token's logits are at hand
                self._remember_turn_end(tokens)
            return llm.n_tokens - common
        except (RuntimeError, ValueError, OSError) as err:
            raise EngineError(f"LLM prompt evaluation failed: {err}") from err
        finally:
            self._lock.release()

    def turn_end_probability(
        self, prompt: Prompt, cancel: threading.Event | None = None
    ) -> float | None:
        """The probability that the user's sentence or line ends after ``prompt.user`` (the
        next token a full stop, question or exclamation mark or a line break); see
        :class:`LlmBackend`. Evaluates only what the KV cache lacks (the
        words since the last warm); when :meth:`warm` already evaluated exactly these words,
        their score is remembered and nothing is evaluated. The words are decoded together
        with the opening of the answer that follows a finished turn (``"\\nRobot:"``), and
        the score read at the last word: the turn's generation, when it comes next with
        this prompt, then samples its first token at once (one decode less, 40 against 66 ms
        here with the embedded model). Waits for a running generation (checking ``cancel``);
        EngineError when the model fails."""

        def cancelled() -> bool:
            return cancel is not None and cancel.is_set()

        llm = self._require()
        while not self._lock.acquire(timeout=0.02):
            if cancelled():
                return None
        try:
            self._apply_threads(llm)
            fitted, _ = self._fitted(prompt, self._reserve(None))
            tokens = self._tokenize(self.fmt.render(fitted, open_turn=False))
            known = self._turn_end
            if known is not None and known[0] == tuple(tokens):
                return known[1]
            opened = self._tokenize(self.fmt.render(fitted, open_turn=True))
            tail = opened[len(tokens) :] if opened[: len(tokens)] == tokens else []
            room = int(llm.n_batch) - len(tail)  # one decode holds at most n_batch tokens
            if room < 1:
                tail, room = [], int(llm.n_batch)
            self._answer_ready = None
            # The words the cache lacks (at least the last, whose logits are gone) and the
            # tail in one decode; a longer stretch before them in chunks first.
            stretch = min(int(self.sampling.prompt_chunk), room)
            last = max(_cached(llm, tokens[:-1]), len(tokens) - stretch)
            self._sync(llm, tokens[:last], cancelled)
            if llm.n_tokens < last:
                return None
            try:
                row = self._decode_scored(llm, tokens[last:] + tail, len(tokens) - 1 - last)
            except AttributeError:  # a llama-cpp-python without the batch this reads
                llm.eval(tokens[last:])
                return self._remember_turn_end(tokens)
            if tail:
                self._answer_ready = tuple(opened)
            return self._remember_turn_end(tokens, row)
        except (RuntimeError, ValueError, OSError) as err:
            raise EngineError(f"LLM end-of-turn scoring failed: {err}") from err
        finally:
            self._lock.release()

    def _decode_scored(self, llm: Any, batch: list[int], scored: int) -> np.ndarray:
        """Decode ``batch`` after the cached tokens in one go, as ``Llama.eval`` does, keeping
        the logits of ``batch[scored]`` as well as the last token's; returns the former's
        (a copy). Reads llama-cpp-python's batch and context (0.3.36, the pinned version):
        AttributeError where they are not there."""
        start = int(llm.n_tokens)
        llm._ctx.kv_cache_seq_rm(-1, start, -1)
        llm._batch.set_batch(batch=batch, n_past=start, logits_all=False)
        llm._batch.batch.logits[scored] = True
        llm._ctx.decode(llm._batch)
        llm.input_ids[start : start + len(batch)] = batch
        llm.n_tokens = start + len(batch)
        llm._requires_eval = False
        row = self._lib.llama_get_logits_ith(llm.ctx, scored)
        return np.ctypeslib.as_array(row, shape=(llm.n_vocab(),)).copy()

    def _remember_turn_end(self, tokens: list[int], logits: np.ndarray | None = None) -> float:
        """The turn-end probability after ``tokens[-1]`` (``logits``: that token's; default
        the last decode's), kept for ``tokens``."""
        if logits is None:
            llm = self._require()
            logits = np.ctypeslib.as_array(
                self._lib.llama_get_logits(llm.ctx), shape=(llm.n_vocab(),)
            )
        probability = probability_of(logits, self._turn_ends)
        self._turn_end = (tuple(tokens), probability)
        return probability

    def _reserve(self, max_tokens: int | None) -> int:
        wanted = int(max_tokens or self.sampling.max_tokens)
        return min(wanted, self._n_ctx // 2)

    def generate(
        self, prompt: Prompt, *, cancel: threading.Event, max_tokens: int | None = None
    ) -> Iterator[str]:
        """Stream the answer; see :class:`LlmBackend`. Raises EngineError when not loaded."""
        self._require()
        return self._generate(prompt, cancel, max_tokens)

    def _generate(
        self, prompt: Prompt, cancel: threading.Event, max_tokens: int | None
    ) -> Iterator[str]:
        t0 = time.perf_counter()
        stats = GenerationStats()
        self._last_stats = stats
        limit = int(max_tokens or self.sampling.max_tokens)
        self._generate_waiting.set()  # a running warm() gives way at its next chunk
        try:
            while not self._lock.acquire(timeout=0.02):
                if cancel.is_set():
                    stats.cancelled, stats.stop_reason = True, "cancelled"
                    stats.total_s = time.perf_counter() - t0
                    return
        finally:
            self._generate_waiting.clear()
        try:
            yield from self._decode(prompt, cancel, limit, stats, t0)
        except (RuntimeError, ValueError, OSError) as err:
            raise EngineError(f"LLM generation failed: {err}") from err
        finally:
            stats.total_s = time.perf_counter() - t0
            self._lock.release()

    def _decode(
        self, prompt: Prompt, cancel: threading.Event, limit: int, stats: GenerationStats, t0: float
    ) -> Iterator[str]:
        llm = self._require()
        self._apply_threads(llm)
        tokens, stats.turns_dropped = self._fit(prompt, self._reserve(limit), open_turn=True)
        stats.prompt_tokens = len(tokens)
        # Evaluate the prompt in chunks; Llama.generate then finds it all cached and samples
        # from the logits the last chunk left, without evaluating its last token again (one
        # decode less before the first token: 20-30 ms here in the graph).
        ready, self._answer_ready = self._answer_ready, None
        stats.reused_tokens = self._sync(llm, tokens, cancel.is_set)
        stats.evaluated_tokens = len(tokens) - stats.reused_tokens
        if cancel.is_set():
            stats.evaluated_tokens = llm.n_tokens - stats.reused_tokens
            stats.cancelled, stats.stop_reason = True, "cancelled"
            return
        # All cached: the logits at hand are the last token's only when the end-of-turn
        # score decoded this very prompt last; otherwise they are another's.
        if stats.reused_tokens == len(tokens) and ready != tuple(tokens):
            llm.n_tokens = stats.reused_tokens = len(tokens) - 1
            llm.eval(tokens[-1:])
            stats.evaluated_tokens = 1
        s = self.sampling
        llm.set_seed(self._seed())
        stream = llm.generate(
            tokens,
            top_k=s.top_k,
            top_p=s.top_p,
            temp=s.temperature,
            repeat_penalty=s.repeat_penalty,
        )
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        stop = StopFilter(self.fmt.stop)
        reason = "length"
        try:
            for token in stream:
                if stats.generated_tokens == 0:
                    stats.first_token_s = time.perf_counter() - t0
                stats.generated_tokens += 1
                if cancel.is_set():
                    reason = "cancelled"
                    break
                if self._is_eog(self._vocab, token):
                    reason = "eos"
                    break
                text = stop.feed(decoder.decode(llm.detokenize([token])))
                if text:
                    yield text
                if stop.stopped:
                    reason = "stop"
                    break
                if cancel.is_set():
                    reason = "cancelled"
                    break
                if stats.generated_tokens >= limit:
                    break
                if llm.n_tokens + 1 >= self._n_ctx:
                    reason = "context"
                    break
        finally:
            stream.close()
            _free_sampler(llm)
        stats.stop_reason = reason
        stats.cancelled = reason == "cancelled"
        if not stats.cancelled:
            tail = stop.feed(decoder.decode(b"", final=True)) + stop.flush()
            if tail:
                yield tail


def _free_sampler(llm: Any) -> None:
    """Free the sampler chain ``Llama.generate`` made for this answer, now.

    llama-cpp-python's sampler frees its native chain from a callback that refers back to
    it, a reference cycle only a full garbage collection breaks; in a long-running node those
    are rare, and each chain left waiting held about 0.5 MB: a process answering in a loop grew
    57 MB per 100 answers (see benchmarks/model_memory.py). The next ``generate`` makes a new
    one.
    """
    sampler = getattr(llm, "_sampler", None)
    if sampler is not None:
        sampler.close()
        llm._sampler = None
