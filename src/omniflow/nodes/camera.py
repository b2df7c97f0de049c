"""Camera node: stamped frames from a V4L2 camera, a Pi camera, a video file or a folder."""

from __future__ import annotations

import threading

import cv2
from sensor_msgs.msg import CompressedImage, Image

from omniflow.core import image_codec
from omniflow.core.params import ParamSpec
from omniflow.core.stats import CaptureStats
from omniflow.core.timing import NS_PER_S, Pacer, StreamClock
from omniflow.devices.camera import FrameSource, open_frame_source
from omniflow.ros import conversions
from omniflow.ros.device_node import DeviceNode
from omniflow.ros.qos import SENSOR_DATA
from omniflow.ros.run import run_node

ENCODINGS = ("rgb8", "bgr8", "mono8")

PARAMS = (
    ParamSpec(
        "source",
        "device",
        "Where frames come from: a V4L2/OpenCV camera, a Raspberry "
        "Pi camera through picamera2, a video file, or a folder of images",
        choices=("device", "picamera2", "video", "folder"),
    ),
    ParamSpec("device", "0", "Camera for source 'device': a V4L2 index or a /dev/video path"),
    ParamSpec("path", "", "Video file or image folder for sources 'video' and 'folder'"),
    ParamSpec("loop", True, "Start a video or folder again at its end"),
    ParamSpec(
        "fps",
        15.0,
        "Frames published per second (the power manager switches "
        "30/15/10); files are paced at this rate",
        unit="frames/s",
        minimum=0.5,
        maximum=60.0,
        live=True,
    ),
    ParamSpec("encoding", "rgb8", "Encoding of the published image", choices=ENCODINGS, live=True),
    ParamSpec(
        "width",
        0,
        "Resize to this width before publishing; 0 keeps the source's "
        "(or its aspect ratio when only height is set)",
        unit="px",
        minimum=0,
        maximum=7680,
        live=True,
    ),
    ParamSpec(
        "height",
        0,
        "Resize to this height before publishing; 0 keeps the source's "
        "(or its aspect ratio when only width is set)",
        unit="px",
        minimum=0,
        maximum=4320,
        live=True,
    ),
    ParamSpec("compressed", False, "Also publish JPEG frames on image_raw/compressed", live=True),
    ParamSpec(
        "jpeg_quality",
        80,
        "JPEG quality of the compressed frames",
        minimum=1,
        maximum=100,
        live=True,
    ),
)


def output_size(width: int, height: int, want_width: int, want_height: int) -> tuple[int, int]:
    """The published (width, height): a 0 keeps the source's size, or its aspect ratio when
    only the other side is given."""
    if want_width and want_height:
        return want_width, want_height
    if want_width:
        return want_width, max(1, round(height * want_width / width))
    if want_height:
        return max(1, round(width * want_height / height)), want_height
    return width, height


class CameraNode(DeviceNode):
    """Publishes camera (or file) frames, stamped at capture, at a live-settable rate.

    ROS contract:
        node name: ``camera`` (lifecycle; autostarts unless ``autostart:=false``)
        publishes:
            ``image_raw`` (sensor_msgs/Image, sensor-data QoS) at ``fps``; ``header.stamp``
            is the capture time on the node clock (for files: stream time from activation,
            exactly 1/fps apart).
            ``image_raw/compressed`` (sensor_msgs/CompressedImage, sensor-data QoS) when
            ``compressed`` is true.
            ``/diagnostics`` (diagnostic_msgs/DiagnosticArray, 1 Hz).
        parameters: see ``PARAMS``; ``fps``, ``encoding``, ``width``, ``height``,
            ``compressed`` and ``jpeg_quality`` apply at once.
    """

    default_frame_id = "camera"

    def __init__(self, **kwargs) -> None:
        self.stats = CaptureStats()
        super().__init__("camera", PARAMS, **kwargs)
        self._image_pub = None
        self._compressed_pub = None
        self._pacer: Pacer | None = None
        self._stream: StreamClock | None = None
        self._last_capture: float | None = None

    @property
    def period_s(self) -> float:
        return 1.0 / self.params["fps"]

    def open_device(self) -> FrameSource:
        params = self.params
        location = params["device"] if params["source"] == "device" else params["path"]
        source = open_frame_source(
            params["source"],
            location,
            loop=params["loop"],
            width=params["width"],
            height=params["height"],
            fps=params["fps"],
            warn=self.get_logger().warning,
        )
        source.open()
        return source

    def create_outputs(self) -> None:
        self._image_pub = self.create_lifecycle_publisher(Image, "image_raw", SENSOR_DATA)
        self._compressed_pub = self.create_lifecycle_publisher(
            CompressedImage, "image_raw/compressed", SENSOR_DATA
        )

    def destroy_outputs(self) -> None:
        self.destroy_lifecycle_publisher(self._image_pub)
        self.destroy_lifecycle_publisher(self._compressed_pub)
        self._image_pub = self._compressed_pub = None

    def start_stream(self) -> None:
        self._pacer = Pacer(self.period_s)
        self._stream = StreamClock(self.now_ns())
        self._last_capture = None

    def apply_live(self, changes: dict[str, object]) -> None:
        if "fps" in changes:
            if self._pacer is not None:  # None until the first activation
                self._pacer.set_period(self.period_s)
            self.device.set_fps(self.params["fps"])
            self.get_logger().info(f"publishing at {self.params['fps']:g} frames/s")

    def step(self, stop: threading.Event) -> None:
        source = self.device
        if source.paced_by_device:
            frame = source.read()
            # A device may run faster than the requested rate: publish at most fps frames.
            if (
                self._last_capture is not None
                and frame.capture_time - self._last_capture < 0.9 * self.period_s
            ):
                return
            self._last_capture = frame.capture_time
            stamp_ns = self.stamp_from_monotonic(frame.capture_time)
        else:
            if not self._pacer.wait(stop):
                return
            frame = source.read()
            self.stats.pacing_resyncs = self._pacer.resyncs
            stamp_ns = self._stream.tick(int(self.period_s * NS_PER_S))
        self._publish(frame.image, stamp_ns)

    def _publish(self, bgr, stamp_ns: int) -> None:
        params = self.params
        size = output_size(bgr.shape[1], bgr.shape[0], params["width"], params["height"])
        if size != (bgr.shape[1], bgr.shape[0]):
            bgr = cv2.resize(bgr, size, interpolation=cv2.INTER_AREA)
        pixels = image_codec.convert(bgr, "bgr8", params["encoding"])
        self._image_pub.publish(
            conversions.image(pixels, params["encoding"], stamp_ns=stamp_ns, frame_id=self.frame_id)
        )
        if params["compressed"]:
            ok, jpeg = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, params["jpeg_quality"]])
            if ok:
                self._compressed_pub.publish(
                    CompressedImage(
                        header=conversions.header(stamp_ns, self.frame_id),
                        format="bgr8; jpeg compressed bgr8",
                        data=conversions.byte_array(jpeg),
                    )
                )
        self.stats.published += 1


def main(args: list[str] | None = None) -> int:
    return run_node(CameraNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
