"""Messages <-> plain values: the only place that knows both ROS types and numpy arrays.

``cv_bridge`` is not available from PyPI and the PyPI ``cv-bridge`` is ROS 1 code, so images
go through :mod:`omniflow.core.image_codec`. Array fields are filled with ``array.array``
(one memcpy): the generated setters check every element of any other sequence, which costs
hundreds of milliseconds for a full-HD frame.
"""

from __future__ import annotations

import array

import numpy as np
from builtin_interfaces.msg import Time
from sensor_msgs.msg import Image
from std_msgs.msg import Header

from omniflow.core import audio_format, image_codec
from omniflow.core.timing import NS_PER_S
from omniflow.msg import AudioChunk


def time_from_ns(stamp_ns: int) -> Time:
    """A ``builtin_interfaces/Time`` from integer nanoseconds."""
    sec, nanosec = divmod(int(stamp_ns), NS_PER_S)
    return Time(sec=sec, nanosec=nanosec)


def ns_from_time(stamp: Time) -> int:
    """Integer nanoseconds from a ``builtin_interfaces/Time``."""
    return stamp.sec * NS_PER_S + stamp.nanosec


def header(stamp_ns: int, frame_id: str) -> Header:
    """A header with a stamp in nanoseconds."""
    return Header(stamp=time_from_ns(stamp_ns), frame_id=frame_id)


def byte_array(data: object) -> array.array:
    """A uint8[] field value from any buffer, in one copy."""
    buffer = array.array("B")
    buffer.frombytes(data)
    return buffer


def audio_chunk(
    samples: np.ndarray, *, stamp_ns: int, frame_id: str, sample_rate: int, sequence: int
) -> AudioChunk:
    """An AudioChunk from samples of shape (frames,) or (frames, channels)."""
    fmt, data = audio_format.encode(samples)
    channels = 1 if samples.ndim == 1 else samples.shape[1]
    return AudioChunk(
        header=header(stamp_ns, frame_id),
        sample_rate=sample_rate,
        channels=channels,
        format=fmt,
        sequence=sequence,
        data=byte_array(data),
    )


def audio_samples(msg: AudioChunk) -> np.ndarray:
    """The samples of an AudioChunk, shape (frames, channels); AudioFormatError if malformed."""
    return audio_format.decode(msg.data, msg.format, msg.channels, msg.sample_rate)


def image(pixels: np.ndarray, encoding: str, *, stamp_ns: int, frame_id: str) -> Image:
    """A sensor_msgs/Image from an (H, W) or (H, W, C) array in ``encoding``."""
    encoded = image_codec.encode(pixels, encoding)
    return Image(
        header=header(stamp_ns, frame_id),
        height=encoded.height,
        width=encoded.width,
        encoding=encoded.encoding,
        is_bigendian=int(encoded.is_bigendian),
        step=encoded.step,
        data=byte_array(encoded.data),
    )


def image_pixels(msg: Image) -> np.ndarray:
    """The pixels of a sensor_msgs/Image; ImageFormatError if its fields disagree."""
    return image_codec.decode(
        msg.height, msg.width, msg.encoding, bool(msg.is_bigendian), msg.step, msg.data
    )
