"""Audio first (tier 2): the fusion node receives every microphone chunk while a camera streams
640x480 frames at 15 frames/s and every frame is encoded, each node its own process over real
DDS, as the live graph runs (camera and fusion with their DDS profiles). Counted with the
nodes' own status counters: chunks the microphone published against chunks fusion received."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
from lifecycle_msgs.msg import Transition
from sensor_msgs.msg import Image
from std_msgs.msg import String

from omniflow.graph import frame_publisher_env, frame_receiver_env
from omniflow.ros.conversions import image
from omniflow.ros.monitor import TopicRecorder
from omniflow.ros.qos import LATCHED, SENSOR_DATA
from ros_helpers import change_state, wait_subscribed

SAMPLES = Path(__file__).parents[1] / "data" / "samples"
HELLO = SAMPLES / "hello.wav"
SCENE = SAMPLES / "scene.avi"  # 320x240, scaled to 640x480 by the camera node
REPO = Path(__file__).parents[2]
STREAM_S = 10.0


def last(recorder: TopicRecorder) -> dict:
    return json.loads(recorder.messages[-1].data)


@pytest.mark.serial  # no audio chunk lost, on the cores the camera leaves
def test_no_audio_chunk_is_lost_beside_a_640x480_camera_at_15_fps(ros_node, start_node):
    namespace = f"/t{uuid.uuid4().hex[:6]}"
    fusion = start_node(
        "omniflow.nodes.fusion",
        "fusion",
        {"vision.rate_hz": 15.0},
        namespace=namespace,
        env=frame_receiver_env(str(REPO)),
    )
    fusion_status = TopicRecorder(ros_node, String, f"{namespace}/fusion/status", LATCHED)
    mic_status = TopicRecorder(ros_node, String, f"{namespace}/audio_capture/status", LATCHED)
    fusion_status.wait_until(
        lambda msgs: any(json.loads(m.data)["state"] == "active" for m in msgs),
        timeout=120,
        what="fusion active",
    )
    start_node(
        "omniflow.nodes.camera",
        "camera",
        {"source": "video", "path": str(SCENE), "fps": 15.0, "width": 640, "height": 480},
        namespace=namespace,
        env=frame_publisher_env(str(REPO)),
    )
    fusion_status.wait_until(
        lambda msgs: json.loads(msgs[-1].data)["frames"] >= 15,
        timeout=60,
        what="frames reaching fusion",
    )
    microphone = start_node(
        "omniflow.nodes.audio_capture",
        "audio_capture",
        {"source": "file", "file.path": str(HELLO), "file.loop": True, "autostart": False},
        namespace=namespace,
    )
    assert change_state(ros_node, microphone, Transition.TRANSITION_CONFIGURE)
    wait_subscribed(mic_status, 1, "the fusion node's subscription matched to the microphone")
    frames_before = last(fusion_status)["frames"]
    assert change_state(ros_node, microphone, Transition.TRANSITION_ACTIVATE)
    time.sleep(STREAM_S)
    assert change_state(ros_node, microphone, Transition.TRANSITION_DEACTIVATE)
    published = mic_status.wait_until(
        lambda msgs: json.loads(msgs[-1].data)["state"] == "inactive",
        timeout=10,
        what="microphone stopped",
    )
    sent = int(json.loads(published[-1].data)["published"])  # device counters are text

    # Chunks published before fusion's subscription matched the microphone's (discovery under
    # load can take over the second waited above) never arrive: the stream fusion followed
    # began at its first chunk, whose sequence counts the blocks since activation.
    def all_followed(counts: dict) -> bool:
        return counts["audio_chunks"] >= sent - counts["audio_first_sequence"]

    try:
        fusion_status.wait_until(
            lambda msgs: all_followed(json.loads(msgs[-1].data)),
            timeout=10,
            what="every chunk sent after fusion matched the microphone, counted by fusion",
        )
    except TimeoutError:
        pass  # the assertion below says what arrived
    counts = last(fusion_status)
    frames = counts["frames"] - frames_before
    unmatched = counts["audio_first_sequence"]
    sent -= unmatched
    report = (
        f"microphone published {sent} after fusion matched it ({unmatched} before), fusion "
        f"received {counts['audio_chunks']} (lost on the way: {counts['audio_lost']}); "
        f"frames meanwhile {frames}, "
        f"lost {counts['frames_lost']}, skipped {counts['frames_skipped']}, "
        f"encoded {counts['vision_encoded']}"
    )
    assert sent >= STREAM_S / 0.04 * 0.8, report  # the microphone really streamed
    assert frames >= STREAM_S * 15 * 0.5, report  # and the camera beside it
    assert counts["audio_chunks"] == sent, report
    assert counts["audio_lost"] == 0 and counts["rejected_audio"] == 0, report
    assert counts["vision_encoded"] >= STREAM_S * 15 * 0.3, report
    assert fusion.running


def test_frames_over_the_size_bound_are_refused_counted_and_named(ros_node, start_node):
    namespace = f"/t{uuid.uuid4().hex[:6]}"
    fusion = start_node(
        "omniflow.nodes.fusion",
        "fusion",
        {"image.max_pixels": 100_000, "vision.rate_hz": 15.0},
        namespace=namespace,
    )
    status = TopicRecorder(ros_node, String, f"{namespace}/fusion/status", LATCHED)
    status.wait_until(
        lambda msgs: any(json.loads(m.data)["state"] == "active" for m in msgs),
        timeout=120,
        what="fusion active",
    )
    publisher = ros_node.create_publisher(Image, f"{namespace}/image_raw", SENSOR_DATA)
    rgb = np.zeros((300, 400, 3), np.uint8)  # 120,000 px: over the bound
    small = np.zeros((150, 200, 3), np.uint8)  # 30,000 px
    deadline = time.monotonic() + 30
    while True:
        counts = last(status)
        if counts["frames_too_large"] >= 1 and counts["frames"] >= 1:
            break
        assert time.monotonic() < deadline, f"not counted: {counts}\n{fusion.output()[-2000:]}"
        now_ns = ros_node.get_clock().now().nanoseconds
        for pixels in (rgb, small):
            publisher.publish(image(pixels, "rgb8", stamp_ns=now_ns, frame_id="camera"))
        time.sleep(0.2)
    assert counts["rejected_images"] >= counts["frames_too_large"]
    assert "400x300 (120,000 px) is over image.max_pixels (100,000 px)" in fusion.output()
    status.wait_until(
        lambda msgs: json.loads(msgs[-1].data)["vision_encoded"] >= 1,
        timeout=30,
        what="the small frames encoded",
    )
