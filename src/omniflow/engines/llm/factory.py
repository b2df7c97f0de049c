"""Build the backend that the ``llm.*`` parameters select."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from omniflow.core.params import defaults, validate
from omniflow.engines.llm.base import LlmBackend, Sampling
from omniflow.engines.llm.files import embedded_model_path
from omniflow.engines.llm.llamacpp import LlamaCppBackend
from omniflow.engines.llm.minicpmv import MiniCpmVBackend
from omniflow.engines.llm.params import LLM_PARAMS
from omniflow.engines.llm.remote import RemoteBackend
from omniflow.errors import ConfigError

__all__ = ["make_backend"]


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
    sampling = Sampling()
    sampling.update(merged)
    backend = merged["llm.backend"]
    if backend == "embedded":
        cache_dir = merged["llm.cache_dir"] or None
        return LlamaCppBackend(
            lambda: embedded_model_path(cache_dir),
            n_ctx=merged["llm.n_ctx"],
            threads=merged["llm.threads"],
            seed=merged["llm.seed"],
            sampling=sampling,
            name="embedded",
        )
    if backend == "gguf":
        return LlamaCppBackend(
            merged["llm.model_path"],
            n_ctx=merged["llm.n_ctx"],
            threads=merged["llm.threads"],
            seed=merged["llm.seed"],
            sampling=sampling,
            name="gguf",
        )
    if backend == "minicpmv":
        return MiniCpmVBackend(
            merged["llm.model_path"],
            merged["llm.mmproj_path"],
            n_ctx=merged["llm.n_ctx"],
            threads=merged["llm.threads"],
            seed=merged["llm.seed"],
            sampling=sampling,
        )
    key_env = merged["llm.remote.api_key_env"]
    api_key = os.environ.get(key_env, "") if key_env else ""
    if key_env and not api_key:
        raise ConfigError(f"llm.remote.api_key_env names ${key_env}, which is not set")
    return RemoteBackend(
        merged["llm.remote.url"],
        model=merged["llm.remote.model"],
        api=merged["llm.remote.api"],
        api_key=api_key,
        timeout_s=merged["llm.remote.timeout_s"],
        images=merged["llm.remote.images"],
        sampling=sampling,
    )
