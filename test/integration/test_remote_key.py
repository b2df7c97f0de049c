"""The dialogue node never reveals the remote server's API key (tier 2): a fake key in the
node's environment, a server on loopback that checks it and, when told, echoes it back in
its errors (as OpenAI's does); everything the node writes (its whole output), its
``~/status``, ``/diagnostics`` and the goals' errors are searched for the key."""

from __future__ import annotations

import http.server
import json
import ssl
import threading
import uuid

import pytest
from action_msgs.msg import GoalStatus
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from dialogue_graph import START_TIMEOUT_S, ask
from std_msgs.msg import String

from omniflow.action import Converse
from omniflow.msg import DialogueState
from omniflow.ros.monitor import TopicRecorder
from omniflow.ros.qos import LATCHED, STATE_CHANGES
from ros_helpers import SpinThreadActionClient, get_parameter

KEY = f"sk-omniflow-{uuid.uuid4().hex}"
KEY_VARIABLE = "OMNIFLOW_TEST_LLM_KEY"


class _KeyServer(http.server.BaseHTTPRequestHandler):
    """An OpenAI-compatible server that keeps every Authorization header; ``server.mode``:
    ``ok`` answers, ``reject`` is a 401 quoting the header, ``error-event`` an error event
    quoting it."""

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        self.server.authorizations.append(self.headers.get("Authorization", ""))
        data = b'{"object": "list", "data": [{"id": "keyed", "object": "model"}]}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        auth = self.headers.get("Authorization", "")
        self.server.authorizations.append(auth)
        if self.server.mode == "reject":
            self.send_response(401)
            self.end_headers()
            self.wfile.write(json.dumps({"error": f"Incorrect API key: {auth}"}).encode())
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        if self.server.mode == "error-event":
            self.wfile.write(f"data: {json.dumps({'error': f'{auth} expired'})}\n\n".encode())
            return
        event = {"choices": [{"index": 0, "delta": {"content": "A red box."}}]}
        self.wfile.write(f"data: {json.dumps(event)}\n\ndata: [DONE]\n\n".encode())


def serve(tls: ssl.SSLContext | None = None) -> http.server.ThreadingHTTPServer:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _KeyServer)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    server.daemon_threads = True
    server.mode = "ok"
    server.authorizations = []
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server


@pytest.fixture
def server():
    server = serve()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def https_server(tls_certificate):
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(*tls_certificate)
    server = serve(tls)
    yield server
    server.shutdown()
    server.server_close()


def start_dialogue(ros_node, start_node, url: str, **params):
    """A dialogue node on the server at ``url`` with a fake key, once it listens; the node,
    its converse client and its ``~/status`` and ``/diagnostics`` as they come."""
    ns = f"/t{uuid.uuid4().hex[:6]}"
    status = TopicRecorder(ros_node, String, f"{ns}/dialogue/status", LATCHED)
    diagnostics = TopicRecorder(ros_node, DiagnosticArray, "/diagnostics", 10)
    dialogue = start_node(
        "omniflow.nodes.dialogue",
        "dialogue",
        {
            "llm.backend": "remote",
            "llm.remote.url": url,
            "llm.remote.api_key_env": KEY_VARIABLE,
            "proactive.enabled": False,
            "speech_start_timeout_s": 0.5,
            **params,
        },
        namespace=ns,
        env={KEY_VARIABLE: KEY},
    )
    client = SpinThreadActionClient(ros_node, Converse, f"{ns}/converse")
    assert client.wait_for_server(timeout_sec=START_TIMEOUT_S), dialogue.output()
    states = TopicRecorder(ros_node, DialogueState, f"{ns}/dialogue_state", STATE_CHANGES)
    states.wait_until(
        lambda ms: any(m.reason == "listening" for m in ms), START_TIMEOUT_S, "dialogue active"
    )
    return dialogue, client, status, diagnostics, f"omniflow: {ns}/dialogue"


def test_the_api_key_is_sent_but_never_logged_or_reported(ros_node, start_node, server):
    dialogue, client, status, diagnostics, ours = start_dialogue(
        ros_node, start_node, f"http://127.0.0.1:{server.server_port}"
    )

    outcome = ask(client, "What is this?")
    assert outcome.status == GoalStatus.STATUS_SUCCEEDED, outcome.result.error
    errors = []
    for mode in ("reject", "error-event"):
        server.mode = mode
        outcome = ask(client, "And that?")
        assert outcome.status == GoalStatus.STATUS_ABORTED
        errors.append(outcome.result.error)
    assert "HTTP 401" in errors[0] and "Bearer ***" in errors[0], errors
    assert "Bearer *** expired" in errors[1], errors
    status.wait_until(
        lambda ms: any(json.loads(m.data)["failed"] == 2 for m in ms),
        START_TIMEOUT_S,
        "the two failed turns in ~/status",
    )
    diagnostics.wait_until(
        lambda ms: any(
            s.name == ours and any(v.key == "failed" and v.value == "2" for v in s.values)
            for m in ms
            for s in m.status
        ),
        START_TIMEOUT_S,
        "the two failed turns in /diagnostics",
    )
    assert get_parameter(ros_node, dialogue, "llm.remote.api_key_env") == KEY_VARIABLE

    # The server saw the key on every request; nothing the node wrote holds it.
    assert server.authorizations and set(server.authorizations) == {f"Bearer {KEY}"}
    output = dialogue.output()
    assert "Bearer ***" in output  # the failures were logged, the key replaced
    assert KEY not in output
    assert not any(KEY in m.data for m in status.messages)
    reported = [
        f"{s.message} {s.hardware_id} {[(v.key, v.value) for v in s.values]}"
        for m in diagnostics.messages
        for s in m.status
        if s.name == ours
    ]
    assert reported and not any(KEY in text for text in reported)
    assert not any(KEY in error for error in errors)


def test_tls_verification_turned_off_is_warned_in_the_log_status_and_diagnostics(
    ros_node, start_node, https_server
):
    """A self-signed server: taken only because checking was turned off, and said so."""
    dialogue, client, status, diagnostics, ours = start_dialogue(
        ros_node,
        start_node,
        f"https://127.0.0.1:{https_server.server_port}",
        **{"llm.remote.tls_verify": False},
    )
    outcome = ask(client, "What is this?")
    assert outcome.status == GoalStatus.STATUS_SUCCEEDED, outcome.result.error
    assert set(https_server.authorizations) == {f"Bearer {KEY}"}

    def warned(values: dict) -> bool:
        return any("llm.remote.tls_verify" in w for w in values.get("security_warnings", []))

    status.wait_until(
        lambda ms: any(warned(json.loads(m.data)) for m in ms),
        START_TIMEOUT_S,
        "the warning in ~/status",
    )
    diagnostics.wait_until(
        lambda ms: any(
            s.name == ours and s.level == DiagnosticStatus.WARN and "not checked" in s.message
            for m in ms
            for s in m.status
        ),
        START_TIMEOUT_S,
        "a WARN diagnostics status saying why",
    )
    output = dialogue.output()
    assert "are not checked (llm.remote.tls_verify is false)" in output
    assert KEY not in output
