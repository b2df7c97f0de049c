"""The frame the words chose reaches the model, seconds after it was taken (tier 2).

The fusion node decides twice for an utterance: at its start by time (the frame at the
onset) and with its final transcript by its words ("the cat": a frame 2.5 s earlier). The
dialogue node (remote backend, a recording server on loopback) must use the second decision
and still hold its frame, though 60 newer camera frames came in since: it keeps the frames the
fusion node encoded (a scene names each) and those an association chose, until the turn ends.
"""

from __future__ import annotations

import json
import time
import uuid

from dialogue_graph import START_TIMEOUT_S
from sensor_msgs.msg import Image
from std_msgs.msg import String
from test_dialogue_remote import decoded_colours, frame, server  # noqa: F401 (a fixture)

from omniflow.msg import Association, DialogueState, Scene, TokenRef, Transcript, VoiceActivity
from omniflow.ros import conversions
from omniflow.ros.monitor import TopicRecorder
from omniflow.ros.qos import EVENTS, LATCHED, SENSOR_DATA, STATE_CHANGES

_MS = 1_000_000
BLUE, RED, GREY = (0, 0, 250), (250, 0, 0), (120, 120, 120)


def association(t0: int, utterance: int, chosen_ns: int, summary: str, query: str) -> Association:
    return Association(
        header=conversions.header(t0, ""),
        decision_id=utterance * 2 + bool(query),
        trigger=TokenRef(modality=TokenRef.MODALITY_AUDIO, stamp=conversions.time_from_ns(t0)),
        candidates=[
            TokenRef(
                modality=TokenRef.MODALITY_VISION,
                stamp=conversions.time_from_ns(chosen_ns),
                chosen=True,
                score=1.0,
                summary=summary,
            )
        ],
        utterance_id=utterance,
        query=query,
    )


def test_the_frame_chosen_by_the_words_reaches_the_model_seconds_later(
    ros_node,
    start_node,
    server,  # noqa: F811 (the fixture imported above)
):
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
    scenes = ros_node.create_publisher(Scene, f"{ns}/scene", EVENTS)
    associations = ros_node.create_publisher(Association, f"{ns}/associations", EVENTS)
    voice = ros_node.create_publisher(VoiceActivity, f"{ns}/voice_activity", EVENTS)
    transcript = ros_node.create_publisher(Transcript, f"{ns}/transcript", EVENTS)
    publishers = (images, scenes, associations, voice, transcript)
    deadline = time.monotonic() + 30
    while any(p.get_subscription_count() < 1 for p in publishers):
        assert time.monotonic() < deadline, dialogue.output()
        time.sleep(0.05)

    t0 = ros_node.get_clock().now().nanoseconds
    cat_ns = t0 - 2500 * _MS
    # Frames before the cat until the node has taken one: a best-effort frame published
    # before the node's side of the subscription has matched is lost.
    status = TopicRecorder(ros_node, String, f"{ns}/dialogue/status", LATCHED)
    for i in range(300):
        images.publish(frame(cat_ns - (300 - i) * 33 * _MS, GREY))
        time.sleep(0.033)
        if status.messages and json.loads(status.messages[-1].data).get("frames_kept"):
            break
    else:
        raise AssertionError(f"no frame taken in 10 s\n{dialogue.output()[-3000:]}")
    # The cat in view for five frames at 30/s, as a camera sees it (one frame alone may be
    # dropped from the node's sensor-data queue of 5 while its executor is busy: under load
    # the model got no image); fusion encoded the middle one, and a scene names it.
    for i in range(-2, 3):
        images.publish(frame(cat_ns + i * 33 * _MS, BLUE))
        time.sleep(0.033)
    scenes.publish(Scene(header=conversions.header(cat_ns, "camera"), observations=["cat"]))
    # 2 s of newer frames at 30/s, as a camera sends them: more than the 48 newest kept. (Sent
    # 5 ms apart, the burst could overrun the node's sensor-data queue of 5 while its executor
    # was busy, and the cat's frame was never taken: 1 fresh-clone run.)
    for i in range(2, 62):
        images.publish(frame(cat_ns + (i + 1) * 33 * _MS, RED if i > 57 else GREY))
        time.sleep(0.033)
    cup_ns = cat_ns + 62 * 33 * _MS
    start = conversions.time_from_ns(cup_ns)
    voice.publish(
        VoiceActivity(
            header=conversions.header(cup_ns, "microphone"),
            event=VoiceActivity.START,
            utterance_id=7,
            start=start,
            speech_s=0.1,
            echo_score=float("nan"),
        )
    )
    associations.publish(association(cup_ns, 7, cup_ns, "cup; dining table", ""))
    time.sleep(0.5)
    associations.publish(association(cup_ns, 7, cat_ns, "cat", "cat"))
    transcript.publish(
        Transcript(
            header=conversions.header(cup_ns + 1500 * _MS, "microphone"),
            utterance_id=7,
            start=start,
            end=conversions.time_from_ns(cup_ns + 1200 * _MS),
            text="what colour is the cat",
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
    assert "what colour is the cat" in text and "cat" in text.replace("what colour is the cat", "")
    assert "dining table" not in text
    colours = decoded_colours(request)
    assert len(colours) == 1, f"{colours}\n{dialogue.output()[-3000:]}"
    assert colours[0][2] > 200 and colours[0][0] < 50  # the blue cat frame, not the red cup
