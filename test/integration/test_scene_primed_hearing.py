"""The camera helps the ears, over real DDS (tier 2): the fusion node (real COCO detector, real
Whisper tiny.en) sees a cup (scikit-image's ``coffee()`` photograph, published by this test as
a camera would) while a question about it is asked in a room with a fan at 10 dB SNR; the
recogniser is primed with what is in view and the cup is heard. With ``asr.bias.enabled``
false the same run heard "I'm going to kill it on the table."

``benchmarks/scene_bias.py`` measures how much the priming helps and how often labels in view
but not said are heard; this test checks the path from the frame's labels to the transcript.
"""

from __future__ import annotations

import json
import uuid

import numpy as np
import pytest
from room import Room, spoken
from sensor_msgs.msg import Image
from std_msgs.msg import String

from omniflow.core.room_sounds import active_rms, fan_noise
from omniflow.core.text import words
from omniflow.msg import Scene, Transcript
from omniflow.ros import conversions
from omniflow.ros.conversions import ns_from_time
from omniflow.ros.monitor import TopicRecorder, wait_for_publishers
from omniflow.ros.qos import EVENTS, LATCHED, SENSOR_DATA

pytestmark = pytest.mark.serial  # the words heard

QUESTION = "Is the cup on the table?"
SNR_DB = 10.0
ROOM_HEARD_CHUNKS = 50  # 2 s


@pytest.fixture(scope="module")
def question() -> np.ndarray:
    return spoken(QUESTION)


def test_the_cup_in_view_primes_the_recogniser_and_is_heard(ros_node, start_node, question):
    skimage_data = pytest.importorskip("skimage.data", reason="scikit-image is not installed")
    ns = f"/t{uuid.uuid4().hex[:6]}"
    fusion = start_node(
        "omniflow.nodes.fusion",
        "fusion",
        {
            "vision.rate_hz": 5.0,
            "vision.detectors": "",
            "vad.min_silence_ms": 400,
            "asr.bias.enabled": True,
        },
        namespace=ns,
    )
    status = TopicRecorder(ros_node, String, f"{ns}/fusion/status", LATCHED)
    scenes = TopicRecorder(ros_node, Scene, f"{ns}/scene", EVENTS)
    heard = TopicRecorder(ros_node, Transcript, f"{ns}/transcript", EVENTS)
    noise = fan_noise(20 * 16_000, np.random.default_rng(3))
    room = Room(
        ros_node, ns, user=question, noise=noise * active_rms(question) / 10 ** (SNR_DB / 20)
    )
    camera = ros_node.create_publisher(Image, f"{ns}/image_raw", SENSOR_DATA)
    # Half size (300x200, 180 KB): a frame that fits Fast DDS's default shared-memory segment
    # arrives whole; the full 720 KB photograph, cut into fragments and sent best effort,
    # lost two frames in three, and the utterance's look-back then held none to prime with.
    coffee = np.ascontiguousarray(skimage_data.coffee()[::2, ::2])
    clock = ros_node.get_clock()

    def show_the_cup() -> None:
        stamp_ns = clock.now().nanoseconds
        camera.publish(conversions.image(coffee, "rgb8", stamp_ns=stamp_ns, frame_id="camera"))

    timer = ros_node.create_timer(0.1, show_the_cup)
    try:
        status.wait_until(
            lambda ms: any(json.loads(m.data)["state"] == "active" for m in ms),
            timeout=90,
            what="fusion active",
        )
        wait_for_publishers(ros_node, f"{ns}/transcript", 1, timeout=30)
        room.start()
        scenes.wait_until(
            lambda ms: any("cup" in " ".join(m.observations) for m in ms),
            timeout=60,
            what="a scene with the cup",
        )
        # The question comes into a room the fusion node has heard for a while: the noise
        # floor its voice detector gates on settles over vad.noise.history_s (1.5 s).
        status.wait_until(
            lambda ms: json.loads(ms[-1].data)["audio_chunks"] >= ROOM_HEARD_CHUNKS,
            timeout=30,
            what=f"{ROOM_HEARD_CHUNKS} chunks of the room heard",
        )
        spoke_ns = clock.now().nanoseconds
        room.user_speaks(spoke_ns)

        def question_final(m: Transcript) -> bool:  # not a final the fan alone made before
            return m.is_final and ns_from_time(m.end) > spoke_ns and bool(m.text.strip())

        finals = heard.wait_until(
            lambda ms: any(question_final(m) for m in ms),
            timeout=90,
            what="the question's final transcript",
        )
        final = next(m for m in finals if question_final(m))
        said = words(final.text)
        summary = json.loads(
            status.wait_until(
                lambda ms: json.loads(ms[-1].data)["primed_utterances"] >= 1,
                timeout=10,
                what="the utterance counted as primed",
            )[-1].data
        )
        assert "cup" in summary["last_bias"].split(", "), summary["last_bias"]
        assert "cup" in said, f"heard {final.text!r} for {QUESTION!r}"
        assert "dining" not in said  # in view ("dining table"), not said
    except (TimeoutError, AssertionError) as err:
        texts = [(m.utterance_id, m.is_final, m.text) for m in heard.messages]
        raise AssertionError(
            f"{err}\ntranscripts: {texts}\nstatus: {status.messages[-1].data}\n"
            f"fusion said:\n{fusion.output()[-3000:]}"
        ) from err
    finally:
        ros_node.destroy_timer(timer)
        room.stop()
