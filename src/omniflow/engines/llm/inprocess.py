"""What the in-process backends share: llama-cpp-python, its OpenMP threads, load and close.

llama.cpp's CPU threads are OpenMP threads, and by default an idle one spins. When other
processes compete for the cores (the rest of the graph does), 2 threads took 8-18 s instead
of ~1 s for 32 tokens; passive waiting fixes that, at a cost on an idle machine
(:mod:`omniflow.engines.openmp`, benchmarks/README.md). libgomp reads ``OMP_WAIT_POLICY``
once, when it is loaded (the first ``import llama_cpp``), so :func:`import_llama` sets it
first (:func:`~omniflow.engines.openmp.set_openmp_wait_policy`); a process that imports
llama_cpp itself calls that function before.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from omniflow.engines.llm.base import LlmBackend, Sampling
from omniflow.engines.openmp import set_openmp_wait_policy
from omniflow.errors import EngineError

__all__ = ["InProcessBackend", "import_llama"]


def import_llama() -> Any:
    """The ``llama_cpp`` module, with the OpenMP wait policy set before its first import."""
    set_openmp_wait_policy()
    try:
        import llama_cpp
    except ImportError as err:
        raise EngineError(
            "the LLM backends 'embedded', 'gguf' and 'minicpmv' need llama-cpp-python "
            "(requirements/runtime.txt; it compiles llama.cpp on install): "
            "pip install llama-cpp-python"
        ) from err
    return llama_cpp


class InProcessBackend(LlmBackend):
    """A GGUF model that llama-cpp-python runs in this process.

    Holds the ``llama_cpp.Llama`` (``self._llm``, set by a subclass's :meth:`load` after
    :meth:`_import`) and the lock that every use of it holds; :meth:`close` and
    :attr:`loaded` are the same for all. ``llm.threads`` changes without a reload: it takes
    effect at the next evaluation (:meth:`_apply_threads`, called under the lock).
    """

    def __init__(self, *, n_ctx: int, threads: int, seed: int, sampling: Sampling | None) -> None:
        super().__init__(sampling)
        self._n_ctx = int(n_ctx)
        self._threads = int(threads)
        self._seed_value = int(seed)
        self._llm: Any = None
        self._lib: Any = None
        self._lock = threading.Lock()

    def _import(self) -> Any:
        """llama_cpp, imported for :meth:`load` (see :func:`import_llama`)."""
        self._lib = import_llama()
        return self._lib

    def _new_llama(self, model_path: Any, **options: Any) -> Any:
        """A ``llama_cpp.Llama`` for ``model_path`` with this backend's context size, threads
        and seed (``options`` add backend-specific arguments); llama.cpp's errors propagate."""
        return self._import().Llama(
            model_path=str(model_path),
            n_ctx=self._n_ctx,
            n_threads=self._threads,
            n_threads_batch=self._threads,
            seed=self._seed(),
            verbose=False,
            **options,
        )

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
    def threads(self) -> int:
        """CPU threads of the next evaluation."""
        return self._threads

    def set_threads(self, threads: int) -> None:
        """Use ``threads`` CPU threads from the next evaluation on (no reload)."""
        self._threads = int(threads)

    def _apply(self, values: Mapping[str, Any]) -> None:
        super()._apply(values)
        if "llm.threads" in values:
            self.set_threads(int(values["llm.threads"]))

    def _apply_threads(self, llm: Any) -> None:
        if llm.n_threads != self._threads:
            self._lib.llama_set_n_threads(llm.ctx, self._threads, self._threads)
            llm.n_threads = llm.n_threads_batch = self._threads

    def _seed(self) -> int:
        """The seed llama.cpp is given: ``llm.seed``, or its random default for -1."""
        return self._lib.LLAMA_DEFAULT_SEED if self._seed_value < 0 else self._seed_value

    def _require(self) -> Any:
        if self._llm is None:
            raise EngineError(f"LLM backend '{self.name}' is not loaded: call load() first")
        return self._llm
