"""The dialogue node with the remote backend against an OpenAI-compatible server on loopback
that records what it is asked (tier 2).

- What the camera saw reaches the model (``llm.remote.images``): the vision token the
  association chose for the utterance goes in as words (its summary) and its frame as an
  image; a frame from another moment does not.
- A server that answers garbage fails the turn with a clear error; the node stays up and the
  conversation's history is not lost.
- Live ``llm.*`` parameters reach the server's request, or are refused with the reason
  (``llm.threads``: the server decides)."""

from __future__ import annotations

import base64
import http.server
import io
import json
import threading
import time
import uuid

import numpy as np
import pytest
from action_msgs.msg import GoalStatus
from dialogue_graph import START_TIMEOUT_S, ask
from PIL import Image as PilImage
from sensor_msgs.msg import Image

from omniflow.action import Converse
from omniflow.msg import Association, DialogueState, TokenRef, Transcript, VoiceActivity
from omniflow.ros import conversions
from omniflow.ros.monitor import TopicRecorder
from omniflow.ros.qos import EVENTS, SENSOR_DATA, STATE_CHANGES
from ros_helpers import SpinThreadActionClient, get_parameter, set_parameters

_MS = 1_000_000


class _Recorder(http.server.BaseHTTPRequestHandler):
    """An OpenAI-compatible server that answers "A red box." and keeps every request."""

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        self._json({"object": "list", "data": [{"id": "recorder", "object": "model"}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        self.server.requests.append(body)
        if self.server.garbage:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"<html>maintenance</html>\n")
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for piece in ("A red", " box."):
            event = {"choices": [{"index": 0, "delta": {"content": piece}}]}
            self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")

    def _json(self, value) -> None:
        data = json.dumps(value).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    server.daemon_threads = True
    server.requests = []
    server.garbage = False
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def frame(stamp_ns: int, colour: tuple[int, int, int]) -> Image:
    pixels = np.zeros((48, 64, 3), np.uint8)
    pixels[:] = colour
    return Image(
        header=conversions.header(stamp_ns, "camera"),
        height=48,
        width=64,
        encoding="rgb8",
        step=64 * 3,
        data=pixels.tobytes(),
    )


def decoded_colours(request) -> list[tuple[int, int, int]]:
    """The mean colour of every image in a chat request."""
    colours = []
    for message in request["messages"]:
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for part in content:
            if part.get("type") == "image_url":
                data = part["image_url"]["url"].split(",", 1)[1]
                image = PilImage.open(io.BytesIO(base64.b64decode(data))).convert("RGB")
                colours.append(tuple(int(v) for v in np.asarray(image).mean(axis=(0, 1))))
    return colours


def start_conversing(ros_node, start_node, server):
    """A dialogue node on the recording server, active, and a converse client for it."""
    ns = f"/t{uuid.uuid4().hex[:6]}"
    dialogue = start_node(
        "omniflow.nodes.dialogue",
        "dialogue",
        {
            "llm.backend": "remote",
            "llm.remote.url": f"http://127.0.0.1:{server.server_port}",
            "proactive.enabled": False,
            "speech_start_timeout_s": 0.5,
        },
        namespace=ns,
    )
    client = SpinThreadActionClient(ros_node, Converse, f"{ns}/converse")
    assert client.wait_for_server(timeout_sec=START_TIMEOUT_S), dialogue.output()
    states = TopicRecorder(ros_node, DialogueState, f"{ns}/dialogue_state", STATE_CHANGES)
    states.wait_until(
        lambda ms: any(m.reason == "listening" for m in ms), START_TIMEOUT_S, "dialogue active"
    )
    return dialogue, client


def test_the_chosen_frame_and_its_words_reach_the_model(ros_node, start_node, server):
    ns = f"/t{uuid.uuid4().hex[:6]}"
    dialogue = start_node(
        "omniflow.nodes.dialogue",
        "dialogue",
        {
            "llm.backend": "remote",
            "llm.remote.url": f"http://127.0.0.1:{server.server_port}",
            "llm.remote.images": True,
            "proactive.enabled": False,
            "speech_start_timeout_s": 0.5,
        },
        namespace=ns,
    )
    states = TopicRecorder(ros_node, DialogueState, f"{ns}/dialogue_state", STATE_CHANGES)
    states.wait_until(
        lambda ms: any(m.reason == "listening" for m in ms), START_TIMEOUT_S, "dialogue active"
    )
    images = ros_node.create_publisher(Image, f"{ns}/image_raw", SENSOR_DATA)
    associations = ros_node.create_publisher(Association, f"{ns}/associations", EVENTS)
    voice = ros_node.create_publisher(VoiceActivity, f"{ns}/voice_activity", EVENTS)
    transcript = ros_node.create_publisher(Transcript, f"{ns}/transcript", EVENTS)
    deadline = time.monotonic() + 30
    while any(p.get_subscription_count() < 1 for p in (images, associations, voice, transcript)):
        assert time.monotonic() < deadline, dialogue.output()
        time.sleep(0.05)

    t0 = ros_node.get_clock().now().nanoseconds
    pointing_ns, earlier_ns = t0 - 100 * _MS, t0 - 400 * _MS
    for _ in range(3):  # best effort: send the frames a few times
        images.publish(frame(earlier_ns, (0, 0, 250)))
        images.publish(frame(pointing_ns, (250, 0, 0)))
        time.sleep(0.1)
    start = conversions.time_from_ns(t0 - 80 * _MS)
    associations.publish(
        Association(
            header=conversions.header(t0, ""),
            decision_id=1,
            trigger=TokenRef(modality=TokenRef.MODALITY_AUDIO, stamp=start, chosen=True),
            candidates=[
                TokenRef(
                    modality=TokenRef.MODALITY_VISION,
                    stamp=conversions.time_from_ns(pointing_ns),
                    chosen=True,
                    score=0.9,
                    summary="hand pointing top-left; face",
                ),
                TokenRef(
                    modality=TokenRef.MODALITY_VISION,
                    stamp=conversions.time_from_ns(earlier_ns),
                    chosen=False,
                    score=0.2,
                    reason="outside the window",
                    summary="person",
                ),
            ],
        )
    )
    voice.publish(
        VoiceActivity(
            header=conversions.header(t0 - 80 * _MS, "microphone"),
            event=VoiceActivity.START,
            utterance_id=4,
            start=start,
            speech_s=0.1,
            echo_score=float("nan"),
        )
    )
    time.sleep(0.3)
    transcript.publish(
        Transcript(
            header=conversions.header(t0, "microphone"),
            utterance_id=4,
            start=start,
            end=conversions.time_from_ns(t0 + 900 * _MS),
            text="what is this",
            confidence=float("nan"),
            is_final=True,
        )
    )
    deadline = time.monotonic() + 30
    while not server.requests:
        assert time.monotonic() < deadline, dialogue.output()
        time.sleep(0.05)
    request = server.requests[-1]
    text = json.dumps(request["messages"])
    assert "what is this" in text
    assert "hand pointing top-left" in text
    assert "person" not in text.replace("hand pointing top-left; face", "")
    colours = decoded_colours(request)
    assert len(colours) == 1, colours
    assert colours[0][0] > 200 and colours[0][2] < 50  # the red frame, not the blue one
    states.wait_until(
        lambda ms: ms[-1].state == DialogueState.LISTENING and len(ms) > 2, 30, "the turn ended"
    )


def test_a_server_answering_garbage_fails_the_turn_and_keeps_the_history(
    ros_node, start_node, server
):
    dialogue, client = start_conversing(ros_node, start_node, server)

    server.garbage = True
    outcome = ask(client, "Where is the kitchen?")
    assert outcome.status == GoalStatus.STATUS_ABORTED
    assert "failed" in outcome.result.error and "server-sent event" in outcome.result.error, (
        outcome.result.error
    )
    assert dialogue.running
    server.garbage = False
    outcome = ask(client, "And the garden?")
    assert outcome.status == GoalStatus.STATUS_SUCCEEDED, outcome.result.error
    assert outcome.result.response == "A red box."
    asked = json.dumps(server.requests[-1]["messages"])
    assert "Where is the kitchen?" in asked and "And the garden?" in asked


def test_live_llm_parameters_reach_the_server_or_are_refused(ros_node, start_node, server):
    dialogue, client = start_conversing(ros_node, start_node, server)
    (threads,) = set_parameters(ros_node, dialogue, **{"llm.threads": 1})
    assert not threads.successful
    assert (
        "llm.threads is not applied by the remote backend: the server decides" in threads.reason
    ), threads.reason
    assert get_parameter(ros_node, dialogue, "llm.threads") == 2
    applied = set_parameters(ros_node, dialogue, **{"llm.temperature": 0.5, "llm.max_tokens": 9})
    assert all(result.successful for result in applied), applied

    outcome = ask(client, "Hello?")
    assert outcome.status == GoalStatus.STATUS_SUCCEEDED, outcome.result.error
    request = server.requests[-1]
    assert request["temperature"] == 0.5 and request["max_tokens"] == 9, request
