#!/usr/bin/env python3
"""Barge-in latency, the fusion node's share: speech onset (stream time) -> VoiceActivity START.

Method (prints one JSON object):

- The user's line (espeak-ng, ``en-gb-scotland``: "Wait, what is that blue thing?") is written
  to a 16 kHz WAV between 1.5 s and 2 s of quiet noise (-60 dBFS), its length a whole number
  of 40 ms blocks, so every pass of a looping file source starts on a block boundary. The
  onset is the first 10 ms frame within 35 dB of the loudest one (the earliest sign of voice).
- One audio capture node (``source: file``, looping, real-time pacing) and two fusion nodes,
  each its own process, all on this host over DDS; both fusion nodes subscribe to the same
  microphone, run side by side under the same load, vision off:
  ``prompt`` (``audio.prompt: true``, the default: the audio path runs as soon as a chunk
  arrives) and ``per_slice`` (``audio.prompt: false``, the baseline: audio waits for the next
  40 ms slice).
- This process records every audio chunk (stamp, sequence) and every VoiceActivity START.
  The onset of pass p in stream time is the stamp of block ``p * blocks_per_pass`` plus the
  onset offset; latency = the START's arrival here (the system clock, which is ROS time on
  this host) minus that onset. It includes the block's capture (up to 40 ms: the chunk is
  published when its last sample is in), DDS twice, and the VAD's confirmation
  (``vad.min_speech_ms``). The START stamp's own error (VAD start minus true onset) is
  reported too. Median and p90 over ``--passes`` passes, and the ratio prompt / per_slice.
- The dialogue node's share (cancelling generation, silencing playback) is measured by
  ``benchmarks/speech.py`` (interrupt -> last block) and added by the dialogue benchmark.

Run from the repository root::

    .venv/bin/python benchmarks/barge_in.py --passes 10 --json build/bench/barge_in.json
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile
from _common import SPREAD, ratio, summary, write_result

RATE = 16_000
BLOCK = 640
USER_TEXT = "Wait, what is that blue thing?"
VARIANTS = {"prompt": True, "per_slice": False}


def make_wav(directory: Path) -> tuple[Path, int, int]:
    """(path, onset sample, blocks per pass) of the looping user file."""
    raw = directory / "say.wav"
    subprocess.run(["espeak-ng", "-v", "en-gb-scotland", "-w", str(raw), USER_TEXT], check=True)
    from omniflow.core.resample import resample_int16

    data, rate = soundfile.read(raw, dtype="int16")
    speech = resample_int16(data, rate, RATE)
    lead, tail = int(1.5 * RATE), 2 * RATE
    total = -(-(lead + len(speech) + tail) // BLOCK) * BLOCK
    signal = np.random.default_rng(0).standard_normal(total) * 32768 * 10 ** (-60 / 20)
    signal[lead : lead + len(speech)] += speech
    frames = signal[: total // 160 * 160].reshape(-1, 160)
    power = (frames**2).mean(axis=1)
    voiced = np.flatnonzero(power > power.max() * 10**-3.5)
    path = directory / "user.wav"
    soundfile.write(path, np.clip(np.round(signal), -32768, 32767).astype(np.int16), RATE)
    return path, int(voiced[0] * 160), total // BLOCK


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=10, help="onsets measured per variant")
    parser.add_argument("--min-speech-ms", type=int, default=60, help="vad.min_speech_ms")
    parser.add_argument("--json", type=Path, help="also write the JSON here")
    args = parser.parse_args()

    import rclpy
    from lifecycle_msgs.msg import Transition
    from lifecycle_msgs.srv import ChangeState

    from omniflow.launcher import NodeProcess, NodeSpec
    from omniflow.msg import AudioChunk, VoiceActivity
    from omniflow.ros.conversions import ns_from_time
    from omniflow.ros.monitor import TopicRecorder, spinning, wait_for_publishers
    from omniflow.ros.qos import EVENTS, SENSOR_DATA

    ns = f"/barge{os.getpid()}"
    tmp = tempfile.TemporaryDirectory(prefix="omniflow-barge-in-")
    wav, onset, blocks = make_wav(Path(tmp.name))
    processes = {
        name: NodeProcess(
            NodeSpec(
                "omniflow.nodes.fusion",
                "fusion",
                {
                    "vision.enabled": False,
                    "audio.prompt": prompt,
                    "vad.min_speech_ms": args.min_speech_ms,
                },
                namespace=f"{ns}/{name}",
                remappings={"audio": f"{ns}/audio"},
            )
        )
        for name, prompt in VARIANTS.items()
    }
    microphone = NodeProcess(
        NodeSpec(
            "omniflow.nodes.audio_capture",
            "audio_capture",
            {"source": "file", "file.path": str(wav), "file.loop": True, "autostart": False},
            namespace=ns,
        )
    )
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("barge_in_bench", context=context)
    audio = TopicRecorder(node, AudioChunk, f"{ns}/audio", SENSOR_DATA, keep=100_000)
    activity = {
        name: TopicRecorder(node, VoiceActivity, f"{ns}/{name}/voice_activity", EVENTS)
        for name in VARIANTS
    }
    result: dict[str, object] = {}
    try:
        with spinning(node):
            for name in VARIANTS:
                wait_for_publishers(node, f"{ns}/{name}/voice_activity", 1, timeout=60)
            client = node.create_client(ChangeState, f"{ns}/audio_capture/change_state")
            for transition in (Transition.TRANSITION_CONFIGURE, Transition.TRANSITION_ACTIVATE):
                if not client.wait_for_service(timeout_sec=30):
                    raise TimeoutError("the audio capture node's change_state never appeared")
                future = client.call_async(
                    ChangeState.Request(transition=Transition(id=transition))
                )
                deadline = time.monotonic() + 30
                while not future.done() and time.monotonic() < deadline:
                    time.sleep(0.05)
                if not future.done() or not future.result().success:
                    raise RuntimeError(f"audio capture transition {transition} failed")
                if transition == Transition.TRANSITION_CONFIGURE:
                    wait_for_publishers(node, f"{ns}/audio", 1, timeout=30)
                    time.sleep(1.5)  # the three subscriptions match the new publisher
            pass_s = blocks * BLOCK / RATE
            time.sleep(pass_s * (args.passes + 1) + 1.0)
        by_sequence = {r.msg.sequence: ns_from_time(r.msg.header.stamp) for r in audio.received}
        first_seq = min(by_sequence)
        result["pass_s"] = round(pass_s, 2)
        result["onset_s_in_pass"] = round(onset / RATE, 3)
        result["chunks_heard"] = len(by_sequence)
        for name in VARIANTS:
            latencies, stamp_errors = [], []
            for rec in activity[name].received:
                if rec.msg.event != VoiceActivity.START:
                    continue
                start_ns = ns_from_time(rec.msg.header.stamp)
                # The pass whose onset this START follows.
                index = None
                for p in range((first_seq // blocks), (first_seq // blocks) + args.passes + 3):
                    base = by_sequence.get(p * blocks)
                    if base is not None and abs(start_ns - (base + onset * 62_500)) < 1e9:
                        index = p
                if index is None:
                    continue
                onset_ns = by_sequence[index * blocks] + onset * 62_500
                latencies.append((rec.wall_ns - onset_ns) / 1e6)
                stamp_errors.append((start_ns - onset_ns) / 1e6)
            latencies = latencies[: args.passes]
            result[name] = {
                "onset_to_start_received_ms": summary(latencies, 1, figures=SPREAD),
                "live_microphone_ms": summary(
                    [v + BLOCK / RATE * 1000 for v in latencies], 1, figures=SPREAD
                ),
                "start_stamp_minus_onset_ms": summary(
                    stamp_errors[: args.passes], 1, figures=SPREAD
                ),
            }
        prompt = result["prompt"]["onset_to_start_received_ms"]
        base = result["per_slice"]["onset_to_start_received_ms"]
        result["ratio_prompt_vs_per_slice_median"] = ratio(prompt["median"], base["median"], 2)
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)
        microphone.close()
        for process in processes.values():
            process.close()
        tmp.cleanup()
    write_result(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
