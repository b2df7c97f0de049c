"""Server-sent events, as OpenAI-compatible servers stream an answer.

Each event is a ``data: {json}`` line followed by a blank line; ``data: [DONE]`` ends the
stream. Comments (``:`` keep-alives) and ``event:``/``id:``/``retry:`` fields are skipped.
Anything else, an event that is not JSON or has no ``choices``, a silent server and a broken
connection raise EngineError with the URL and what came.
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from typing import Any, Protocol

from omniflow.errors import EngineError

__all__ = ["server_sent_events"]

_LINE_LIMIT = 1 << 20


class LineReader(Protocol):
    """What the parser reads from: an ``http.client.HTTPResponse`` or any binary stream."""

    def readline(self, limit: int = -1, /) -> bytes: ...


def server_sent_events(
    response: LineReader, url: str, cancel: threading.Event, timeout_s: float
) -> Iterator[dict[str, Any]]:
    """Yield the JSON object of every ``data:`` event until ``data: [DONE]``.

    Stops quietly when ``cancel`` is set (also when cancelling broke the connection) and
    when the server closes the stream after at least one event without ``[DONE]``.
    ``timeout_s`` is only named in the message when a read times out (the socket's own
    timeout, ``llm.remote.timeout_s``).
    """
    seen = False
    while not cancel.is_set():
        try:
            line = response.readline(_LINE_LIMIT)
        except TimeoutError as err:
            raise EngineError(
                f"remote LLM server at {url} sent nothing for "
                f"{timeout_s:g} s (llm.remote.timeout_s)"
            ) from err
        except (OSError, http.client.HTTPException) as err:
            if cancel.is_set():
                return
            raise EngineError(f"remote LLM stream from {url} broke: {err!r}") from err
        if not line:
            if cancel.is_set():
                return
            if not seen:
                raise EngineError(
                    f"remote LLM server at {url} closed the stream without sending any event"
                )
            return  # closed without [DONE]: take what came
        text = line.decode("utf-8", errors="replace").strip()
        if not text or text.startswith(":"):
            continue  # keep-alive or comment
        if not text.startswith("data:"):
            if text.startswith(("event:", "id:", "retry:")):
                continue
            raise EngineError(
                f"remote LLM server at {url} sent something that is not "
                f"a server-sent event: {text[:200]!r}"
            )
        data = text[5:].strip()
        if data == "[DONE]":
            return
        try:
            event = json.loads(data)
        except ValueError as err:
            raise EngineError(
                f"remote LLM server at {url} sent an event that is not JSON: {data[:200]!r}"
            ) from err
        if not isinstance(event, dict) or not isinstance(event.get("choices"), list):
            message = event.get("error") if isinstance(event, dict) else None
            raise EngineError(
                f"remote LLM server at {url} sent an event without "
                f"choices: {message or data[:200]!r}"
            )
        seen = True
        yield event
