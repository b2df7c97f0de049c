"""Live LLM parameters on every backend, and the OpenMP wait policy (no model needed, except
for the one test that loads the tiny GGUF in a fresh process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from omniflow.engines.llm import (
    LLM_BACKENDS,
    LlmBackend,
    Sampling,
    make_backend,
    set_openmp_wait_policy,
)
from omniflow.engines.llm.params import BACKEND_LIVE_PARAMS
from omniflow.errors import ConfigError

#: A valid value other than the default for every live parameter a backend applies.
NEW_VALUES = {
    "llm.threads": 3,
    "llm.max_tokens": 7,
    "llm.temperature": 0.5,
    "llm.top_p": 0.5,
    "llm.top_k": 5,
    "llm.repeat_penalty": 1.3,
    "llm.prompt_chunk": 8,
}
#: What each backend refuses; everything else it applies.
REFUSED = {
    "embedded": set(),
    "gguf": set(),
    "minicpmv": {"llm.prompt_chunk"},
    "remote": {"llm.threads", "llm.prompt_chunk", "llm.top_k", "llm.repeat_penalty"},
}


def _setting(backend: LlmBackend, name: str) -> object:
    """What the backend will use at its next generation for ``name``."""
    if name == "llm.threads":
        return getattr(backend, "threads", None)  # the remote backend has no threads
    return getattr(backend.sampling, name.removeprefix("llm."))


def test_the_tables_cover_every_backend_and_live_parameter() -> None:
    assert set(NEW_VALUES) == BACKEND_LIVE_PARAMS
    assert set(REFUSED) == set(LLM_BACKENDS)


@pytest.mark.parametrize("name", sorted(BACKEND_LIVE_PARAMS))
@pytest.mark.parametrize("kind", LLM_BACKENDS)
def test_every_live_parameter_is_applied_or_refused_naming_the_backend(
    kind: str, name: str
) -> None:
    backend = make_backend({"llm.backend": kind})
    before = _setting(backend, name)
    if name in REFUSED[kind]:
        with pytest.raises(ConfigError, match=f"{name} is not applied by the {kind} backend"):
            backend.update({name: NEW_VALUES[name]})
        assert _setting(backend, name) == before
    else:
        assert before != NEW_VALUES[name]
        backend.update({name: NEW_VALUES[name]})
        assert _setting(backend, name) == NEW_VALUES[name]


def test_the_remote_backend_says_why_it_refuses_threads() -> None:
    backend = make_backend({"llm.backend": "remote"})
    with pytest.raises(ConfigError) as info:
        backend.update({"llm.threads": 1})
    assert str(info.value) == "llm.threads is not applied by the remote backend: the server decides"


def test_a_refused_change_applies_nothing() -> None:
    backend = make_backend({"llm.backend": "remote"})
    with pytest.raises(ConfigError, match="llm.top_k"):
        backend.update({"llm.temperature": 0.5, "llm.top_k": 5})
    assert backend.sampling.temperature == 0.0
    with pytest.raises(ConfigError, match="llm.temperature"):  # invalid value, any backend
        make_backend({"llm.backend": "gguf"}).update({"llm.temperature": 9.0})


@pytest.mark.parametrize("kind", LLM_BACKENDS)
def test_the_system_prompt_is_the_callers(kind: str) -> None:
    """Every backend renders ``Prompt.system``; the parameter itself is the caller's."""
    backend = make_backend({"llm.backend": kind})
    backend.update({"llm.system_prompt": "You are a lighthouse.", "llm.n_ctx": 512})
    assert backend.sampling == Sampling()
    assert not hasattr(backend.sampling, "system_prompt")


def test_the_openmp_wait_policy_is_passive_unless_the_user_chose() -> None:
    env: dict[str, str] = {}
    assert set_openmp_wait_policy(env) == "PASSIVE" and env == {"OMP_WAIT_POLICY": "PASSIVE"}
    env = {"OMP_WAIT_POLICY": "ACTIVE"}
    assert set_openmp_wait_policy(env) == "ACTIVE" and env == {"OMP_WAIT_POLICY": "ACTIVE"}


_PROBE = """
import json, os, sys
import omniflow.engines.llm as llm
after_import = os.environ.get("OMP_WAIT_POLICY")
seen = []

class Spy:  # records the policy at the moment llama_cpp is first imported
    def find_spec(self, name, path=None, target=None):
        if name == "llama_cpp":
            seen.append(os.environ.get("OMP_WAIT_POLICY"))

sys.meta_path.insert(0, Spy())
backend = llm.LlamaCppBackend(sys.argv[1], n_ctx=128, threads=1)
backend.load()
backend.close()
print(json.dumps({"after_import": after_import, "at_llama_import": seen}))
"""


@pytest.mark.parametrize("user_policy", [None, "ACTIVE"])
def test_import_changes_no_environment_and_load_sets_the_policy_before_llama_cpp(
    tmp_path: Path, user_policy: str | None
) -> None:
    pytest.importorskip("llama_cpp")
    from tiny_gguf import write_tiny_gguf

    model = write_tiny_gguf(tmp_path / "tiny.gguf")
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if user_policy:
        env["OMP_WAIT_POLICY"] = user_policy
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, str(model)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result["after_import"] == user_policy  # importing the package set nothing
    assert result["at_llama_import"] == [user_policy or "PASSIVE"]
