"""The ``minicpmv`` backend: MiniCPM-V / MiniCPM-o with its mmproj, frames in as images."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import MappingProxyType

from omniflow.core.prompt import Prompt
from omniflow.engines.llm.base import GenerationStats, Sampling
from omniflow.engines.llm.chat import chat_messages, stream_chat_chunks
from omniflow.engines.llm.files import check_gguf
from omniflow.engines.llm.inprocess import InProcessBackend
from omniflow.errors import EngineError

__all__ = ["MiniCpmVBackend"]


class MiniCpmVBackend(InProcessBackend):
    """MiniCPM-V 2.6 / MiniCPM-o GGUF plus its mmproj through ``MiniCPMv26ChatHandler``.

    The frames the association chose (``prompt.images``) go in as images, the scene text as
    text. The chat handler evaluates the images and the prompt in one call, so cancellation
    takes effect from the first generated token on (not within the prompt), and there is no
    ``warm`` (the handler keeps its own prefix cache). ``llm.threads`` changes the threads
    that evaluate the prompt and decode from the next generation on; the projector encodes
    images with the threads it was loaded with.
    """

    name = "minicpmv"
    not_applied = MappingProxyType(
        {
            "llm.prompt_chunk": "its chat handler evaluates the images and the prompt in one call",
        }
    )

    def __init__(
        self,
        model_path: str | Path,
        mmproj_path: str | Path,
        *,
        n_ctx: int = 4096,
        threads: int = 2,
        seed: int = -1,
        sampling: Sampling | None = None,
    ) -> None:
        super().__init__(n_ctx=n_ctx, threads=threads, seed=seed, sampling=sampling)
        self._model_path = model_path
        self._mmproj_path = mmproj_path

    def load(self) -> None:
        if self._llm is not None:
            return
        model = check_gguf(self._model_path, "MiniCPM-V model")
        if not str(self._mmproj_path):
            raise EngineError(
                "backend 'minicpmv' needs its vision projector: set llm.mmproj_path to the "
                "mmproj .gguf that belongs to the model (for a text-only model use backend "
                "'gguf')"
            )
        mmproj = check_gguf(self._mmproj_path, "MiniCPM-V mmproj")
        self._import()
        from llama_cpp.llama_chat_format import MiniCPMv26ChatHandler

        try:
            handler = MiniCPMv26ChatHandler(clip_model_path=str(mmproj), verbose=False)
            llm = self._new_llama(model, chat_handler=handler)
        except (ValueError, RuntimeError, OSError) as err:
            raise EngineError(
                f"llama.cpp could not load the MiniCPM-V model {model} with mmproj {mmproj}: {err}"
            ) from err
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
                    f"model"
                ) from err
        self._llm = llm

    def generate(
        self, prompt: Prompt, *, cancel: threading.Event, max_tokens: int | None = None
    ) -> Iterator[str]:
        self._require()
        return self._stream(prompt, cancel, int(max_tokens or self.sampling.max_tokens))

    def _stream(self, prompt: Prompt, cancel: threading.Event, limit: int) -> Iterator[str]:
        t0 = time.perf_counter()
        stats = GenerationStats(stop_reason="cancelled", cancelled=True)
        self._last_stats = stats
        with self._lock:
            if cancel.is_set():
                return
            llm = self._require()  # closed while this generation waited for the lock?
            s = self.sampling
            try:
                self._apply_threads(llm)
                chunks = llm.create_chat_completion(
                    messages=chat_messages(prompt),
                    stream=True,
                    max_tokens=limit,
                    temperature=s.temperature,
                    top_p=s.top_p,
                    top_k=s.top_k,
                    repeat_penalty=s.repeat_penalty,
                )
                yield from stream_chat_chunks(chunks, cancel, stats, t0)
            except (RuntimeError, ValueError, OSError) as err:
                raise EngineError(f"MiniCPM-V generation failed: {err}") from err
            finally:
                stats.total_s = time.perf_counter() - t0
