"""The ``remote`` backend: an OpenAI-compatible server over HTTP, with the standard library.

``/v1/chat/completions`` or ``/v1/completions`` (llama-cpp-python's server, llama-server,
vLLM); the answer streams as server-sent events (:mod:`omniflow.engines.llm.sse`), and
cancelling closes the connection.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
import urllib.parse
from collections.abc import Iterator
from types import MappingProxyType
from typing import Any

from omniflow.core.prompt import DEFAULT_FORMAT, Prompt, PromptFormat
from omniflow.engines.llm.base import GenerationStats, LlmBackend, Sampling
from omniflow.engines.llm.chat import chat_messages, stream_chat_chunks
from omniflow.engines.llm.sse import server_sent_events
from omniflow.errors import ConfigError, EngineError

__all__ = ["RemoteBackend"]

_NOT_SENT = "not a field of the OpenAI API, which is all it sends; set it on the server"


class RemoteBackend(LlmBackend):
    """Streams from an OpenAI-compatible HTTP server; cancelling closes the connection.

    ``api="chat"`` posts ``/v1/chat/completions`` with :func:`chat_messages` (the server
    applies the model's chat template); ``api="completions"`` posts ``/v1/completions`` with
    ``fmt``'s text and stop strings (a base model behind the server). A server that is down,
    answers with an HTTP error, sends something that is not a stream of JSON events or is
    silent for ``timeout_s`` raises EngineError with the URL and what came back. It sends
    ``max_tokens``, ``temperature`` and ``top_p``; the other live parameters are the
    server's (:attr:`not_applied`).
    """

    name = "remote"
    not_applied = MappingProxyType(
        {
            "llm.threads": "the server decides",
            "llm.prompt_chunk": "the server evaluates the prompt",
            "llm.top_k": _NOT_SENT,
            "llm.repeat_penalty": _NOT_SENT,
        }
    )

    def __init__(
        self,
        url: str,
        *,
        model: str = "",
        api: str = "chat",
        api_key: str = "",
        timeout_s: float = 10.0,
        images: bool = False,
        sampling: Sampling | None = None,
        fmt: PromptFormat = DEFAULT_FORMAT,
    ) -> None:
        super().__init__(sampling)
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
        self.fmt = fmt
        self._loaded = False

    def _endpoint(self, name: str) -> str:
        return f"{self._parsed.scheme}://{self._parsed.netloc}{self._base_path}/{name}"

    def _connect(self) -> http.client.HTTPConnection:
        cls = (
            http.client.HTTPSConnection
            if self._parsed.scheme == "https"
            else http.client.HTTPConnection
        )
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
            raise EngineError(
                f"remote LLM server at {url} is not reachable: {err!r} (is it "
                f"running? check llm.remote.url)"
            ) from err
        finally:
            conn.close()
        if response.status != 200:
            raise EngineError(
                f"remote LLM server at {url} answered HTTP {response.status}: {body[:200]!r}"
            )
        try:
            json.loads(body)
        except ValueError as err:
            raise EngineError(
                f"remote LLM server at {url} did not answer JSON: {body[:200]!r}"
            ) from err
        self._loaded = True

    def close(self) -> None:
        self._loaded = False

    @property
    def loaded(self) -> bool:
        return self._loaded

    def generate(
        self, prompt: Prompt, *, cancel: threading.Event, max_tokens: int | None = None
    ) -> Iterator[str]:
        return self._stream(prompt, cancel, int(max_tokens or self.sampling.max_tokens))

    def _body(self, prompt: Prompt, limit: int) -> tuple[str, dict[str, Any]]:
        s = self.sampling
        body: dict[str, Any] = {
            "stream": True,
            "max_tokens": limit,
            "temperature": s.temperature,
            "top_p": s.top_p,
        }
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
                conn.request(
                    "POST",
                    f"{self._base_path}/{name}",
                    body=json.dumps(body),
                    headers=self._headers(),
                )
                watcher.start()
                response = conn.getresponse()
            except (OSError, http.client.HTTPException) as err:
                if cancel.is_set():
                    stats.cancelled, stats.stop_reason = True, "cancelled"
                    return
                raise EngineError(
                    f"remote LLM request to {url} failed: {err!r} (is the "
                    f"server running? check llm.remote.url)"
                ) from err
            if response.status != 200:
                text = response.read(500)
                raise EngineError(
                    f"remote LLM server at {url} answered HTTP {response.status}: {text[:300]!r}"
                )
            events = server_sent_events(response, url, cancel, self._timeout)
            yield from stream_chat_chunks(events, cancel, stats, t0)
        finally:
            done.set()
            conn.close()
            stats.total_s = time.perf_counter() - t0
