"""Build the backend that the ``llm.*`` parameters select."""

from __future__ import annotations

import os
import re
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

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


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
    if key_env and not _ENV_NAME.fullmatch(key_env):
        # Not echoed: a key pasted here by mistake must not reach the log.
        raise ConfigError(
            "llm.remote.api_key_env must be the name of an environment variable (letters, "
            "digits and _, such as OPENAI_API_KEY), not the key itself; the value given is "
            "not shown"
        )
    api_key = os.environ.get(key_env, "") if key_env else ""
    if key_env and not api_key:
        raise ConfigError(
            f"llm.remote.api_key_env names ${key_env}, which is not set (or empty) in the "
            "node's environment"
        )
    return RemoteBackend(
        merged["llm.remote.url"],
        model=merged["llm.remote.model"],
        api=merged["llm.remote.api"],
        api_key=api_key,
        key_source=f"the API key in ${key_env}",
        ca_bundle=merged["llm.remote.ca_bundle"],
        tls_verify=merged["llm.remote.tls_verify"],
        timeout_s=merged["llm.remote.timeout_s"],
        images=merged["llm.remote.images"],
        sampling=sampling,
    )
