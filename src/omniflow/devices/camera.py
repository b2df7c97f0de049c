"""Frame sources: live cameras and recorded files behind one small interface.

The camera node does not care where pictures come from. A :class:`FrameSource`
hands out :class:`Frame` objects holding a BGR ``uint8`` image (the OpenCV
convention; every source converts to it), a capture time and a running index.
Live devices block in :meth:`FrameSource.read` until the device delivers and
stamp frames on ``time.monotonic()`` as close to the exposure as the driver
allows; file sources return the next frame at once with no capture time, and
the node paces and stamps them in stream time.

Library errors (OpenCV, picamera2, the file system) are translated here into
:mod:`omniflow.errors` types whose messages name the device or path and say
what to do.

Implementations: :class:`OpenCVDeviceSource` (V4L2 webcams),
:class:`Picamera2Source` (Raspberry Pi CSI cameras), :class:`VideoFileSource`
and :class:`ImageFolderSource`; :func:`open_frame_source` builds one from the
``source``/``location`` parameters of the node.
"""

from __future__ import annotations

import abc
import concurrent.futures
import contextlib
import glob
import logging
import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from omniflow.core.timing import NS_PER_S
from omniflow.devices.base import Device
from omniflow.errors import ConfigError, DeviceNotFoundError, SourceError, SourceExhausted

__all__ = [
    "FRAME_SOURCE_KINDS",
    "IMAGE_EXTENSIONS",
    "Frame",
    "FrameSource",
    "ImageFolderSource",
    "OpenCVDeviceSource",
    "Picamera2Source",
    "VideoFileSource",
    "Warn",
    "open_frame_source",
]

Warn = Callable[[str], None]
"""Sink for non-fatal problems (a node passes ``self.get_logger().warning``)."""

FRAME_SOURCE_KINDS: tuple[str, ...] = ("device", "picamera2", "video", "folder")
"""The values :func:`open_frame_source` accepts for ``source``."""

IMAGE_EXTENSIONS: tuple[str, ...] = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff")
"""File name endings :class:`ImageFolderSource` plays (matched case-insensitively)."""

PICAMERA2_MISSING = (
    "picamera2 is not installed (on a Raspberry Pi: sudo apt install python3-picamera2)"
)

# A device stamp older than this (or in the future) is not trusted: the driver
# is probably using another clock, and the time the frame reached us is used.
_MAX_STAMP_AGE_S = 1.0

_log = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)
class Frame:
    """One picture from a source.

    ``image`` is BGR ``uint8`` of shape (H, W, 3). ``capture_time`` is seconds
    on ``time.monotonic()`` for live devices and ``None`` for file sources.
    ``index`` counts the frames this source object produced, from 0, across
    loops and re-opens. (``eq=False``: numpy arrays do not compare to a bool.)
    """

    image: np.ndarray
    capture_time: float | None
    index: int


class FrameSource(Device):
    """A camera or a recording that produces :class:`Frame` objects.

    Lifecycle: construct (cheap, validates arguments), :meth:`open` (acquires
    the device or file), :meth:`read` repeatedly, :meth:`close` (idempotent).
    Sources are also context managers that open and close themselves.
    """

    paced_by_device: bool = False
    """True: read() blocks until the device delivers. False: the caller paces."""

    def __init__(self, warn: Warn | None = None) -> None:
        self._warn: Warn = warn if warn is not None else _log.warning
        self._produced = 0

    @abc.abstractmethod
    def open(self) -> None:
        """Acquire the device or file; a no-op when already open.

        Raises SourceError (DeviceNotFoundError for a missing device) with a
        message naming the device or path and what to do about it.
        """

    @abc.abstractmethod
    def read(self) -> Frame:
        """Return the next frame.

        Raises SourceExhausted at the end of a non-looping file source and
        SourceError when reading fails or the source is not open.
        """

    @abc.abstractmethod
    def close(self) -> None:
        """Release the device or file; safe to call repeatedly or before open()."""

    def set_fps(self, fps: float) -> None:
        """Ask a live device for ``fps`` frames per second (best effort).

        File sources ignore it (the caller paces them) but still reject a
        non-positive rate so a bad parameter is caught whatever the source.
        """
        _check_fps(fps)

    @abc.abstractmethod
    def describe(self) -> str:
        """One line for logs, e.g. ``video file /x/y.avi (640x480, 120 frames, loop)``."""

    def _emit(self, image: np.ndarray, capture_time: float | None) -> Frame:
        frame = Frame(image=image, capture_time=capture_time, index=self._produced)
        self._produced += 1
        return frame

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: {self.describe()}>"


# --- helpers ---------------------------------------------------------------------------


def _check_fps(fps: float) -> float:
    if not fps > 0:  # also rejects NaN
        raise ConfigError(f"fps must be positive; got {fps}")
    return float(fps)


def _check_size(width: int, height: int) -> tuple[int, int]:
    if width < 0 or height < 0 or (width == 0) != (height == 0):
        raise ConfigError(
            f"width and height must both be positive, or both 0 for the device default; "
            f"got {width}x{height}"
        )
    return int(width), int(height)


def _to_bgr(image: np.ndarray, origin: str) -> np.ndarray:
    """Return ``image`` as BGR uint8 (H, W, 3): grey is replicated, alpha dropped."""
    if image.dtype != np.uint8:
        raise SourceError(f"{origin} produced {image.dtype.name} pixels; only 8-bit is supported")
    if image.ndim == 2 or (image.ndim == 3 and image.shape[2] == 1):
        return cv2.cvtColor(image, cv2.COLOR_GRAY2BGR)
    if image.ndim == 3 and image.shape[2] == 3:
        return image
    if image.ndim == 3 and image.shape[2] == 4:
        return cv2.cvtColor(image, cv2.COLOR_BGRA2BGR)
    raise SourceError(
        f"{origin} produced an image of shape {image.shape}; expected grey, BGR or BGRA"
    )


def _stamp_to_monotonic(
    stamp: float, clock_now: float, monotonic_now: float, fallback: float
) -> float:
    """Map a driver stamp (seconds on some clock) onto ``time.monotonic()``.

    ``clock_now`` is the stamp's clock read at ``monotonic_now``. A stamp that
    is zero, in the future or older than a second is not trusted (the driver
    uses another clock or none), and ``fallback`` is returned instead.
    """
    age = clock_now - stamp
    if stamp > 0 and 0.0 <= age <= _MAX_STAMP_AGE_S:
        return monotonic_now - age
    return fallback


def _natural_key(path: Path) -> list[Any]:
    """Sort key putting ``frame2.png`` before ``frame10.png``."""
    return [
        int(part) if part.isdecimal() else part.lower() for part in re.split(r"(\d+)", path.name)
    ]


def _list_video_devices() -> list[str]:
    """The /dev/video* nodes that exist, in numeric order."""
    return sorted(glob.glob("/dev/video*"), key=lambda name: _natural_key(Path(name)))


def _v4l2_target(device: int | str) -> int | str:
    """What to hand cv2.VideoCapture: the index N when ``device`` is, or links to, /dev/videoN.

    Opening by index works in every OpenCV build, while some builds cannot open a
    V4L2 device by name; resolving links also makes /dev/v4l/by-id/... names work.
    """
    if isinstance(device, int):
        return device
    match = re.fullmatch(r"/dev/video(\d+)", os.path.realpath(device))
    return int(match.group(1)) if match else device


def _video_devices_hint() -> str:
    devices = _list_video_devices()
    if devices:
        return f"video devices present: {', '.join(devices)}"
    return "no /dev/video* devices exist: is a camera connected (lsusb) and its driver loaded?"


# --- live devices ----------------------------------------------------------------------


class OpenCVDeviceSource(FrameSource):
    """A V4L2 camera (USB webcam, HDMI grabber) read through OpenCV.

    ``device`` is a V4L2 index (``0`` means /dev/video0) or a path under /dev,
    e.g. /dev/video2 or a stable /dev/v4l/by-id/... link.
    The driver queue is cut to one buffer so each read returns a fresh frame
    rather than one that waited in the queue. ``width``/``height`` 0 keep the
    driver's current mode. Capture times come from the V4L2 buffer timestamp
    (``CLOCK_MONOTONIC``, taken by the driver when the frame completed), or
    from the moment the frame was dequeued when the driver's stamp is unusable.
    """

    paced_by_device = True

    def __init__(
        self,
        device: int | str,
        width: int = 0,
        height: int = 0,
        fps: float = 30.0,
        *,
        warn: Warn | None = None,
    ) -> None:
        super().__init__(warn)
        if isinstance(device, str) and device.strip().isdecimal():
            device = int(device)
        if isinstance(device, int) and device < 0:
            raise ConfigError(f"camera index must be 0 or more; got {device}")
        if isinstance(device, str) and not device.startswith("/dev/"):
            raise ConfigError(
                f"camera device must be a V4L2 index like 0 or a path like /dev/video0; got "
                f"{device!r} (use source 'video' for a video file)"
            )
        self._device: int | str = device
        self._width, self._height = _check_size(width, height)
        self._fps = _check_fps(fps)
        self._capture: cv2.VideoCapture | None = None
        self._mode = ""

    @property
    def _name(self) -> str:
        # OpenCV's V4L2 backend maps index N to /dev/videoN.
        return f"/dev/video{self._device}" if isinstance(self._device, int) else self._device

    def open(self) -> None:
        if self._capture is not None:
            return
        node = Path(self._name)
        if not node.exists():
            raise DeviceNotFoundError(
                f"camera {self._name} does not exist; {_video_devices_hint()}"
            )
        api = cv2.CAP_V4L2 if sys.platform.startswith("linux") else cv2.CAP_ANY
        capture = cv2.VideoCapture(_v4l2_target(self._device), api)
        if not capture.isOpened():
            capture.release()
            if not os.access(node, os.R_OK | os.W_OK):
                reason = "permission denied: add the user to the 'video' group and log in again"
            else:
                reason = (
                    "it is busy in another process, or not a capture node (UVC cameras also "
                    "create a metadata-only node; try the other number)"
                )
            raise SourceError(f"cannot open camera {self._name}: {reason}; {_video_devices_hint()}")
        capture.set(cv2.CAP_PROP_BUFFERSIZE, 1)
        if self._width:
            capture.set(cv2.CAP_PROP_FRAME_WIDTH, self._width)
            capture.set(cv2.CAP_PROP_FRAME_HEIGHT, self._height)
        self._capture = capture
        self.set_fps(self._fps)
        got_w = int(capture.get(cv2.CAP_PROP_FRAME_WIDTH))
        got_h = int(capture.get(cv2.CAP_PROP_FRAME_HEIGHT))
        if self._width and (got_w, got_h) != (self._width, self._height):
            self._warn(
                f"camera {self._name} delivers {got_w}x{got_h}, not the requested "
                f"{self._width}x{self._height}"
            )
        self._mode = f"{got_w}x{got_h} @ {capture.get(cv2.CAP_PROP_FPS):g} fps"

    def read(self) -> Frame:
        capture = self._capture
        if capture is None:
            raise SourceError(f"camera {self._name} is not open; call open() first")
        # grab() dequeues the buffer (bounded by the V4L2 backend's select timeout,
        # 10 s by default); decoding in retrieve() comes after the stamp is taken.
        if not capture.grab():
            raise SourceError(
                f"camera {self._name} delivered no frame (unplugged, or stalled by the driver?)"
            )
        dequeued_at = time.monotonic()
        driver_stamp = capture.get(cv2.CAP_PROP_POS_MSEC) / 1000.0
        ok, image = capture.retrieve()
        if not ok or image is None:
            raise SourceError(f"camera {self._name} returned a frame that could not be decoded")
        capture_time = _stamp_to_monotonic(driver_stamp, dequeued_at, dequeued_at, dequeued_at)
        return self._emit(_to_bgr(image, f"camera {self._name}"), capture_time)

    def close(self) -> None:
        capture, self._capture = self._capture, None
        if capture is not None:
            capture.release()

    def set_fps(self, fps: float) -> None:
        self._fps = _check_fps(fps)
        if self._capture is not None and not self._capture.set(cv2.CAP_PROP_FPS, self._fps):
            self._warn(f"camera {self._name} refused {self._fps:g} fps; keeping its own rate")

    def describe(self) -> str:
        return f"V4L2 camera {self._name} ({self._mode or 'not opened'})"


class Picamera2Source(FrameSource):
    """A Raspberry Pi CSI camera through picamera2/libcamera.

    The main stream is configured as ``RGB888``, which libcamera names after
    the 32-bit word and so lays out in memory as B, G, R: the array is BGR
    already and is used without conversion. The frame rate is fixed with the
    ``FrameDurationLimits`` control (minimum = maximum = 1/fps). ``queue=False``
    makes every read wait for a frame exposed after the request, so frames are
    never stale. Capture times come from the ``SensorTimestamp`` metadata
    (start of exposure on ``CLOCK_BOOTTIME``) mapped onto ``time.monotonic()``.

    ``width``/``height`` 0 keep picamera2's default video size. picamera2 is
    imported in :meth:`open`, so this module imports on any machine.
    """

    paced_by_device = True

    def __init__(
        self,
        width: int = 0,
        height: int = 0,
        fps: float = 30.0,
        *,
        camera_num: int = 0,
        warn: Warn | None = None,
    ) -> None:
        super().__init__(warn)
        self._width, self._height = _check_size(width, height)
        self._fps = _check_fps(fps)
        if camera_num < 0:
            raise ConfigError(f"camera_num must be 0 or more; got {camera_num}")
        self._camera_num = int(camera_num)
        self._camera: Any = None
        self._mode = ""

    @property
    def _name(self) -> str:
        return f"Raspberry Pi camera {self._camera_num}"

    @property
    def _read_timeout(self) -> float:
        """Seconds a read may wait: several frame periods, at least one second."""
        return max(1.0, 4.0 / self._fps)

    def _frame_duration_us(self) -> int:
        return round(1_000_000 / self._fps)

    def open(self) -> None:
        if self._camera is not None:
            return
        try:
            from picamera2 import Picamera2
        except ImportError as err:
            raise SourceError(PICAMERA2_MISSING) from err
        cameras = Picamera2.global_camera_info()
        if self._camera_num >= len(cameras):
            found = ", ".join(f"{i}: {info.get('Model', '?')}" for i, info in enumerate(cameras))
            raise DeviceNotFoundError(
                f"{self._name} not found; cameras detected: {found or 'none'} (check the ribbon "
                "cable and its orientation, then `rpicam-hello --list-cameras`)"
            )
        try:
            camera = Picamera2(self._camera_num)
        except Exception as err:  # picamera2 raises a bare RuntimeError for everything
            raise SourceError(
                f"cannot open {self._name}: {err} (is another process such as rpicam-vid or a "
                "second node using it?)"
            ) from err
        try:
            main: dict[str, Any] = {"format": "RGB888"}
            if self._width:
                main["size"] = (self._width, self._height)
            duration = self._frame_duration_us()
            config = camera.create_video_configuration(
                main=main, controls={"FrameDurationLimits": (duration, duration)}, queue=False
            )
            camera.configure(config)
            camera.start()
            width, height = camera.camera_config["main"]["size"]
        except Exception as err:
            with contextlib.suppress(Exception):  # report the first failure, not this one
                camera.close()
            raise SourceError(f"cannot start {self._name} with {main}: {err}") from err
        if self._width and (width, height) != (self._width, self._height):
            self._warn(
                f"{self._name} delivers {width}x{height}, not the requested "
                f"{self._width}x{self._height}"
            )
        model = camera.camera_properties.get("Model", "unknown model")
        self._mode = f"{model}, {width}x{height} @ {self._fps:g} fps"
        self._camera = camera

    def read(self) -> Frame:
        camera = self._camera
        if camera is None:
            raise SourceError(f"{self._name} is not open; call open() first")
        try:
            job = camera.capture_request(wait=False)
            request = job.get_result(timeout=self._read_timeout)
        except (TimeoutError, concurrent.futures.TimeoutError) as err:
            cancel = getattr(camera, "cancel_all_and_flush", None)
            if cancel is not None:
                cancel()  # so the late request is not left holding a buffer
            raise SourceError(
                f"{self._name} delivered no frame within {self._read_timeout:.1f} s"
            ) from err
        except Exception as err:
            raise SourceError(f"{self._name} failed to capture: {err}") from err
        received_at = time.monotonic()
        try:
            image = request.make_array("main")  # a copy: safe after release()
            metadata = request.get_metadata()
        finally:
            request.release()  # the buffer goes back to libcamera at once
        capture_time = received_at
        sensor_ns = metadata.get("SensorTimestamp")
        boottime = getattr(time, "CLOCK_BOOTTIME", None)
        if sensor_ns and boottime is not None:
            capture_time = _stamp_to_monotonic(
                sensor_ns / NS_PER_S, time.clock_gettime(boottime), time.monotonic(), received_at
            )
        return self._emit(_to_bgr(image, self._name), capture_time)

    def close(self) -> None:
        camera, self._camera = self._camera, None
        if camera is None:
            return
        try:
            camera.stop()
            camera.close()
        except Exception as err:  # closing must not fail a lifecycle transition
            self._warn(f"error while closing {self._name}: {err}")

    def set_fps(self, fps: float) -> None:
        self._fps = _check_fps(fps)
        if self._camera is not None:
            duration = self._frame_duration_us()
            self._camera.set_controls({"FrameDurationLimits": (duration, duration)})

    def describe(self) -> str:
        return f"{self._name} ({self._mode or 'not opened'})"


# --- recordings ------------------------------------------------------------------------


class VideoFileSource(FrameSource):
    """A video file decoded by OpenCV (FFmpeg), rewound at its end when ``loop``.

    open() decodes the first frame, so a file OpenCV cannot read fails there
    rather than at the first read(). Frames have no capture time.
    """

    def __init__(
        self, path: str | os.PathLike[str], loop: bool = True, *, warn: Warn | None = None
    ) -> None:
        super().__init__(warn)
        self._path = Path(path).expanduser()
        self._loop = bool(loop)
        self._capture: cv2.VideoCapture | None = None
        self._pending: np.ndarray | None = None
        self._info = ""
        self._native_fps: float | None = None

    @property
    def native_fps(self) -> float | None:
        """The frame rate the container declares (known after open(); None if absent)."""
        return self._native_fps

    def _open_capture(self) -> tuple[cv2.VideoCapture, np.ndarray]:
        capture = cv2.VideoCapture(str(self._path))
        ok, image = capture.read() if capture.isOpened() else (False, None)
        if not ok or image is None:
            capture.release()
            raise SourceError(
                f"cannot decode video file {self._path}: OpenCV could not read a frame from it "
                "(is it a video in a format this OpenCV/FFmpeg build supports, e.g. MJPG .avi "
                "or H.264 .mp4, and not truncated?)"
            )
        return capture, image

    def open(self) -> None:
        if self._capture is not None:
            return
        if not self._path.is_file():
            what = "is not a file" if self._path.exists() else "does not exist"
            raise SourceError(f"video file {self._path} {what}")
        capture, first = self._open_capture()
        self._capture, self._pending = capture, first
        fps = capture.get(cv2.CAP_PROP_FPS)
        self._native_fps = fps if fps > 0 else None
        count = int(capture.get(cv2.CAP_PROP_FRAME_COUNT))
        parts = [f"{first.shape[1]}x{first.shape[0]}"]
        if count > 0:
            parts.append(f"{count} frames")
        if self._native_fps:
            parts.append(f"{self._native_fps:g} fps")
        self._info = ", ".join(parts) + ", "

    def _rewind(self, capture: cv2.VideoCapture) -> np.ndarray:
        """First frame again: seek to 0, or reopen for containers that cannot seek."""
        if capture.set(cv2.CAP_PROP_POS_FRAMES, 0):
            ok, image = capture.read()
            if ok and image is not None:
                return image
        capture.release()
        self._capture, image = self._open_capture()
        return image

    def read(self) -> Frame:
        capture = self._capture
        if capture is None:
            raise SourceError(f"video file {self._path} is not open; call open() first")
        if self._pending is not None:
            image, self._pending = self._pending, None
        else:
            ok, image = capture.read()
            if not ok or image is None:  # OpenCV reports the end of the file this way
                if not self._loop:
                    raise SourceExhausted(f"video file {self._path} ended (loop is off)")
                image = self._rewind(capture)
        return self._emit(_to_bgr(image, f"video file {self._path}"), None)

    def close(self) -> None:
        capture, self._capture = self._capture, None
        self._pending = None
        if capture is not None:
            capture.release()

    def describe(self) -> str:
        opened = self._info if self._capture is not None else "not opened, "
        return f"video file {self._path} ({opened}{'loop' if self._loop else 'once'})"


class ImageFolderSource(FrameSource):
    """The image files of one folder played as a stream, in natural name order.

    Files ending in one of :data:`IMAGE_EXTENSIONS` (any case) are used, sorted
    so that ``frame2`` comes before ``frame10``; sub-folders are not searched.
    A file that cannot be read or decoded is reported through ``warn`` and
    dropped from the playlist; when no file at all is readable open() or
    read() raises SourceError. Grey and alpha images are converted to BGR.
    """

    def __init__(
        self, path: str | os.PathLike[str], loop: bool = True, *, warn: Warn | None = None
    ) -> None:
        super().__init__(warn)
        self._path = Path(path).expanduser()
        self._loop = bool(loop)
        self._files: list[Path] | None = None  # None while closed
        self._listed = 0
        self._position = 0
        self._pending: np.ndarray | None = None

    def _decode(self, file: Path) -> np.ndarray | None:
        """The image as BGR, or None (with a warning) when it cannot be used."""
        try:
            encoded = np.frombuffer(file.read_bytes(), dtype=np.uint8)
            image = cv2.imdecode(encoded, cv2.IMREAD_COLOR) if encoded.size else None
        except OSError as err:
            self._warn(f"skipping image {file}: cannot read it ({err.strerror or err})")
            return None
        except cv2.error as err:
            self._warn(f"skipping image {file}: OpenCV failed to decode it ({err})")
            return None
        if image is None:
            self._warn(f"skipping image {file}: not a decodable image (corrupt or empty)")
            return None
        return _to_bgr(image, f"image {file}")

    def _next_image(self) -> np.ndarray:
        """Decode the next playable file, dropping unreadable ones."""
        files = self._files
        assert files is not None
        while files:
            if self._position >= len(files):
                if not self._loop:
                    raise SourceExhausted(f"image folder {self._path} ended (loop is off)")
                self._position = 0
            file = files[self._position]
            image = self._decode(file)
            if image is None:
                del files[self._position]
                continue
            self._position += 1
            return image
        raise SourceError(
            f"none of the {self._listed} image files in {self._path} could be read or decoded"
        )

    def open(self) -> None:
        if self._files is not None:
            return
        if not self._path.is_dir():
            what = "is not a folder" if self._path.exists() else "does not exist"
            raise SourceError(f"image folder {self._path} {what}")
        try:
            files = [
                entry
                for entry in self._path.iterdir()
                if entry.suffix.lower() in IMAGE_EXTENSIONS and entry.is_file()
            ]
        except OSError as err:
            raise SourceError(f"cannot list image folder {self._path}: {err}") from err
        if not files:
            raise SourceError(
                f"image folder {self._path} has no image files ({', '.join(IMAGE_EXTENSIONS)})"
            )
        self._files = sorted(files, key=_natural_key)
        self._listed = len(files)
        self._position = 0
        try:
            self._pending = self._next_image()  # fail now if nothing is readable
        except SourceError:
            self._files = None
            raise

    def read(self) -> Frame:
        if self._files is None:
            raise SourceError(f"image folder {self._path} is not open; call open() first")
        if self._pending is not None:
            image, self._pending = self._pending, None
        else:
            image = self._next_image()
        return self._emit(image, None)

    def close(self) -> None:
        self._files = None
        self._pending = None

    def describe(self) -> str:
        if self._files is None:
            opened = "not opened"
        else:
            opened = f"{len(self._files)} images"
        return f"image folder {self._path} ({opened}, {'loop' if self._loop else 'once'})"


# --- factory ---------------------------------------------------------------------------


def open_frame_source(
    source: str,
    location: str,
    *,
    loop: bool = True,
    width: int = 0,
    height: int = 0,
    fps: float = 30.0,
    warn: Warn | None = None,
) -> FrameSource:
    """Build (but do not open) the frame source a node's parameters describe.

    ``source`` is one of :data:`FRAME_SOURCE_KINDS`; ``location`` is read
    according to it: ``device``, a V4L2 index (``"0"``) or path
    (``"/dev/video0"``); ``picamera2``, the camera number (empty means 0);
    ``video``, a video file; ``folder``, a folder of images. ``width``,
    ``height`` and ``fps`` go to live devices; ``loop`` to file sources (the
    node resizes and paces files itself).
    """
    if source == "device":
        if not location.strip():
            raise ConfigError(
                "source 'device' needs a location: a V4L2 index like '0' or a path like "
                "'/dev/video0'"
            )
        return OpenCVDeviceSource(location.strip(), width, height, fps, warn=warn)
    if source == "picamera2":
        number = location.strip() or "0"
        if not number.isdigit():
            raise ConfigError(
                f"source 'picamera2' takes a camera number as location (or ''); got {location!r}"
            )
        return Picamera2Source(width, height, fps, camera_num=int(number), warn=warn)
    if source in ("video", "folder"):
        if not location.strip():
            kind = "a video file" if source == "video" else "a folder of images"
            raise ConfigError(f"source {source!r} needs a location: the path of {kind}")
        cls = VideoFileSource if source == "video" else ImageFolderSource
        return cls(location, loop, warn=warn)
    raise ConfigError(f"unknown frame source {source!r}; allowed: {', '.join(FRAME_SOURCE_KINDS)}")
