"""The server-sent-event parser of the remote LLM backend, on byte streams (no server)."""

from __future__ import annotations

import io
import threading

import pytest

from omniflow.engines.llm.sse import server_sent_events
from omniflow.errors import EngineError

URL = "http://h:9/v1/chat/completions"


def _events(data: bytes, cancel: threading.Event | None = None) -> list[dict]:
    return list(server_sent_events(io.BytesIO(data), URL, cancel or threading.Event(), 3.0))


def test_data_events_until_done_skipping_comments_and_other_fields() -> None:
    stream = (
        b": keep-alive\n\n"
        b"event: message\nid: 1\nretry: 100\n"
        b'data: {"choices": [{"delta": {"content": "A"}}]}\n\n'
        b'data:{"choices": []}\n\n'
        b"data: [DONE]\n\n"
        b'data: {"choices": [{"text": "after the end"}]}\n\n'
    )
    assert _events(stream) == [{"choices": [{"delta": {"content": "A"}}]}, {"choices": []}]


def test_a_stream_closed_without_done_keeps_what_came() -> None:
    assert _events(b'data: {"choices": []}\n\n') == [{"choices": []}]


def test_a_cancelled_stream_yields_nothing() -> None:
    cancel = threading.Event()
    cancel.set()
    assert _events(b'data: {"choices": []}\n\n', cancel) == []


@pytest.mark.parametrize(
    "stream, match",
    [
        (b"", "closed the stream without sending any event"),
        (b"<html>maintenance</html>\n", "not a server-sent event"),
        (b"data: {oops\n\n", "not JSON"),
        (b'data: {"error": "model not found"}\n\n', "without choices: 'model not found'"),
        (b"data: [1, 2]\n\n", "without choices"),
    ],
)
def test_what_is_not_an_event_stream_gets_a_clear_error(stream: bytes, match: str) -> None:
    with pytest.raises(EngineError, match=match) as info:
        _events(stream)
    assert URL in str(info.value)


class _Silent:
    def readline(self, limit: int = -1, /) -> bytes:
        raise TimeoutError("timed out")


def test_a_silent_server_names_the_timeout() -> None:
    with pytest.raises(EngineError, match=r"sent nothing for 3 s \(llm.remote.timeout_s\)"):
        list(server_sent_events(_Silent(), URL, threading.Event(), 3.0))
