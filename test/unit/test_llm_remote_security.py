"""The remote backend's security basics against real servers on loopback: only http(s) URLs
without credentials, the API key never in an error (also when the server echoes it), and TLS
certificates checked by default (a self-signed server made at test time with openssl)."""

from __future__ import annotations

import http.server
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from loopback_http import ModeHandler, serve

from omniflow.core.prompt import Prompt
from omniflow.engines.llm import RemoteBackend, make_backend
from omniflow.errors import ConfigError, EngineError

KEY = "sk-test-9f8e7d6c5b4a"
PROMPT = Prompt("You are a small robot.", user="hello")


class _Handler(ModeHandler):
    """An OpenAI-compatible server that keeps every Authorization header and answers the
    way ``self.server.mode`` says: ``ok``, or one of the ways servers echo a bad key."""

    def answer(self) -> None:
        auth = self.headers.get("Authorization", "")
        self.server.authorizations.append(auth)
        mode = self.server.mode
        if mode == "reject":  # as OpenAI does: the key it refused, in the body
            self.send_response(401)
            self.end_headers()
            self.wfile.write(f'{{"error": "Incorrect API key provided: {auth}"}}'.encode())
            return
        self.send_response(200)
        if self.command == "GET":
            self.end_headers()
            self.wfile.write(b'{"object": "list", "data": []}')
            return
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        if mode == "error-event":
            self.wfile.write(f'data: {{"error": "key {auth} has expired"}}\n\n'.encode())
            return
        if mode == "not-an-event":
            self.wfile.write(f"unauthorised: {auth}\n".encode())
            return
        self.wfile.write(b'data: {"choices": [{"delta": {"content": "Hi."}}]}\n\n')
        self.wfile.write(b"data: [DONE]\n\n")


def _serve(tls: ssl.SSLContext | None = None) -> http.server.ThreadingHTTPServer:
    server = serve(_Handler, "ok", tls)
    server.authorizations = []
    return server


@pytest.fixture
def server() -> Iterator[http.server.ThreadingHTTPServer]:
    server = _serve()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def https_server(tls_certificate) -> Iterator[http.server.ThreadingHTTPServer]:
    cert, key = tls_certificate
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    server = _serve(tls)
    yield server
    server.shutdown()
    server.server_close()


def _url(server: http.server.ThreadingHTTPServer, scheme: str = "http") -> str:
    return f"{scheme}://127.0.0.1:{server.server_address[1]}"


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.org/v1",
        "file:///etc/passwd",
        "127.0.0.1:8080",
        "unix:///run/llm.sock",
        "https://",
        "http://host:port/v1",
    ],
)
def test_only_http_and_https_urls_are_taken(url: str) -> None:
    with pytest.raises(ConfigError, match="llm.remote.url") as info:
        RemoteBackend(url)
    assert "http" in str(info.value)


@pytest.mark.parametrize("netloc", ["user:hunter2@example.org", "hunter2@example.org"])
def test_credentials_in_the_url_are_refused_without_showing_them(netloc: str) -> None:
    with pytest.raises(ConfigError, match="must not hold a user name or password") as info:
        RemoteBackend(f"https://{netloc}/v1")
    assert "hunter2" not in str(info.value) and "llm.remote.api_key_env" in str(info.value)
    with pytest.raises(ConfigError, match="http:// or https://") as info:
        RemoteBackend(f"gopher://{netloc}/v1")
    assert "hunter2" not in str(info.value)


def test_a_key_that_cannot_go_into_a_header_is_refused_without_showing_it(monkeypatch) -> None:
    monkeypatch.setenv("OMNIFLOW_TEST_KEY", KEY + "\nX-Injected: 1")
    with pytest.raises(ConfigError, match=r"\$OMNIFLOW_TEST_KEY.*position 21") as info:
        make_backend({"llm.backend": "remote", "llm.remote.api_key_env": "OMNIFLOW_TEST_KEY"})
    assert KEY not in str(info.value)


def test_a_key_pasted_as_the_variable_name_is_not_echoed() -> None:
    with pytest.raises(ConfigError, match="name of an environment variable") as info:
        make_backend({"llm.backend": "remote", "llm.remote.api_key_env": KEY})
    assert KEY not in str(info.value)
    with pytest.raises(ConfigError, match=r"\$OMNIFLOW_UNSET_KEY, which is not set"):
        make_backend({"llm.backend": "remote", "llm.remote.api_key_env": "OMNIFLOW_UNSET_KEY"})


def test_the_key_is_sent_and_never_in_an_error(server, monkeypatch) -> None:
    monkeypatch.setenv("OMNIFLOW_TEST_KEY", KEY)
    backend = make_backend(
        {
            "llm.backend": "remote",
            "llm.remote.url": _url(server),
            "llm.remote.api_key_env": "OMNIFLOW_TEST_KEY",
        }
    )
    backend.load()
    assert list(backend.generate(PROMPT, cancel=threading.Event())) == ["Hi."]
    assert server.authorizations == [f"Bearer {KEY}"] * 2
    assert backend.security_warnings == ()  # a key in clear text, but to this machine only
    assert KEY not in repr(backend)

    errors = []
    for mode, match in [
        ("reject", "HTTP 401"),
        ("error-event", "without choices"),
        ("not-an-event", "not a server-sent event"),
    ]:
        server.mode = mode
        with pytest.raises(EngineError, match=match) as info:
            list(backend.generate(PROMPT, cancel=threading.Event()))
        errors.append(str(info.value))
    server.mode = "reject"
    with pytest.raises(EngineError, match="HTTP 401") as info:
        backend.load()
    errors.append(str(info.value))
    assert all(KEY not in error and "Bearer ***" in error for error in errors), errors


def test_a_key_sent_over_plain_http_to_another_host_is_warned_about() -> None:
    backend = RemoteBackend("http://llm.example.org:8080", api_key=KEY)
    (warning,) = backend.security_warnings
    assert "plain http" in warning and "https://" in warning and KEY not in warning
    assert RemoteBackend("http://llm.example.org:8080").security_warnings == ()
    assert RemoteBackend("http://localhost:8080", api_key=KEY).security_warnings == ()


def test_a_self_signed_server_is_refused_by_default(https_server) -> None:
    backend = RemoteBackend(_url(https_server, "https"))
    assert backend.security_warnings == ()
    with pytest.raises(EngineError, match="TLS certificate this node does not trust") as info:
        backend.load()
    assert "llm.remote.ca_bundle" in str(info.value)
    with pytest.raises(EngineError, match="TLS certificate this node does not trust"):
        list(backend.generate(PROMPT, cancel=threading.Event()))
    assert https_server.authorizations == []  # nothing was sent to the impostor


def test_a_self_signed_server_is_taken_with_its_certificate_as_ca_bundle(
    https_server, tls_certificate, monkeypatch
) -> None:
    monkeypatch.setenv("OMNIFLOW_TEST_KEY", KEY)
    backend = make_backend(
        {
            "llm.backend": "remote",
            "llm.remote.url": _url(https_server, "https"),
            "llm.remote.ca_bundle": str(tls_certificate[0]),
            "llm.remote.api_key_env": "OMNIFLOW_TEST_KEY",
        }
    )
    backend.load()
    assert list(backend.generate(PROMPT, cancel=threading.Event())) == ["Hi."]
    assert https_server.authorizations == [f"Bearer {KEY}"] * 2
    assert backend.security_warnings == ()


def test_turning_verification_off_is_explicit_and_warned(https_server) -> None:
    backend = make_backend(
        {
            "llm.backend": "remote",
            "llm.remote.url": _url(https_server, "https"),
            "llm.remote.tls_verify": False,
        }
    )
    backend.load()
    (warning,) = backend.security_warnings
    assert "not checked" in warning and "llm.remote.tls_verify" in warning


def test_a_server_without_tls_on_an_https_url_is_named(server) -> None:
    with pytest.raises(EngineError, match="TLS with the remote LLM server .* failed"):
        RemoteBackend(_url(server, "https")).load()


def test_a_bad_ca_bundle_is_a_configuration_error(tmp_path: Path) -> None:
    missing = tmp_path / "missing.pem"
    with pytest.raises(ConfigError, match="cannot be read"):
        RemoteBackend("https://127.0.0.1:1", ca_bundle=str(missing))
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(ConfigError, match="holds no certificate"):
        RemoteBackend("https://127.0.0.1:1", ca_bundle=str(garbage))
    with pytest.raises(ConfigError, match="not https://"):
        RemoteBackend("http://127.0.0.1:1", ca_bundle=str(garbage))
