"""A server on loopback that answers as a test tells it, for the remote LLM backend's tests."""

from __future__ import annotations

import http.server
import ssl
import threading


class ModeHandler(http.server.BaseHTTPRequestHandler):
    """Reads each request's body and answers it with :meth:`answer`, which subclasses write
    (``self.server.mode`` says how); nothing is logged."""

    def log_message(self, *args) -> None:  # keep the test output clean
        pass

    def do_GET(self) -> None:
        self.answer()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.answer()

    def answer(self) -> None:
        raise NotImplementedError


def serve(
    handler: type[ModeHandler], mode: str, tls: ssl.SSLContext | None = None
) -> http.server.ThreadingHTTPServer:
    """Serve ``handler`` on 127.0.0.1 (a free port; https with ``tls``) from a thread; call
    ``shutdown()`` and ``server_close()`` after."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    server.daemon_threads = True
    server.mode = mode
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server
