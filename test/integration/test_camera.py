"""The camera node in its own process, received over real DDS (tier 2)."""

from __future__ import annotations

import time
from pathlib import Path

import cv2
import numpy as np
import pytest
from lifecycle_msgs.msg import Transition
from sensor_msgs.msg import CompressedImage, Image

from omniflow.ros.conversions import image_pixels, ns_from_time
from omniflow.ros.monitor import TopicRecorder, wait_for_publishers
from omniflow.ros.qos import SENSOR_DATA
from ros_helpers import change_state, get_parameter, set_parameters, topic

MODULE = "omniflow.nodes.camera"
SCENE = Path(__file__).parents[1] / "data" / "samples" / "scene.avi"


@pytest.fixture
def photo_folder(tmp_path):
    """Three real photographs (scikit-image ships them) as PNG files."""
    data = pytest.importorskip("skimage.data")
    for index, photo in enumerate((data.astronaut(), data.coffee(), data.chelsea())):
        cv2.imwrite(str(tmp_path / f"{index:02d}.png"), photo[:, :, ::-1])
    return tmp_path


def first_frames(path: Path, count: int) -> list[np.ndarray]:
    capture = cv2.VideoCapture(str(path))
    frames = [capture.read()[1] for _ in range(count)]
    capture.release()
    return frames


def stamps_ns(images) -> np.ndarray:
    return np.array([ns_from_time(image.header.stamp) for image in images])


def test_video_frames_are_stamped_one_period_apart_in_rgb8(ros_node, start_node):
    process = start_node(
        MODULE, "camera", {"source": "video", "path": str(SCENE), "fps": 10.0, "autostart": False}
    )
    recorder = TopicRecorder(ros_node, Image, topic(process, "image_raw"), SENSOR_DATA)
    assert change_state(ros_node, process, Transition.TRANSITION_CONFIGURE)
    wait_for_publishers(ros_node, topic(process, "image_raw"), 1, timeout=10)
    time.sleep(0.5)
    assert change_state(ros_node, process, Transition.TRANSITION_ACTIVATE)
    images = recorder.wait_for(8, timeout=10)

    steps = set(np.diff(stamps_ns(images)))
    assert steps <= {100_000_000, 200_000_000}  # one period (two if one frame was lost)
    assert 100_000_000 in steps
    assert images[0].encoding == "rgb8"
    assert images[0].header.frame_id == "camera"
    # Best-effort delivery may lose a frame on a busy machine: find where the received ones
    # start in the file, then every received frame is the file's frame at its stamp.
    expected = [bgr[:, :, ::-1] for bgr in first_frames(SCENE, 20)]
    start = next(
        i for i, rgb in enumerate(expected) if np.array_equal(image_pixels(images[0]), rgb)
    )
    origin = ns_from_time(images[0].header.stamp)
    for image in images[:5]:
        index = start + (ns_from_time(image.header.stamp) - origin) // 100_000_000
        np.testing.assert_array_equal(image_pixels(image), expected[index])


def test_fps_changes_live_and_bad_values_are_refused(ros_node, start_node):
    process = start_node(MODULE, "camera", {"source": "video", "path": str(SCENE), "fps": 10.0})
    recorder = TopicRecorder(ros_node, Image, topic(process, "image_raw"), SENSOR_DATA)
    recorder.wait_for(3, timeout=15)

    (result,) = set_parameters(ros_node, process, fps=25.0)
    assert result.successful
    recorder.clear()
    images = recorder.wait_for(8, timeout=10)
    # After the switch a step is 40 ms (the first may straddle the change; 80 ms where a
    # frame was lost in best-effort delivery).
    steps = np.diff(stamps_ns(images))[1:]
    assert set(steps) <= {40_000_000, 80_000_000}
    assert np.median(steps) == 40_000_000

    (too_fast,) = set_parameters(ros_node, process, fps=500.0)
    assert not too_fast.successful
    assert "60" in too_fast.reason  # names the upper bound
    (bad_encoding,) = set_parameters(ros_node, process, encoding="yuv422")
    assert not bad_encoding.successful
    assert "rgb8, bgr8, mono8" in bad_encoding.reason
    assert get_parameter(ros_node, process, "fps") == 25.0
    count = len(recorder.messages)
    recorder.wait_for(count + 3, timeout=5)  # still publishing


def test_folder_as_mono8_resized_keeping_aspect_with_compressed_copy(
    ros_node, start_node, photo_folder
):
    process = start_node(
        MODULE,
        "camera",
        {
            "source": "folder",
            "path": str(photo_folder),
            "encoding": "mono8",
            "width": 128,
            "compressed": True,
            "fps": 20.0,
        },
    )
    raw = TopicRecorder(ros_node, Image, topic(process, "image_raw"), SENSOR_DATA)
    compressed = TopicRecorder(
        ros_node, CompressedImage, topic(process, "image_raw/compressed"), SENSOR_DATA
    )
    images = raw.wait_for(6, timeout=15)
    jpegs = compressed.wait_for(3, timeout=5)

    sizes = {(image.width, image.height, image.encoding) for image in images}
    # astronaut and coffee/chelsea have different aspect ratios; width is always 128.
    assert {width for width, _, _ in sizes} == {128}
    assert {encoding for _, _, encoding in sizes} == {"mono8"}
    assert image_pixels(images[0]).ndim == 2
    decoded = cv2.imdecode(np.frombuffer(jpegs[0].data, np.uint8), cv2.IMREAD_COLOR)
    assert decoded.shape[1] == 128


def test_unknown_encoding_is_refused_at_start_up_naming_the_allowed_values(start_node):
    process = start_node(
        MODULE, "camera", {"source": "video", "path": str(SCENE), "encoding": "yuv422"}
    )
    assert process.wait(timeout=20) == 2
    assert "allowed values: rgb8, bgr8, mono8" in process.output()


def test_missing_video_is_named_and_the_node_stays_up(ros_node, start_node):
    process = start_node(MODULE, "camera", {"source": "video", "path": "/no/such/clip.mp4"})
    recorder = TopicRecorder(ros_node, Image, topic(process, "image_raw"), SENSOR_DATA)
    deadline = time.monotonic() + 10
    while "/no/such/clip.mp4" not in process.output() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "/no/such/clip.mp4" in process.output()
    assert process.running
    assert recorder.messages == []
