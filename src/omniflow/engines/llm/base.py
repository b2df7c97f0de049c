"""What every language-model backend is: :class:`LlmBackend`, its live settings and stats."""

from __future__ import annotations

import abc
import dataclasses
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar

from omniflow.core.params import validate
from omniflow.core.prompt import Prompt
from omniflow.engines.llm.params import BACKEND_LIVE_PARAMS, LLM_PARAMS
from omniflow.errors import ConfigError

__all__ = ["GenerationStats", "LlmBackend", "Sampling"]


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


@dataclass
class Sampling:
    """The live sampling settings of a backend: ``llm.<field>`` parameters.

    Changed by :meth:`LlmBackend.update`; read at the start of every generation. The system
    text is not here: it is part of each :class:`~omniflow.core.prompt.Prompt`.
    """

    max_tokens: int = 48
    temperature: float = 0.0
    top_p: float = 0.9
    top_k: int = 40
    repeat_penalty: float = 1.1
    prompt_chunk: int = 32

    def update(self, values: Mapping[str, Any]) -> None:
        """Take the values of ``llm.<field>`` names; other names are left alone."""
        for field in dataclasses.fields(self):
            name = f"llm.{field.name}"
            if name in values:
                setattr(self, field.name, values[name])


class LlmBackend(abc.ABC):
    """A language model that streams answers and can be stopped between tokens.

    Not thread-safe for concurrent generations: one :meth:`generate` at a time (a second
    waits for the first to finish, checking its own cancel event while it waits). ``warm``
    may be called from another thread: it does nothing while a generation runs.
    ``sampling`` holds the live settings (:meth:`update` changes them).
    """

    name: str = "llm"

    #: Live parameters (``BACKEND_LIVE_PARAMS``) this backend cannot apply, each with the
    #: reason; :meth:`update` refuses a change of any of them.
    not_applied: ClassVar[Mapping[str, str]] = MappingProxyType({})

    #: What in this backend's settings puts the user at risk (TLS checks turned off, a key
    #: sent in clear text), for the owner to log and report; empty when nothing does.
    security_warnings: tuple[str, ...] = ()

    def __init__(self, sampling: Sampling | None = None) -> None:
        self._last_stats: GenerationStats | None = None
        self.sampling = sampling or Sampling()

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

    def turn_end_probability(
        self, prompt: Prompt, cancel: threading.Event | None = None
    ) -> float | None:
        """How likely ``prompt.user`` (the user's words so far) ends the user's turn: the
        model's probability that the user's sentence or line ends right after them. None when this
        backend cannot tell (no local model), or when ``cancel`` was set before the answer.
        """
        return None

    @abc.abstractmethod
    def generate(
        self, prompt: Prompt, *, cancel: threading.Event, max_tokens: int | None = None
    ) -> Iterator[str]:
        """Yield the answer's text deltas as they decode; stop early when ``cancel`` is set."""

    @property
    def last_stats(self) -> GenerationStats | None:
        """The statistics of the last :meth:`generate` (filled as it runs)."""
        return self._last_stats

    def update(self, values: Mapping[str, Any]) -> None:
        """Apply live parameters (``llm.*`` names of LLM_PARAMS with ``live=True``).

        Takes effect from the next generation. An invalid value, or a parameter this backend
        does not apply (:attr:`not_applied`), raises ConfigError naming it and the backend,
        and nothing is applied. ``llm.system_prompt`` and names that are not live are
        accepted and left alone: the system text is the caller's, in every Prompt.
        """
        problems = validate(LLM_PARAMS, values)
        problems += [
            f"{name} is not applied by the {self.name} backend: {why}"
            for name, why in self.not_applied.items()
            if name in values
        ]
        if problems:
            raise ConfigError("; ".join(problems))
        self._apply({name: value for name, value in values.items() if name in BACKEND_LIVE_PARAMS})

    def _apply(self, values: Mapping[str, Any]) -> None:
        """Apply validated live values; a backend that reads more than ``sampling`` (such as
        ``llm.threads``) extends this."""
        self.sampling.update(values)
