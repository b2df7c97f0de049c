"""The ``remote`` backend: an OpenAI-compatible server over HTTP, with the standard library.

``/v1/chat/completions`` or ``/v1/completions`` (llama-cpp-python's server, llama-server,
vLLM); the answer streams as server-sent events (:mod:`omniflow.engines.llm.sse`), and
cancelling closes the connection.

Security: only ``http://`` and ``https://`` URLs, without a user name or password in them
(parameters are readable by every node of the graph); the API key comes from an environment
variable and never appears in an error or anything else this module produces, also when a
server echoes it back; TLS certificates are checked against the system's trust store or
``ca_bundle``, and turning the check off is explicit and reported
(:attr:`RemoteBackend.security_warnings`).
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import json
import socket
import ssl
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
    silent for ``timeout_s`` raises EngineError with the URL and what came back (the API key
    replaced by ``***``). It sends ``max_tokens``, ``temperature`` and ``top_p``; the other
    live parameters are the server's (:attr:`not_applied`).

    ``https://`` URLs are checked against ``ca_bundle`` (a PEM file) or the system's trust
    store; ``tls_verify=False`` turns the check off and says so in
    :attr:`security_warnings`, as does a key sent over plain http to another host.
    ConfigError, never quoting the key, for a URL that is not http(s) or holds credentials,
    a key that cannot go into a header, or an unreadable ``ca_bundle``.
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
        key_source: str = "the API key",
        ca_bundle: str = "",
        tls_verify: bool = True,
        timeout_s: float = 10.0,
        images: bool = False,
        sampling: Sampling | None = None,
        fmt: PromptFormat = DEFAULT_FORMAT,
    ) -> None:
        super().__init__(sampling)
        parsed = _check_url(url)
        if api not in ("chat", "completions"):
            raise ConfigError(f"llm.remote.api must be 'chat' or 'completions'; got {api!r}")
        _check_api_key(api_key, key_source)
        self._parsed = parsed
        base = parsed.path.rstrip("/")
        self._base_path = base if base.endswith("/v1") else base + "/v1"
        self.url = url
        self._model = model
        self._api = api
        self._api_key = api_key
        self._tls = _tls_context(parsed, ca_bundle, tls_verify)
        self.security_warnings = _risks(parsed, bool(api_key), tls_verify)
        self._timeout = float(timeout_s)
        self._images = images
        self.fmt = fmt
        self._loaded = False

    def _endpoint(self, name: str) -> str:
        return f"{self._parsed.scheme}://{self._parsed.netloc}{self._base_path}/{name}"

    def _connect(self) -> http.client.HTTPConnection:
        if self._tls is not None:
            return http.client.HTTPSConnection(
                self._parsed.hostname, self._parsed.port, timeout=self._timeout, context=self._tls
            )
        return http.client.HTTPConnection(
            self._parsed.hostname, self._parsed.port, timeout=self._timeout
        )

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def _shown(self, text: str | bytes) -> str:
        """What the server sent, fit for an error message: the API key replaced by ``***``."""
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        return text.replace(self._api_key, "***") if self._api_key else text

    def _unreachable(self, url: str, err: Exception) -> EngineError:
        """The error for a connection that failed, naming a TLS refusal as such."""
        if isinstance(err, ssl.SSLCertVerificationError):
            return EngineError(
                f"remote LLM server at {url} has a TLS certificate this node does not trust "
                f"({err.verify_message}); if your own CA signed it, set llm.remote.ca_bundle "
                "to that CA's PEM file"
            )
        if isinstance(err, ssl.SSLError):
            return EngineError(
                f"TLS with the remote LLM server at {url} failed: {err.reason or err} (does it "
                "serve https on that port?)"
            )
        return EngineError(
            f"remote LLM server at {url} is not reachable: {err!r} (is it running? check "
            "llm.remote.url)"
        )

    def load(self) -> None:
        """Check that the server answers ``GET /v1/models``."""
        url = self._endpoint("models")
        conn = self._connect()
        try:
            conn.request("GET", f"{self._base_path}/models", headers=self._headers())
            response = conn.getresponse()
            body = response.read(2000)
        except (OSError, http.client.HTTPException) as err:
            raise self._unreachable(url, err) from err
        finally:
            conn.close()
        if response.status != 200:
            raise EngineError(
                f"remote LLM server at {url} answered HTTP {response.status}: "
                f"{self._shown(body[:200])!r}"
            )
        try:
            json.loads(body)
        except ValueError:
            raise EngineError(
                f"remote LLM server at {url} did not answer JSON: {self._shown(body[:200])!r}"
            ) from None
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
                if isinstance(err, ssl.SSLError):
                    raise self._unreachable(url, err) from err
                raise EngineError(
                    f"remote LLM request to {url} failed: {err!r} (is the "
                    f"server running? check llm.remote.url)"
                ) from err
            if response.status != 200:
                text = response.read(500)
                raise EngineError(
                    f"remote LLM server at {url} answered HTTP {response.status}: "
                    f"{self._shown(text[:300])!r}"
                )
            reader = _Redacting(response, self._api_key) if self._api_key else response
            events = server_sent_events(reader, url, cancel, self._timeout)
            yield from stream_chat_chunks(events, cancel, stats, t0)
        finally:
            done.set()
            conn.close()
            stats.total_s = time.perf_counter() - t0


class _Redacting:
    """A line reader over the server's stream with the API key replaced by ``***``, so that
    nothing quoted from the stream (an error event, a broken line) can carry it."""

    def __init__(self, response: http.client.HTTPResponse, key: str) -> None:
        self._response = response
        self._key = key.encode()

    def readline(self, limit: int = -1, /) -> bytes:
        return self._response.readline(limit).replace(self._key, b"***")


def _check_url(url: str) -> urllib.parse.SplitResult:
    """The parsed URL; ConfigError unless it is http(s) with a host and no credentials (the
    message shows the URL without them)."""
    parsed = urllib.parse.urlsplit(url)
    shown = parsed._replace(netloc=parsed.netloc.rpartition("@")[2]).geturl()
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ConfigError(
            f"llm.remote.url must be an http:// or https:// URL with a host, such as "
            f"https://llm.example.org/v1; got {shown!r}"
        )
    if "@" in parsed.netloc:
        raise ConfigError(
            f"llm.remote.url must not hold a user name or password ({shown!r} without them): "
            "every node of the graph can read parameters; put the key in an environment "
            "variable and name that variable in llm.remote.api_key_env"
        )
    try:
        parsed.port  # noqa: B018 - parsing the port raises for a bad one
    except ValueError:
        raise ConfigError(f"llm.remote.url has a bad port: {shown!r}") from None
    return parsed


def _check_api_key(key: str, source: str) -> None:
    """ConfigError (without the key) when the key cannot go into an HTTP header."""
    for position, char in enumerate(key, 1):
        if not "!" <= char <= "~":
            raise ConfigError(
                f"{source} has a character that cannot go into an HTTP header at position "
                f"{position} (a space, a line break or a non-ASCII character; the key is not "
                "shown): set it again without it"
            )


def _tls_context(
    parsed: urllib.parse.SplitResult, ca_bundle: str, verify: bool
) -> ssl.SSLContext | None:
    """The TLS settings of an https:// URL (None for http://): certificates checked against
    ``ca_bundle`` (a PEM file, instead of the system's trust store) or the system's store,
    unless ``verify`` is False."""
    if parsed.scheme != "https":
        if ca_bundle:
            raise ConfigError(
                f"llm.remote.ca_bundle is set but llm.remote.url is not https:// "
                f"({parsed.scheme}://{parsed.netloc}): use https://, or clear llm.remote.ca_bundle"
            )
        return None
    try:
        context = ssl.create_default_context(cafile=ca_bundle or None)
    except ssl.SSLError as err:
        raise ConfigError(
            f"llm.remote.ca_bundle {ca_bundle!r} holds no certificate this node can use "
            f"({err.reason or err}): give a PEM file of the CA that signed the server's "
            "certificate"
        ) from err
    except OSError as err:
        raise ConfigError(
            f"llm.remote.ca_bundle {ca_bundle!r} cannot be read: {err.strerror or err}"
        ) from err
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _risks(parsed: urllib.parse.SplitResult, has_key: bool, verify: bool) -> tuple[str, ...]:
    """The security warnings of these settings (see LlmBackend.security_warnings)."""
    host = parsed.hostname or ""
    risks = []
    if parsed.scheme == "https" and not verify:
        risks.append(
            f"TLS certificates of {host} are not checked (llm.remote.tls_verify is false): "
            "anyone on the network path can pose as the server and read the API key and the "
            "conversation; give the server's CA in llm.remote.ca_bundle instead"
        )
    if parsed.scheme == "http" and has_key and not _is_loopback(host):
        risks.append(
            f"the API key goes to {host} over plain http: anyone on the network can read it; "
            "use an https:// URL"
        )
    return tuple(risks)
