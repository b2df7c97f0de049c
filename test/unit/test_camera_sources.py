"""Tier 1 tests of omniflow.devices.camera: file sources for real, devices through fakes."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from types import SimpleNamespace

import cv2
import numpy as np
import pytest
import skimage.data

from omniflow.devices import camera
from omniflow.devices.camera import (
    FRAME_SOURCE_KINDS,
    PICAMERA2_MISSING,
    Frame,
    ImageFolderSource,
    OpenCVDeviceSource,
    Picamera2Source,
    VideoFileSource,
    open_frame_source,
)
from omniflow.errors import ConfigError, DeviceNotFoundError, SourceError, SourceExhausted

VIDEO_FRAMES = 6
VIDEO_SIZE = (64, 48)  # width, height
VIDEO_FPS = 15.0


def video_frame(i: int) -> np.ndarray:
    """Frame ``i`` of the test video: a grey level and a white block that both move with i."""
    width, height = VIDEO_SIZE
    image = np.full((height, width, 3), 30 + 35 * i, dtype=np.uint8)
    image[8:24, 8 * i : 8 * i + 16] = 255
    return image


@pytest.fixture(scope="module")
def video_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("video") / "clip.avi"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), VIDEO_FPS, VIDEO_SIZE)
    assert writer.isOpened()
    for i in range(VIDEO_FRAMES):
        writer.write(video_frame(i))
    writer.release()
    return path


def small(image: np.ndarray, step: int = 8) -> np.ndarray:
    return np.ascontiguousarray(image[::step, ::step])


# Files in natural order; "broken.png" sorts first and must be skipped.
FOLDER_IMAGES = {
    "frame1.png": lambda: cv2.cvtColor(small(skimage.data.astronaut()), cv2.COLOR_RGB2BGR),
    "frame2.jpg": lambda: cv2.cvtColor(small(skimage.data.coffee()), cv2.COLOR_RGB2BGR),
    "frame3.PNG": lambda: small(skimage.data.camera()),  # grey
    "frame10.png": lambda: cv2.cvtColor(small(skimage.data.logo(), 10), cv2.COLOR_RGBA2BGRA),
}
PLAYABLE = ["frame1.png", "frame2.jpg", "frame3.PNG", "frame10.png"]


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("images")
    for name, make in FOLDER_IMAGES.items():
        assert cv2.imwrite(str(folder / name), make())
    (folder / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    (folder / "notes.txt").write_text("not an image")
    return folder


class Warnings(list):
    """A ``warn`` callable that keeps what it was given."""

    def __call__(self, message: str) -> None:
        self.append(message)


def read_all(source, count: int) -> list[Frame]:
    return [source.read() for _ in range(count)]


# --- image folder ----------------------------------------------------------------------


def test_folder_plays_in_natural_order_and_skips_a_corrupt_file(image_folder):
    warnings = Warnings()
    with ImageFolderSource(image_folder, warn=warnings) as source:
        frames = read_all(source, len(PLAYABLE))

    expected = [FOLDER_IMAGES[name]() for name in PLAYABLE]
    assert [f.image.shape[:2] for f in frames] == [e.shape[:2] for e in expected]
    np.testing.assert_array_equal(frames[0].image, expected[0])  # PNG is lossless
    assert [f.index for f in frames] == [0, 1, 2, 3]
    assert all(f.capture_time is None for f in frames)
    assert all(f.image.dtype == np.uint8 and f.image.shape[2] == 3 for f in frames)
    assert len(warnings) == 1 and str(image_folder / "broken.png") in warnings[0]


def test_folder_converts_grey_and_alpha_to_bgr(image_folder):
    with ImageFolderSource(image_folder, warn=Warnings()) as source:
        _, _, grey, alpha = read_all(source, 4)
    channels = grey.image.reshape(-1, 3)
    assert (channels == channels[:, :1]).all()  # grey replicated into B, G and R
    assert alpha.image.shape == FOLDER_IMAGES["frame10.png"]().shape[:2] + (3,)


def test_folder_loops_with_a_running_index(image_folder):
    warnings = Warnings()
    with ImageFolderSource(image_folder, loop=True, warn=warnings) as source:
        frames = read_all(source, 2 * len(PLAYABLE) + 1)
    np.testing.assert_array_equal(frames[4].image, frames[0].image)
    np.testing.assert_array_equal(frames[8].image, frames[0].image)
    assert [f.index for f in frames] == list(range(9))
    assert len(warnings) == 1  # the broken file is dropped, not reported every loop


def test_folder_without_loop_is_exhausted(image_folder):
    with ImageFolderSource(image_folder, loop=False, warn=Warnings()) as source:
        read_all(source, len(PLAYABLE))
        with pytest.raises(SourceExhausted, match=str(image_folder)):
            source.read()


def test_folder_without_images_names_it(tmp_path):
    (tmp_path / "readme.txt").write_text("hi")
    with pytest.raises(SourceError) as info:
        ImageFolderSource(tmp_path).open()
    assert str(tmp_path) in str(info.value) and ".png" in str(info.value)


def test_folder_with_only_corrupt_images_fails_at_open(tmp_path):
    (tmp_path / "a.png").write_bytes(b"junk")
    (tmp_path / "b.jpg").write_bytes(b"")
    warnings = Warnings()
    source = ImageFolderSource(tmp_path, warn=warnings)
    with pytest.raises(SourceError, match="none of the 2 image files") as info:
        source.open()
    assert str(tmp_path) in str(info.value)
    assert len(warnings) == 2 and "a.png" in warnings[0] and "b.jpg" in warnings[1]
    with pytest.raises(SourceError, match="not open"):
        source.read()


@pytest.mark.parametrize("make", ["missing", "file"])
def test_folder_path_that_is_not_a_folder(tmp_path, make):
    path = tmp_path / "x"
    if make == "file":
        path.write_text("")
    with pytest.raises(SourceError, match="is not a folder|does not exist") as info:
        ImageFolderSource(path).open()
    assert str(path) in str(info.value)


# --- video file ------------------------------------------------------------------------


def test_video_reads_every_frame(video_file):
    with VideoFileSource(video_file, loop=False) as source:
        frames = read_all(source, VIDEO_FRAMES)
        with pytest.raises(SourceExhausted, match=str(video_file)):
            source.read()

    assert [f.index for f in frames] == list(range(VIDEO_FRAMES))
    for i, frame in enumerate(frames):
        assert frame.image.shape == (48, 64, 3) and frame.image.dtype == np.uint8
        assert frame.capture_time is None
        error = np.abs(frame.image.astype(int) - video_frame(i)).mean()
        assert error < 4, f"frame {i} differs from what was written (mean error {error:.1f})"


def test_video_loops_back_to_the_first_frame(video_file):
    with VideoFileSource(video_file) as source:
        frames = read_all(source, VIDEO_FRAMES + 2)
    np.testing.assert_array_equal(frames[VIDEO_FRAMES].image, frames[0].image)
    np.testing.assert_array_equal(frames[VIDEO_FRAMES + 1].image, frames[1].image)
    assert frames[-1].index == VIDEO_FRAMES + 1


def test_video_describe_and_native_fps(video_file):
    source = VideoFileSource(video_file)
    assert "not opened" in source.describe()
    with source:
        text = source.describe()
        assert source.native_fps == pytest.approx(VIDEO_FPS)
    assert str(video_file) in text
    assert "64x48" in text and f"{VIDEO_FRAMES} frames" in text and text.endswith("loop)")


def test_video_that_cannot_be_decoded_names_the_file(tmp_path):
    path = tmp_path / "broken.avi"
    path.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, np.uint8).tobytes())
    with pytest.raises(SourceError, match="cannot decode video file") as info:
        VideoFileSource(path).open()
    assert str(path) in str(info.value)


def test_missing_video_names_the_path(tmp_path):
    path = tmp_path / "nothing.avi"
    with pytest.raises(SourceError, match="does not exist") as info:
        VideoFileSource(path).open()
    assert str(path) in str(info.value)


def test_file_sources_before_open_and_after_close(video_file):
    source = VideoFileSource(video_file)
    source.close()  # closing a source never opened is fine
    with pytest.raises(SourceError, match="not open"):
        source.read()
    source.open()
    source.open()  # idempotent
    source.set_fps(5.0)  # files ignore it
    assert source.read().index == 0
    source.close()
    source.close()
    with pytest.raises(SourceError, match="not open"):
        source.read()
    with pytest.raises(ConfigError, match="fps must be positive"):
        source.set_fps(0.0)


SAMPLE_VIDEO = Path(__file__).resolve().parents[1] / "data" / "samples" / "scene.avi"


def test_committed_sample_video_plays():
    """scene.avi (made by scripts/make_sample_video.py): 60 frames of 320x240 at 15 fps."""
    with VideoFileSource(SAMPLE_VIDEO, loop=False) as source:
        assert source.native_fps == pytest.approx(15.0)
        frames = [source.read() for _ in range(60)]
        with pytest.raises(SourceExhausted):
            source.read()
    assert all(f.image.shape == (240, 320, 3) for f in frames)
    assert np.abs(frames[1].image.astype(int) - frames[0].image).max() > 100  # marker moved
    cut = np.abs(frames[30].image.astype(int) - frames[29].image).mean()
    assert cut > 40, "frame 30 should cut to the second photograph"


# --- factory ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "location", "cls", "paced"),
    [
        ("device", "0", OpenCVDeviceSource, True),
        ("device", "/dev/video2", OpenCVDeviceSource, True),
        ("picamera2", "", Picamera2Source, True),
        ("picamera2", "1", Picamera2Source, True),
        ("video", "/data/clip.avi", VideoFileSource, False),
        ("folder", "/data/frames", ImageFolderSource, False),
    ],
)
def test_factory_builds_each_kind(kind, location, cls, paced):
    source = open_frame_source(kind, location, width=320, height=240, fps=15.0)
    assert type(source) is cls
    assert source.paced_by_device is paced


def test_factory_reads_a_device_index_as_its_node():
    assert "/dev/video0" in open_frame_source("device", "0").describe()


def test_factory_rejects_an_unknown_kind_naming_the_allowed_ones():
    with pytest.raises(ConfigError) as info:
        open_frame_source("webcam", "0")
    assert "'webcam'" in str(info.value)
    assert all(kind in str(info.value) for kind in FRAME_SOURCE_KINDS)


@pytest.mark.parametrize(
    ("kind", "location", "fragment"),
    [
        ("device", "", "needs a location"),
        ("device", "clip.avi", "use source 'video'"),
        ("video", " ", "needs a location"),
        ("picamera2", "front", "camera number"),
    ],
)
def test_factory_rejects_a_bad_location(kind, location, fragment):
    with pytest.raises(ConfigError, match=fragment):
        open_frame_source(kind, location)


@pytest.mark.parametrize(
    ("width", "height", "fps", "fragment"),
    [(640, 0, 30.0, "both"), (-1, -1, 30.0, "both"), (0, 0, 0.0, "fps"), (0, 0, -5, "fps")],
)
def test_live_sources_reject_bad_settings(width, height, fps, fragment):
    for kind in ("device", "picamera2"):
        with pytest.raises(ConfigError, match=fragment):
            open_frame_source(kind, "0", width=width, height=height, fps=fps)


# --- V4L2 device (real error paths, fake capture for reads) ----------------------------


@pytest.mark.parametrize(
    ("present", "fragment"),
    [
        ([], "no /dev/video* devices exist"),
        (["/dev/video0", "/dev/video2"], "video devices present: /dev/video0, /dev/video2"),
    ],
)
def test_missing_device_lists_what_exists(monkeypatch, present, fragment):
    monkeypatch.setattr(camera, "_list_video_devices", lambda: present)
    with pytest.raises(DeviceNotFoundError) as info:
        OpenCVDeviceSource(57).open()
    assert "/dev/video57 does not exist" in str(info.value) and fragment in str(info.value)


def test_device_node_that_is_not_a_camera(monkeypatch):
    monkeypatch.setattr(camera, "_list_video_devices", lambda: [])
    with pytest.raises(SourceError, match="cannot open camera /dev/null") as info:
        OpenCVDeviceSource("/dev/null").open()
    assert not isinstance(info.value, DeviceNotFoundError)
    assert "not a capture node" in str(info.value)


def test_device_paths_and_links_open_by_index(tmp_path):
    link = tmp_path / "usb-Logitech_C920-video-index0"
    link.symlink_to("/dev/video4")  # what /dev/v4l/by-id/ holds
    assert camera._v4l2_target(str(link)) == 4
    assert camera._v4l2_target("/dev/video12") == 12
    assert camera._v4l2_target(3) == 3
    assert camera._v4l2_target("/dev/null") == "/dev/null"


class FakeCapture:
    """Enough of cv2.VideoCapture for OpenCVDeviceSource; delivers grey frames."""

    def __init__(self, device, api):
        self.device, self.api = device, api
        self.props = {cv2.CAP_PROP_FRAME_WIDTH: 640.0, cv2.CAP_PROP_FRAME_HEIGHT: 480.0}
        self.sets: list[tuple[int, float]] = []
        self.stamp_age = 0.005  # the driver stamped the frame 5 ms before grab() returned
        self.grab_ok = True
        self.released = False

    def isOpened(self):
        return True

    def set(self, prop, value):
        self.sets.append((prop, value))
        if prop == cv2.CAP_PROP_FPS:
            self.props[prop] = value
        return True

    def get(self, prop):
        if prop == cv2.CAP_PROP_POS_MSEC:
            return 0.0 if self.stamp_age is None else (time.monotonic() - self.stamp_age) * 1e3
        return self.props.get(prop, 0.0)

    def grab(self):
        return self.grab_ok

    def retrieve(self):
        return True, np.full((480, 640), 77, dtype=np.uint8)

    def release(self):
        self.released = True


@pytest.fixture
def fake_capture(monkeypatch) -> list[FakeCapture]:
    """Replace cv2.VideoCapture; the list receives every capture the source creates."""
    created: list[FakeCapture] = []

    def make(device, api):
        created.append(FakeCapture(device, api))
        return created[-1]

    monkeypatch.setattr(camera.cv2, "VideoCapture", make)
    return created


def test_device_is_configured_for_fresh_frames(fake_capture):
    warnings = Warnings()
    source = OpenCVDeviceSource("/dev/null", 1280, 720, 15.0, warn=warnings)
    source.open()
    capture = fake_capture[0]
    assert (cv2.CAP_PROP_BUFFERSIZE, 1) in capture.sets
    assert (cv2.CAP_PROP_FRAME_WIDTH, 1280) in capture.sets
    assert (cv2.CAP_PROP_FPS, 15.0) in capture.sets
    assert warnings == ["camera /dev/null delivers 640x480, not the requested 1280x720"]
    assert source.describe() == "V4L2 camera /dev/null (640x480 @ 15 fps)"
    source.set_fps(5.0)
    assert capture.sets[-1] == (cv2.CAP_PROP_FPS, 5.0)
    source.close()
    source.close()
    assert capture.released


def test_device_frames_are_bgr_and_stamped_by_the_driver(fake_capture):
    with OpenCVDeviceSource("/dev/null") as source:
        before = time.monotonic()
        frames = read_all(source, 3)
    assert [f.index for f in frames] == [0, 1, 2]
    assert frames[0].image.shape == (480, 640, 3) and (frames[0].image == 77).all()
    for frame in frames:
        assert before - 0.005 - 0.05 < frame.capture_time <= time.monotonic() - 0.004


def test_device_falls_back_to_dequeue_time_without_a_driver_stamp(fake_capture):
    with OpenCVDeviceSource("/dev/null") as source:
        fake_capture[0].stamp_age = None
        before = time.monotonic()
        frame = source.read()
        after = time.monotonic()
    assert before <= frame.capture_time <= after


def test_device_that_stops_delivering(fake_capture):
    with OpenCVDeviceSource("/dev/null") as source:
        fake_capture[0].grab_ok = False
        with pytest.raises(SourceError, match="/dev/null delivered no frame"):
            source.read()


@pytest.mark.parametrize(
    ("stamp", "clock_now", "expected"),
    [
        (99.99, 100.0, 49.99),  # 10 ms old: trusted, mapped onto the monotonic clock
        (100.0, 100.0, 50.0),
        (100.5, 100.0, -1.0),  # in the future: another clock
        (90.0, 100.0, -1.0),  # 10 s old: another clock
        (0.0, 100.0, -1.0),  # no stamp
    ],
)
def test_stamp_to_monotonic(stamp, clock_now, expected):
    result = camera._stamp_to_monotonic(stamp, clock_now, monotonic_now=50.0, fallback=-1.0)
    assert result == pytest.approx(expected)


# --- picamera2 (not installable here: absence for real, behaviour through a fake) -------


def test_picamera2_missing_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "picamera2", None)  # makes the import fail
    with pytest.raises(SourceError) as info:
        Picamera2Source(640, 480).open()
    assert str(info.value) == PICAMERA2_MISSING


class FakeRequest:
    def __init__(self, image, sensor_ns):
        self.image, self.sensor_ns, self.released = image, sensor_ns, False

    def make_array(self, name):
        assert name == "main"
        return self.image.copy()

    def get_metadata(self):
        return {"SensorTimestamp": self.sensor_ns}

    def release(self):
        self.released = True


class FakeJob:
    def __init__(self, request):
        self.request = request

    def get_result(self, timeout=None):
        assert timeout is not None and timeout > 0  # reads never wait forever
        if self.request is None:
            raise TimeoutError
        return self.request


class FakePicamera2:
    """The parts of picamera2.Picamera2 that Picamera2Source uses, recording each call."""

    def __init__(self, camera_num=0):
        self.camera_num = camera_num
        self.calls: list[tuple] = []
        self.camera_properties = {"Model": "imx708"}
        self.deliver = True
        self.requests: list[FakeRequest] = []

    def create_video_configuration(self, main, controls, queue):
        self.calls.append(("create", main, controls, queue))
        return {"main": dict(main), "controls": controls}

    def configure(self, config):
        self.camera_config = {"main": {"size": config["main"].get("size", (1280, 720))}}
        self.calls.append(("configure",))

    def start(self):
        self.calls.append(("start",))

    def capture_request(self, wait):
        assert wait is False
        if not self.deliver:
            return FakeJob(None)
        width, height = self.camera_config["main"]["size"]
        image = np.zeros((height, width, 3), np.uint8)
        image[..., 0] = 200  # B, as RGB888 is laid out in memory
        sensor_ns = time.clock_gettime_ns(time.CLOCK_BOOTTIME) - 10_000_000  # 10 ms ago
        self.requests.append(FakeRequest(image, sensor_ns))
        return FakeJob(self.requests[-1])

    def set_controls(self, controls):
        self.calls.append(("set_controls", controls))

    def cancel_all_and_flush(self):
        self.calls.append(("cancel",))

    def stop(self):
        self.calls.append(("stop",))

    def close(self):
        self.calls.append(("close",))


@pytest.fixture
def fake_picamera2(monkeypatch) -> SimpleNamespace:
    """Install a fake picamera2 module with one camera; ``opened`` receives each Picamera2."""
    fake = SimpleNamespace(cameras=[{"Model": "imx708", "Id": "/base/imx708@1a"}], opened=[])

    def picamera2_class(camera_num=0):
        fake.opened.append(FakePicamera2(camera_num))
        return fake.opened[-1]

    picamera2_class.global_camera_info = lambda: fake.cameras
    monkeypatch.setitem(sys.modules, "picamera2", SimpleNamespace(Picamera2=picamera2_class))
    return fake


@pytest.mark.skipif(not hasattr(time, "CLOCK_BOOTTIME"), reason="Linux clock")
def test_picamera2_configures_reads_and_releases(fake_picamera2):
    source = Picamera2Source(320, 240, 15.0, camera_num=0)
    source.open()
    cam = fake_picamera2.opened[0]
    assert cam.calls[:3] == [
        (
            "create",
            {"format": "RGB888", "size": (320, 240)},
            {"FrameDurationLimits": (66667, 66667)},
            False,
        ),
        ("configure",),
        ("start",),
    ]
    assert source.describe() == "Raspberry Pi camera 0 (imx708, 320x240 @ 15 fps)"

    now = time.monotonic()
    frame = source.read()
    assert frame.image.shape == (240, 320, 3) and (frame.image[..., 0] == 200).all()
    assert cam.requests[0].released
    assert frame.capture_time == pytest.approx(now - 0.010, abs=0.005)

    source.set_fps(10.0)
    assert cam.calls[-1] == ("set_controls", {"FrameDurationLimits": (100000, 100000)})
    source.close()
    source.close()
    assert cam.calls[-2:] == [("stop",), ("close",)]


def test_picamera2_read_times_out(fake_picamera2):
    with Picamera2Source(fps=30.0) as source:
        fake_picamera2.opened[0].deliver = False
        with pytest.raises(SourceError, match="delivered no frame within 1.0 s"):
            source.read()
        assert ("cancel",) in fake_picamera2.opened[0].calls


def test_picamera2_absent_camera_is_not_found(fake_picamera2):
    fake_picamera2.cameras.clear()
    with pytest.raises(DeviceNotFoundError, match="cameras detected: none"):
        Picamera2Source().open()
