"""A session bag made from the user's own files (``omniflow demo --audio F.wav --video F``).

The audio goes through the audio capture node's own file source (any channel count libsndfile
reads is mixed to mono; a file at 16 kHz or above is resampled to 16 kHz, with a warning naming
the conversion; a band-limited file below 16 kHz, such as telephone-band 8 kHz, keeps its rate
in the messages, as a microphone at that rate would publish it, so the fusion node resamples
it and reports the source's band), the video
through the camera node's file source (a file OpenCV cannot decode is refused, naming it), and
both become ``audio`` and ``image_raw`` messages in stream time, as the capture nodes would
publish them. The result is an MCAP file that the demo replays like the bundled session.
No rclpy here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import soundfile

from omniflow.bag import BagMessage, encode, typestore, write_mcap_file
from omniflow.core.timing import CHUNK_MS, CHUNK_SAMPLES, NS_PER_S, SAMPLE_RATE
from omniflow.devices.audio import AudioFileSource
from omniflow.devices.camera import VideoFileSource
from omniflow.errors import SourceExhausted

FPS = 15.0
MAX_WIDTH = 640  # larger frames are scaled down (aspect kept)
START_NS = 1_767_225_600 * NS_PER_S  # stream time starts at 2026-01-01T00:00:00Z


def _header(store, offset_ns: int, frame_id: str):
    sec, nanosec = divmod(START_NS + offset_ns, NS_PER_S)
    return store.types["std_msgs/msg/Header"](
        stamp=store.types["builtin_interfaces/msg/Time"](sec=sec, nanosec=nanosec),
        frame_id=frame_id,
    )


def message_rate(path: Path) -> int:
    """The rate the file's audio is published at: its own below 16 kHz when 40 ms is a whole
    number of its samples (a band-limited source, resampled by the fusion node), else 16 kHz.
    A file libsndfile cannot read is left to the source, which names it."""
    try:
        rate = int(soundfile.info(str(path)).samplerate)
    except RuntimeError:  # soundfile.LibsndfileError: not a sound file
        return SAMPLE_RATE
    if rate < SAMPLE_RATE and rate * CHUNK_MS % 1000 == 0:
        return rate
    return SAMPLE_RATE


def audio_messages(path: Path, warn: Callable[[str], None] = print) -> list[BagMessage]:
    """40 ms mono AudioChunk messages of a sound file (at :func:`message_rate`)."""
    store = typestore()
    chunk_type = store.types["omniflow/msg/AudioChunk"]
    rate = message_rate(path)
    chunk = rate * CHUNK_MS // 1000
    source = AudioFileSource(path, rate, 1, chunk, loop=False, warn=warn)
    source.open()  # SourceError naming the file when it is not audio
    out = []
    try:
        for sequence in range(10**9):
            try:
                block = source.read(1.0)
            except SourceExhausted:
                break
            if block is None:
                continue
            offset = sequence * chunk * NS_PER_S // rate
            msg = chunk_type(
                header=_header(store, offset, "microphone"),
                sample_rate=rate,
                channels=1,
                format=chunk_type.FORMAT_S16LE,
                sequence=sequence,
                data=np.frombuffer(block.samples.astype("<i2").tobytes(), dtype=np.uint8),
            )
            out.append(
                BagMessage(
                    "audio",
                    "omniflow/msg/AudioChunk",
                    START_NS + offset,
                    encode(msg, "omniflow/msg/AudioChunk"),
                )
            )
    finally:
        source.close()
    return out


def video_messages(path: Path, duration_s: float) -> list[BagMessage]:
    """rgb8 Image messages of a video at 15 frames/s for ``duration_s`` (the video loops when
    shorter), scaled down to at most 640 px wide."""
    store = typestore()
    image_type = store.types["sensor_msgs/msg/Image"]
    source = VideoFileSource(path, loop=True)
    source.open()  # SourceError naming the file when OpenCV cannot decode it
    out = []
    try:
        for k in range(max(1, int(duration_s * FPS))):
            bgr = source.read().image
            height, width = bgr.shape[:2]
            if width > MAX_WIDTH:
                bgr = cv2.resize(
                    bgr,
                    (MAX_WIDTH, round(height * MAX_WIDTH / width)),
                    interpolation=cv2.INTER_AREA,
                )
            rgb = np.ascontiguousarray(bgr[:, :, ::-1])
            offset = round(k / FPS * NS_PER_S)
            msg = image_type(
                header=_header(store, offset, "camera"),
                height=rgb.shape[0],
                width=rgb.shape[1],
                encoding="rgb8",
                is_bigendian=0,
                step=rgb.shape[1] * 3,
                data=rgb.reshape(-1),
            )
            out.append(
                BagMessage(
                    "image_raw",
                    "sensor_msgs/msg/Image",
                    START_NS + offset,
                    encode(msg, "sensor_msgs/msg/Image"),
                )
            )
    finally:
        source.close()
    return out


def session_from_files(
    audio: Path, video: Path, out: Path, warn: Callable[[str], None] = print
) -> Path:
    """Write ``out`` (an MCAP file) with the audio and the video as a recorded session."""
    sound = audio_messages(audio, warn)
    frames = video_messages(video, len(sound) * CHUNK_SAMPLES / SAMPLE_RATE)
    messages = sorted(sound + frames, key=lambda m: (m.timestamp_ns, m.topic))
    return write_mcap_file(out, messages)
