#!/usr/bin/env python3
"""Write the committed sample session ``test/data/samples/session.mcap``: a small rosbag2 (MCAP)
of a conversation with the robot, what the demo and the replay regression run on.

Topics: ``audio`` (omniflow/msg/AudioChunk: 40 ms, 16 kHz mono S16LE, what the microphone
hears), ``image_raw`` (sensor_msgs/msg/Image: 320x240 rgb8 at 15 frames/s) and
``played_audio`` (omniflow/msg/AudioChunk: 20 ms blocks of what the robot's speaker played,
silence not published, as the speech node does). A message's bag time is when a live graph
would have published it: a microphone block's is its ``header.stamp`` (its first sample) plus
its 40 ms (it goes out once its last sample is in), so a replay hands the fusion node the
robot's played audio before the microphone's echo of it, as a live graph does; every other
bag time equals its ``header.stamp``. The session starts at 2026-01-01T00:00:00Z
(``START_NS``).

Timeline (seconds from the start):

    0.0   scikit-image's "coffee" photograph (a cup on a saucer); a drawn hand (an open
          palm, fingers to the left) enters from the right
    1.0   the hand points at the cup (until 3.0); the user says "What is this?"
    3.0   the hand withdraws
    3.2   ECHO: the robot answers "That is a cup of coffee on a saucer." on the speaker;
          the microphone hears only the robot's own voice (-10 dB, 25 ms later)
    6.0   the scene cuts to scikit-image's "chelsea" (a cat); the hand enters again and
          points at the cat from 6.6 (until 9.5)
    6.4   the robot starts a long answer about coffee
    7.5   BARGE-IN: the user talks over the robot: "Stop. What is that animal?"; the robot's
          playback stops 0.3 s later (what a speech node would do on an INTERRUPTED state)
    9.5   the hand withdraws; silence to the end (12.0)

``--scenario two-objects`` writes ``test/data/samples/two_objects.mcap`` instead: two objects
seen at different moments and a question naming the one that has gone (what the semantic
association is tested on; 10 frames/s, no robot speech):

    0.0   scikit-image's "chelsea" (a cat)
    2.5   the scene cuts to "coffee" (a cup on a saucer)
    3.2   the user asks "What colour is the cat?" while the cup is on screen
    5.0   the hand enters and points at the cup from 5.6 (until 7.5)
    5.8   the user asks "What is this?"
    8.0   end

How it is made: espeak-ng speaks the user's and the robot's lines (en-us, 150 and 175
words/min), resampled to 16 kHz (scripts/make_sample_audio.py's ``synthesise``); the
microphone is the user's speech plus the echo of the played audio plus white noise at
-60 dBFS from a fixed seed; frames are the photographs centre-cropped to 4:3, resized to
320x240 and drawn over with the marker. Deterministic for a given espeak-ng, scikit-image
and rosbags version. zstd-compressed MCAP chunks keep it at a few MB (refused above 10 MB).

    python scripts/make_sample_session.py [--scenario session|two-objects] [--out PATH]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import skimage.data

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_sample_audio import synthesise  # noqa: E402

from omniflow.bag import BagMessage, encode, typestore, write_mcap_file  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "test" / "data" / "samples"
START_NS = 1_767_225_600 * 1_000_000_000  # 2026-01-01T00:00:00Z
RATE = 16000
CHUNK = 640  # 40 ms microphone blocks
CHUNK_NS = CHUNK * 1_000_000_000 // 16000  # a block is published once its last sample is in
PLAYED_BLOCK = 320  # 20 ms speaker blocks
WIDTH, HEIGHT = 320, 240
ECHO_GAIN, ECHO_DELAY_S = 0.316, 0.025  # -10 dB, 25 ms
NOISE_DBFS = -60.0
MAX_BYTES = 10_000_000


@dataclass(frozen=True)
class Scenario:
    """One session: what the user says ((start s, text)), what the robot plays ((start s,
    text, cut at s or None)), the scenes ((from s, to s, photograph, marker path: (t0, x0,
    y0) -> (t1, x1, y1) segments, pixel coords)), its length and frame rate."""

    out: str
    user_lines: tuple
    robot_lines: tuple
    scenes: tuple
    duration_s: float
    fps: float


SCENARIOS = {
    "session": Scenario(
        "session.mcap",
        user_lines=((1.0, "What is this?"), (7.5, "Stop. What is that animal?")),
        robot_lines=(
            (3.2, "That is a cup of coffee on a saucer.", None),
            (
                6.4,
                "Coffee is brewed from roasted beans, and many people drink it hot "
                "every morning before work.",
                7.8,
            ),
        ),
        scenes=(
            (
                0.0,
                6.0,
                "coffee",
                ((0.0, 380, 150), (1.0, 190, 125), (3.0, 190, 125), (3.6, 380, 150)),
            ),
            (
                6.0,
                12.0,
                "chelsea",
                ((6.0, 380, 170), (6.6, 150, 105), (9.5, 150, 105), (10.1, 380, 170)),
            ),
        ),
        duration_s=12.0,
        fps=15.0,
    ),
    "two-objects": Scenario(
        "two_objects.mcap",
        user_lines=((3.2, "What colour is the cat?"), (5.8, "What is this?")),
        robot_lines=(),
        scenes=(
            (0.0, 2.5, "chelsea", ()),
            (
                2.5,
                8.0,
                "coffee",
                ((5.0, 380, 150), (5.6, 190, 125), (7.5, 190, 125), (8.0, 380, 150)),
            ),
        ),
        duration_s=8.0,
        fps=10.0,
    ),
}


def photograph(name: str) -> np.ndarray:
    """A scikit-image photograph, centre-cropped to 4:3 and resized to 320x240 (rgb8)."""
    image = getattr(skimage.data, name)()
    height, width = image.shape[:2]
    if width * 3 > height * 4:
        crop = height * 4 // 3
        image = image[:, (width - crop) // 2 : (width - crop) // 2 + crop]
    else:
        crop = width * 3 // 4
        image = image[(height - crop) // 2 : (height - crop) // 2 + crop]
    return cv2.resize(np.ascontiguousarray(image), (WIDTH, HEIGHT), interpolation=cv2.INTER_AREA)


def marker_position(path: tuple, t: float) -> tuple[int, int] | None:
    """Fingertip position at ``t`` along the piecewise-linear path (None: off screen)."""
    for (t0, x0, y0), (t1, x1, y1) in zip(path, path[1:], strict=False):
        if t0 <= t <= t1:
            a = (t - t0) / (t1 - t0) if t1 > t0 else 1.0
            return round(x0 + a * (x1 - x0)), round(y0 + a * (y1 - y0))
    return None


def draw_hand(frame: np.ndarray, tip: tuple[int, int], scale: float = 0.75) -> None:
    """An open hand seen from the palm side, fingers to the left, the middle fingertip at
    ``tip``, the forearm to the right: drawn so that MediaPipe's palm detector finds it (a
    flat palm with one pointing finger scored 0.2 there, this one 0.84), with the wrist ->
    middle-knuckle direction along the fingers."""
    skin, crease = (226, 176, 146), (170, 115, 90)

    def s(v: float) -> int:
        return round(v * scale)

    px, py = tip[0] + s(56), tip[1]  # palm centre
    cv2.ellipse(frame, (px + s(45), py + s(2)), (s(30), s(18)), 0, 0, 360, skin, -1)  # wrist
    cv2.rectangle(frame, (px + s(45), py - s(14)), (px + s(110), py + s(18)), skin, -1)
    cv2.ellipse(frame, (px, py), (s(24), s(26)), 0, 0, 360, skin, -1)
    for dy, length in ((-18, 34), (-6, 42), (6, 40), (17, 32)):  # index .. little finger
        base = (px - s(14), py + s(dy))
        end = (px - s(14) - s(length), py + s(dy * 1.25))
        cv2.line(frame, base, end, skin, s(10))
        cv2.circle(frame, end, s(5), skin, -1)
        cv2.line(frame, (base[0], base[1] + s(5)), (end[0], end[1] + s(5)), crease, 1)
    cv2.line(frame, (px + s(5), py - s(22)), (px - s(20), py - s(44)), skin, s(11))  # thumb
    cv2.circle(frame, (px - s(20), py - s(44)), s(6), skin, -1)


def frames(scenario: Scenario) -> list[tuple[float, np.ndarray]]:
    photos = {name: photograph(name) for _, _, name, _ in scenario.scenes}
    out = []
    for k in range(int(scenario.duration_s * scenario.fps)):
        t = k / scenario.fps
        start, end, name, path = next(s for s in scenario.scenes if s[0] <= t < s[1])
        frame = photos[name].copy()
        tip = marker_position(path, t)
        if tip is not None:
            draw_hand(frame, tip)
        out.append((t, frame))
    return out


def place(
    track: np.ndarray,
    samples: np.ndarray,
    at_s: float,
    gain: float = 1.0,
    until_s: float | None = None,
) -> None:
    start = round(at_s * RATE)
    stop = min(len(track), start + len(samples))
    if until_s is not None:
        stop = min(stop, round(until_s * RATE))
    track[start:stop] += samples[: stop - start].astype(np.float64) * gain


def audio_tracks(scenario: Scenario) -> tuple[np.ndarray, np.ndarray]:
    """(microphone, played) as int16 at 16 kHz."""
    total = int(scenario.duration_s * RATE)
    mic, played = np.zeros(total), np.zeros(total)
    for at, text in scenario.user_lines:
        place(mic, synthesise(text, words_per_minute=150), at)
    for at, text, cut in scenario.robot_lines:
        voice = synthesise(text, words_per_minute=175)
        place(played, voice, at, until_s=cut)
        place(
            mic,
            voice,
            at + ECHO_DELAY_S,
            ECHO_GAIN,
            until_s=None if cut is None else cut + ECHO_DELAY_S,
        )
    noise = np.random.default_rng(7).standard_normal(total) * 32768 * 10 ** (NOISE_DBFS / 20)
    mic += noise
    as_int16 = [np.clip(np.rint(x), -32768, 32767).astype(np.int16) for x in (mic, played)]
    return as_int16[0], as_int16[1]


def messages(scenario: Scenario) -> list[BagMessage]:
    store = typestore()
    Time = store.types["builtin_interfaces/msg/Time"]
    Header = store.types["std_msgs/msg/Header"]
    AudioChunk = store.types["omniflow/msg/AudioChunk"]
    Image = store.types["sensor_msgs/msg/Image"]

    def header(offset_ns: int, frame_id: str):
        sec, nanosec = divmod(START_NS + offset_ns, 1_000_000_000)
        return Header(stamp=Time(sec=sec, nanosec=nanosec), frame_id=frame_id)

    out: list[BagMessage] = []

    def add(topic: str, msgtype: str, offset_ns: int, msg, latency_ns: int = 0) -> None:
        out.append(
            BagMessage(topic, msgtype, START_NS + offset_ns + latency_ns, encode(msg, msgtype))
        )

    mic, played = audio_tracks(scenario)
    for seq, start in enumerate(range(0, len(mic) - CHUNK + 1, CHUNK)):
        offset = start * 1_000_000_000 // RATE
        add(
            "audio",
            "omniflow/msg/AudioChunk",
            offset,
            AudioChunk(
                header=header(offset, "microphone"),
                sample_rate=RATE,
                channels=1,
                format=AudioChunk.FORMAT_S16LE,
                sequence=seq,
                data=np.frombuffer(mic[start : start + CHUNK].tobytes(), dtype=np.uint8),
            ),
            latency_ns=CHUNK_NS,
        )
    for start in range(0, len(played) - PLAYED_BLOCK + 1, PLAYED_BLOCK):
        block = played[start : start + PLAYED_BLOCK]
        if not block.any():
            continue
        offset = start * 1_000_000_000 // RATE
        add(
            "played_audio",
            "omniflow/msg/AudioChunk",
            offset,
            AudioChunk(
                header=header(offset, "speaker"),
                sample_rate=RATE,
                channels=1,
                format=AudioChunk.FORMAT_S16LE,
                sequence=start // PLAYED_BLOCK,
                data=np.frombuffer(block.tobytes(), dtype=np.uint8),
            ),
        )
    for t, frame in frames(scenario):
        offset = round(t * 1e9)
        add(
            "image_raw",
            "sensor_msgs/msg/Image",
            offset,
            Image(
                header=header(offset, "camera"),
                height=HEIGHT,
                width=WIDTH,
                encoding="rgb8",
                is_bigendian=0,
                step=WIDTH * 3,
                data=frame.reshape(-1).copy(),
            ),
        )
    out.sort(key=lambda m: (m.timestamp_ns, m.topic))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--scenario", choices=sorted(SCENARIOS), default="session", help="which session"
    )
    parser.add_argument(
        "--out", type=Path, help="MCAP file to write (default: the scenario's under test/data)"
    )
    args = parser.parse_args(argv)
    scenario = SCENARIOS[args.scenario]
    out = args.out or SAMPLES / scenario.out
    if out.exists():
        out.unlink()
    write_mcap_file(out, messages(scenario))
    size = out.stat().st_size
    if size > MAX_BYTES:
        out.unlink()
        raise SystemExit(f"{out} would be {size / 1e6:.1f} MB (> {MAX_BYTES / 1e6:.0f} MB)")
    print(f"wrote {out}: {scenario.duration_s:.1f} s, {size / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
