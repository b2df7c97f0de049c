"""The remote backend against llama-cpp-python's own server on loopback, and bad servers."""

from __future__ import annotations

import http.server
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator

import pytest
from loopback_http import ModeHandler, serve
from tiny_gguf import write_tiny_gguf

from omniflow.core.prompt import Prompt, Turn
from omniflow.engines.llm import RemoteBackend, Sampling, make_backend
from omniflow.errors import ConfigError, EngineError

pytest.importorskip("llama_cpp.server")

SYSTEM = "You are a small robot."
PROMPT = Prompt(
    SYSTEM,
    scene="a red box",
    history=(Turn("user", "hi"), Turn("robot", "hello")),
    user="what is this",
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """llama-cpp-python's OpenAI-compatible server with the tiny model, on loopback."""
    model = write_tiny_gguf(tmp_path_factory.mktemp("remote") / "tiny.gguf")
    port = _free_port()
    log = tmp_path_factory.mktemp("remote-log") / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "llama_cpp.server",
                "--model",
                str(model),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--n_ctx",
                "1024",
                "--n_threads",
                "1",
                "--verbose",
                "False",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(url + "/v1/models", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"llama_cpp.server did not start: {log.read_text()[-2000:]}")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _remote(url: str, **kwargs) -> RemoteBackend:
    kwargs.setdefault("sampling", Sampling(temperature=0.0, max_tokens=16))
    return RemoteBackend(url, timeout_s=kwargs.pop("timeout_s", 20.0), **kwargs)


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_streams_from_llama_cpp_server(server_url: str, api: str) -> None:
    backend = _remote(server_url + "/v1", api=api)
    backend.load()
    assert backend.loaded
    deltas = list(backend.generate(PROMPT, cancel=threading.Event()))
    stats = backend.last_stats
    assert deltas and all(deltas)
    assert stats.generated_tokens == len(deltas) and not stats.cancelled
    assert stats.first_token_s <= stats.total_s
    backend.close()
    assert not backend.loaded


def test_cancel_closes_the_stream(server_url: str) -> None:
    backend = _remote(server_url, sampling=Sampling(temperature=0.0, max_tokens=400))
    cancel = threading.Event()
    received = []
    for delta in backend.generate(PROMPT, cancel=cancel):
        received.append(delta)
        if len(received) == 2:
            cancel.set()
    assert len(received) == 2
    assert backend.last_stats.cancelled and backend.last_stats.stop_reason == "cancelled"
    # The server is still fine for the next request.
    assert list(backend.generate(PROMPT, cancel=threading.Event()))


class _BadHandler(ModeHandler):
    """Answers every request the way ``self.server.mode`` says."""

    def answer(self) -> None:
        mode = self.server.mode
        if mode == "hang":
            self.server.release.wait(30)
            return
        if mode == "error":
            self.send_response(500)
            self.end_headers()
            self.wfile.write(b"model exploded")
            return
        self.send_response(200)
        self.end_headers()
        if mode == "garbage":
            self.wfile.write(b"<html>hello</html>\n")
        elif mode == "bad-json":
            self.wfile.write(b"data: {not json\n\n")
        elif mode == "slow-stream":
            self.wfile.write(b'data: {"choices": [{"delta": {"content": "Hi"}}]}\n\n')
            self.wfile.flush()
            self.server.release.wait(30)


@pytest.fixture
def bad_server() -> Iterator[http.server.ThreadingHTTPServer]:
    server = serve(_BadHandler, "garbage")
    server.release = threading.Event()
    yield server
    server.release.set()
    server.shutdown()
    server.server_close()


def _url(server: http.server.ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


@pytest.mark.parametrize(
    "mode, match",
    [
        ("garbage", "not a server-sent event"),
        ("bad-json", "not JSON"),
        ("error", "HTTP 500"),
    ],
)
def test_a_server_that_answers_garbage_gets_a_clear_error(
    bad_server: http.server.ThreadingHTTPServer, mode: str, match: str
) -> None:
    bad_server.mode = mode
    url = _url(bad_server)
    with pytest.raises(EngineError, match=match) as info:
        list(_remote(url).generate(PROMPT, cancel=threading.Event()))
    assert url in str(info.value)


def test_load_checks_the_server(bad_server: http.server.ThreadingHTTPServer) -> None:
    bad_server.mode = "garbage"
    with pytest.raises(EngineError, match="did not answer JSON"):
        _remote(_url(bad_server)).load()
    bad_server.mode = "error"
    with pytest.raises(EngineError, match="HTTP 500"):
        _remote(_url(bad_server)).load()


def test_a_server_that_is_down_gets_a_clear_error() -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    with pytest.raises(EngineError, match="not reachable") as info:
        _remote(url).load()
    assert url in str(info.value)
    with pytest.raises(EngineError, match="is the server running"):
        list(_remote(url).generate(PROMPT, cancel=threading.Event()))


def test_a_silent_server_times_out(bad_server: http.server.ThreadingHTTPServer) -> None:
    bad_server.mode = "slow-stream"
    backend = _remote(_url(bad_server), timeout_s=0.5)
    stream = backend.generate(PROMPT, cancel=threading.Event())
    assert next(stream) == "Hi"
    with pytest.raises(EngineError, match="sent nothing for 0.5 s"):
        next(stream)


def test_cancel_unblocks_a_hanging_server(bad_server: http.server.ThreadingHTTPServer) -> None:
    bad_server.mode = "hang"
    backend = _remote(_url(bad_server), timeout_s=30.0)
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    assert list(backend.generate(PROMPT, cancel=cancel)) == []
    assert backend.last_stats.cancelled


def test_remote_configuration_errors() -> None:
    with pytest.raises(ConfigError, match="http"):
        RemoteBackend("ftp://example.org")
    with pytest.raises(ConfigError, match="chat"):
        RemoteBackend("http://127.0.0.1:1", api="rpc")
    backend = make_backend(
        {"llm.backend": "remote", "llm.remote.url": "http://h:9/v1/", "llm.remote.timeout_s": 3.0}
    )
    assert isinstance(backend, RemoteBackend)
    assert backend._endpoint("models") == "http://h:9/v1/models"
    backend.update({"llm.max_tokens": 7, "llm.temperature": 0.5, "llm.n_ctx": 512})
    assert backend.sampling.max_tokens == 7 and backend.sampling.temperature == 0.5
    with pytest.raises(ConfigError, match="llm.top_p"):
        backend.update({"llm.top_p": 2.0})
