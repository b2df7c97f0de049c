"""Language-model backends: stream an answer token by token, stop at once when asked.

Every backend turns a :class:`~omniflow.core.prompt.Prompt` into a stream of text deltas
(:meth:`LlmBackend.generate`) that stops between two tokens when the caller's cancel event is
set (barge-in), and fills :class:`GenerationStats` for every call.

- :class:`LlamaCppBackend` (``embedded``: Gemma 3 270M Q4_K_M assembled from its PyPI package;
  ``gguf``: any GGUF by path) runs llama-cpp-python in process, evaluating prompts in
  cancellable chunks and reusing the KV cache's common prefix across turns (``llamacpp``).
- :class:`MiniCpmVBackend` (``minicpmv``) runs a MiniCPM-V / MiniCPM-o GGUF with its mmproj
  through llama-cpp-python's MiniCPM-V chat handler; the prompt's frames go in as images
  (``minicpmv``).
- :class:`RemoteBackend` (``remote``) streams from an OpenAI-compatible server
  (``/v1/chat/completions`` or ``/v1/completions``; llama-cpp-python's server, llama-server,
  vLLM) over HTTP with the standard library; cancelling closes the connection (``remote``,
  with the event-stream parser in ``sse``).

The two in-process backends share ``inprocess.InProcessBackend`` (model, lock, threads,
close); model files are checked and the embedded model assembled in ``files``; chat messages
in ``chat``; stop strings in ``stop``; the parameters in ``params``; :func:`make_backend`
in ``factory``. Importing this package changes nothing in the process: the OpenMP wait
policy is set when a backend loads llama.cpp (:func:`set_openmp_wait_policy`).

Live parameters (:meth:`LlmBackend.update`): each backend applies every one of them from the
next generation, or refuses a change with a ConfigError naming the parameter and itself
(:attr:`LlmBackend.not_applied`: ``remote`` refuses ``llm.threads``, ``llm.prompt_chunk``,
``llm.top_k`` and ``llm.repeat_penalty``; ``minicpmv`` refuses ``llm.prompt_chunk``).
``llm.system_prompt`` is the caller's: it is the ``system`` of the Prompt it builds.

Stop strings never reach the caller: text that could be the start of one is held back until
it is clear that it is not. A prompt longer than the context drops its oldest turns
(:func:`~omniflow.core.prompt.fit_history`) instead of failing. Library errors become
:class:`~omniflow.errors.EngineError` (model files) or :class:`~omniflow.errors.ConfigError`
(parameter values), with the path or URL and what was expected.
"""

from omniflow.engines.llm.base import GenerationStats, LlmBackend, Sampling
from omniflow.engines.llm.chat import chat_messages, image_data_uri
from omniflow.engines.llm.factory import make_backend
from omniflow.engines.llm.files import GGUF_MAGIC, check_gguf, embedded_model_path
from omniflow.engines.llm.llamacpp import LlamaCppBackend
from omniflow.engines.llm.minicpmv import MiniCpmVBackend
from omniflow.engines.llm.params import DEFAULT_SYSTEM_PROMPT, LLM_BACKENDS, LLM_PARAMS
from omniflow.engines.llm.remote import RemoteBackend
from omniflow.engines.llm.stop import StopFilter
from omniflow.engines.openmp import set_openmp_wait_policy

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
    "chat_messages",
    "check_gguf",
    "embedded_model_path",
    "image_data_uri",
    "make_backend",
    "set_openmp_wait_policy",
]
