"""Tier 1 tests of the fusion node's message functions (omniflow.ros.fusion_messages): frame
checks without copies, the conversion to RGB (cv_bridge or the codec), the size bound, the
loss counter, and the transcript it publishes. Messages are built without rclpy.init."""

from __future__ import annotations

import math

import cv2
import numpy as np
import pytest
from sensor_msgs.msg import Image

from omniflow.core.fusion_events import TranscriptEvent
from omniflow.ros import fusion_messages as messages
from omniflow.ros.conversions import image, ns_from_time

RNG = np.random.default_rng(12)
RGB = RNG.integers(0, 256, size=(48, 64, 3), dtype=np.uint8)


def frame(encoding: str) -> Image:
    """The test picture in ``encoding`` (converted with OpenCV, independently of the codec)."""
    pixels = {
        "rgb8": RGB,
        "bgr8": cv2.cvtColor(RGB, cv2.COLOR_RGB2BGR),
        "mono8": cv2.cvtColor(RGB, cv2.COLOR_RGB2GRAY),
    }[encoding]
    return image(pixels, encoding, stamp_ns=1, frame_id="camera")


def padded(msg: Image, pad: int) -> Image:
    """The same frame with ``pad`` bytes after every row (cameras with aligned rows)."""
    rows = np.frombuffer(msg.data, np.uint8).reshape(msg.height, msg.step)
    wide = np.zeros((msg.height, msg.step + pad), np.uint8)
    wide[:, : msg.step] = rows
    out = Image(
        header=msg.header,
        height=msg.height,
        width=msg.width,
        encoding=msg.encoding,
        step=msg.step + pad,
    )
    out.data = wide.tobytes()
    return out


@pytest.mark.parametrize("encoding", messages.IMAGE_ENCODINGS)
@pytest.mark.parametrize("pad", [0, 7])
def test_a_checked_frame_converts_to_what_opencv_gives(encoding: str, pad: int) -> None:
    """cv_bridge converts with cv::cvtColor: the codec's RGB equals OpenCV's."""
    msg = padded(frame(encoding), pad)
    problem, checked = messages.check_image(msg)
    assert problem is None and checked is msg
    rgb = messages.image_rgb(msg)
    source = np.frombuffer(frame(encoding).data, np.uint8)
    expected = {
        "rgb8": lambda: RGB,
        "bgr8": lambda: cv2.cvtColor(source.reshape(48, 64, 3), cv2.COLOR_BGR2RGB),
        "mono8": lambda: cv2.cvtColor(source.reshape(48, 64), cv2.COLOR_GRAY2RGB),
    }[encoding]()
    assert rgb.shape == (48, 64, 3) and rgb.dtype == np.uint8
    np.testing.assert_array_equal(rgb, expected)


@pytest.mark.parametrize("encoding", messages.IMAGE_ENCODINGS)
def test_cv_bridge_and_the_codec_give_equal_frames(encoding: str) -> None:
    cv_bridge = pytest.importorskip(
        "cv_bridge",
        reason="cv_bridge is not installable here (not on PyPI; the PyPI cv-bridge is ROS 1 "
        "code): this comparison runs on ROS installs",
    )
    from omniflow.core import image_codec
    from omniflow.ros.conversions import image_pixels

    msg = padded(frame(encoding), 5)
    ours = image_codec.convert(np.asarray(image_pixels(msg)), encoding, "rgb8")
    theirs = cv_bridge.CvBridge().imgmsg_to_cv2(msg, desired_encoding="rgb8")
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(messages.image_rgb(msg), theirs)
    assert messages.IMAGE_CONVERTER == "cv_bridge"


def test_the_converter_in_use_is_named() -> None:
    try:
        import cv_bridge  # noqa: F401
    except ImportError:
        assert messages.IMAGE_CONVERTER == "omniflow.core.image_codec"
    else:
        assert messages.IMAGE_CONVERTER == "cv_bridge"
    assert messages.IntakeStats().image_converter == messages.IMAGE_CONVERTER


def test_checking_an_rgb_frame_copies_nothing() -> None:
    msg = frame("rgb8")
    assert messages.check_image(msg) == (None, msg)
    rgb = messages.image_rgb(msg)
    assert np.shares_memory(rgb, np.frombuffer(msg.data, np.uint8))


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (dict(width=0, height=0, step=0, data=b""), "zero size"),
        (dict(encoding="yuv422"), "unknown encoding 'yuv422'"),
        (dict(step=100), "step 100 is smaller than one row"),
        (dict(data=bytes(10)), "image data has 10 bytes"),
    ],
)
def test_malformed_frames_are_refused_with_the_reason(change: dict, reason: str) -> None:
    msg = frame("rgb8")
    for name, value in change.items():
        setattr(msg, name, value)
    problem, value = messages.check_image(msg)
    assert value is None and reason in problem


def test_frames_over_the_size_bound_are_refused_before_their_pixels_are_read() -> None:
    huge = Image(width=7680, height=4320, encoding="rgb8", step=7680 * 3)  # no data at all
    problem = messages.oversize_problem(huge, 3840 * 2160)
    assert "7680x4320 (33,177,600 px) is over image.max_pixels (8,294,400 px)" in problem
    assert "raise image.max_pixels" in problem
    assert messages.oversize_problem(frame("rgb8"), 3840 * 2160) is None
    assert messages.oversize_problem(frame("rgb8"), 48 * 64) is None
    assert messages.oversize_problem(frame("rgb8"), 48 * 64 - 1) is not None


def test_the_intake_parameters_bound_what_they_say() -> None:
    specs = {spec.name: spec for spec in messages.INTAKE_PARAMS}
    assert specs["image.max_pixels"].default == 3840 * 2160
    assert specs["audio.queue_depth"].default * 40 == 2000  # ms of audio held
    assert specs["audio.queue_depth"].check(0)  # refused: a queue holds at least one chunk


@pytest.mark.parametrize(
    ("sequence", "missing"),
    [
        ([1, 2, 3, 4], [0, 0, 0, 0]),
        ([1, 2, 5, 6], [0, 0, 2, 0]),
        ([7, 9], [0, 1]),  # the first message seen starts the count
        ([5, 6, 1, 2, 4], [0, 0, 0, 0, 1]),  # a step back: a new publisher, counted afresh
        ([3, 3], [0, 0]),
    ],
)
def test_sequence_gaps_count_the_messages_that_never_arrived(sequence, missing) -> None:
    gaps = messages.SequenceGaps()
    assert [gaps.missing({"publication_sequence_number": s}) for s in sequence] == missing


def test_an_rmw_without_sequence_numbers_counts_nothing() -> None:
    gaps = messages.SequenceGaps()
    infos = [{"publication_sequence_number": None}, {}, {"publication_sequence_number": None}]
    assert [gaps.missing(info) for info in infos] == [0, 0, 0]


def test_a_final_transcript_carries_each_words_times_and_confidence() -> None:
    event = TranscriptEvent(
        utterance_id=3,
        stamp_ns=9_000_000_000,
        start_ns=7_000_000_000,
        end_ns=8_500_000_000,
        text="Stop now.",
        final=True,
        confidence=0.8,
        words=(
            ("Stop", 7_100_000_000, 7_400_000_000, 0.93),
            ("now.", 7_500_000_000, 8_000_000_000, math.nan),
        ),
    )
    msg = messages.transcript_msg(event)
    assert msg.is_final and msg.utterance_id == 3 and msg.text == "Stop now."
    first, second = msg.words
    assert first.word == "Stop" and ns_from_time(first.start) == 7_100_000_000
    assert ns_from_time(first.end) == 7_400_000_000
    assert first.confidence == pytest.approx(0.93)
    assert math.isnan(second.confidence)  # the engine gave none for it
