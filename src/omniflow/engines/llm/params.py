"""The language model's parameters (``llm.*``): names, defaults, what each backend reads."""

from __future__ import annotations

from omniflow.core.params import ParamSpec

__all__ = ["BACKEND_LIVE_PARAMS", "DEFAULT_SYSTEM_PROMPT", "LLM_BACKENDS", "LLM_PARAMS"]

LLM_BACKENDS: tuple[str, ...] = ("embedded", "gguf", "minicpmv", "remote")

#: Chosen on the real Gemma 3 270M (a base model) among several persona texts: one worked
#: example of a short, correct answer does more than any instruction (benchmarks/README.md).
DEFAULT_SYSTEM_PROMPT = (
    "A conversation between a user and a friendly, helpful robot. The robot answers each "
    "question correctly in one short sentence.\n\n"
    "User: What is two plus two?\n"
    "Robot: Two plus two is four."
)

LLM_PARAMS: tuple[ParamSpec, ...] = (
    ParamSpec(
        "llm.backend",
        "embedded",
        "Language model: 'embedded' = Gemma 3 270M Q4_K_M "
        "from its PyPI package, 'gguf' = any GGUF file (llm.model_path), 'minicpmv' = "
        "a MiniCPM-V/MiniCPM-o GGUF with its mmproj (images), 'remote' = an "
        "OpenAI-compatible server (llm.remote.url)",
        choices=LLM_BACKENDS,
    ),
    ParamSpec("llm.model_path", "", "GGUF model file for the backends 'gguf' and 'minicpmv'"),
    ParamSpec("llm.mmproj_path", "", "Vision projector (mmproj) GGUF for backend 'minicpmv'"),
    ParamSpec(
        "llm.cache_dir",
        "",
        "Where the embedded Gemma is assembled once (about 250 MB, "
        "sha256-checked); empty = $XDG_CACHE_HOME/omniflow or ~/.cache/omniflow",
    ),
    ParamSpec(
        "llm.n_ctx",
        2048,
        "Context size: prompt plus answer; older turns are dropped to fit",
        unit="tokens",
        minimum=128,
        maximum=131072,
    ),
    ParamSpec(
        "llm.threads",
        2,
        "CPU threads for decoding (the power manager lowers it); "
        "backend 'remote' refuses a change: the server decides",
        minimum=1,
        maximum=64,
        live=True,
    ),
    ParamSpec(
        "llm.max_tokens", 48, "Longest answer", unit="tokens", minimum=1, maximum=4096, live=True
    ),
    ParamSpec(
        "llm.temperature",
        0.0,
        "Sampling temperature; 0 = always the most likely "
        "token (the most accurate short answers from the small embedded model)",
        minimum=0.0,
        maximum=2.0,
        live=True,
    ),
    ParamSpec(
        "llm.top_p",
        0.9,
        "Nucleus sampling: keep the most likely tokens up to this probability mass",
        minimum=0.0,
        maximum=1.0,
        live=True,
    ),
    ParamSpec(
        "llm.top_k",
        40,
        "Keep only the k most likely tokens; 0 = no limit (backend "
        "'remote' refuses a change: not an OpenAI API field)",
        minimum=0,
        maximum=1000,
        live=True,
    ),
    ParamSpec(
        "llm.repeat_penalty",
        1.1,
        "Penalty on recently generated tokens; 1 = none "
        "(backend 'remote' refuses a change: not an OpenAI API field)",
        minimum=1.0,
        maximum=2.0,
        live=True,
    ),
    ParamSpec(
        "llm.seed",
        -1,
        "Sampling seed; -1 = a different one every start",
        minimum=-1,
        maximum=2**31 - 1,
    ),
    ParamSpec(
        "llm.prompt_chunk",
        32,
        "Prompt tokens evaluated between two checks for "
        "cancellation: smaller stops sooner during a long prompt, larger evaluates "
        "prompts faster (backends 'embedded' and 'gguf'; the others refuse a change: "
        "they evaluate a prompt in one call)",
        unit="tokens",
        minimum=1,
        maximum=512,
        live=True,
    ),
    ParamSpec(
        "llm.system_prompt",
        DEFAULT_SYSTEM_PROMPT,
        "Persona and instructions at the start of every prompt",
        live=True,
    ),
    ParamSpec(
        "llm.remote.url",
        "http://127.0.0.1:8080",
        "Base URL of the OpenAI-compatible "
        "server for backend 'remote' (with or without a trailing /v1)",
    ),
    ParamSpec(
        "llm.remote.model", "", "Model name sent to the remote server (empty: the server's default)"
    ),
    ParamSpec(
        "llm.remote.api",
        "chat",
        "Remote endpoint: 'chat' = /v1/chat/completions "
        "(the server applies the model's chat template), 'completions' = "
        "/v1/completions with omniflow's own prompt format and stop strings (base "
        "models)",
        choices=("chat", "completions"),
    ),
    ParamSpec(
        "llm.remote.api_key_env",
        "",
        "Name of the environment variable that holds "
        "the remote server's API key (sent as a Bearer token; never logged or reported); "
        "empty = no key",
    ),
    ParamSpec(
        "llm.remote.ca_bundle",
        "",
        "PEM file of the CA(s) that signed the remote server's TLS certificate, checked "
        "instead of the system's trust store (a server with its own CA); empty = the "
        "system's trust store",
    ),
    ParamSpec(
        "llm.remote.tls_verify",
        True,
        "Check the remote server's TLS certificate and host name; false lets anyone on the "
        "network pose as the server (warned at start and in diagnostics): prefer "
        "llm.remote.ca_bundle",
    ),
    ParamSpec(
        "llm.remote.timeout_s",
        10.0,
        "Longest wait for the remote server to connect or to send the next piece of the answer",
        unit="s",
        minimum=0.1,
        maximum=600.0,
    ),
    ParamSpec(
        "llm.remote.images",
        False,
        "Send the prompt's frames to the remote server as "
        "image content (only for a multimodal model behind api 'chat')",
    ),
)

#: The live parameters a backend applies itself (:meth:`LlmBackend.update`): each backend
#: either applies every one of them or refuses a change naming itself. ``llm.system_prompt``
#: is live too but belongs to the caller: it is the ``system`` of every
#: :class:`~omniflow.core.prompt.Prompt` the caller builds, which every backend renders.
BACKEND_LIVE_PARAMS: frozenset[str] = frozenset(
    spec.name for spec in LLM_PARAMS if spec.live and spec.name != "llm.system_prompt"
)
