#!/usr/bin/env python3
"""Stamps of a live microphone's blocks: taken as they come against one stream that follows them.

A private PulseAudio daemon (``scripts/pulse_null.sh``: a null sink and a virtual source on
its monitor, paced in real time) stands in for the microphone; PortAudio reads it through
the ALSA ``pulse`` device as the audio capture node does (``SoundDeviceSource``: ADC times
mapped onto the host clock). For ``--seconds`` the capture time of every block is recorded,
then stamped two ways, as the node did and as it does:

- ``as_captured``: each block stamped with its capture time, numbered by the nearest block
  since the first (``sequence_at``);
- ``stream``: :class:`omniflow.core.timing.DeviceStreamStamper`.

Each stamping is fed to the fusion node's own continuity check (``AudioContinuity``) as
the fusion node would receive it. Reported per stamping: audio dropped as received twice
(ms, and the blocks overlapping), repeated block numbers, and how far stamps are from the
capture times (median, p90, max, ms); after PulseAudio's first ``--settle`` seconds.
``--hog-cores N`` records again with ``scripts/cpu_hog.py`` keeping N cores busy.

    .venv/bin/python benchmarks/device_stamps.py --seconds 60 --hog-cores 1
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import SPREAD, cpu_hog, summary, write_result

from omniflow.core.audio_continuity import AudioContinuity
from omniflow.core.timing import (
    CHUNK_SAMPLES,
    NS_PER_S,
    SAMPLE_RATE,
    DeviceStreamStamper,
    sequence_at,
)
from omniflow.devices.audio import SoundDeviceSource

PULSE = Path(__file__).resolve().parents[1] / "scripts" / "pulse_null.sh"
PERIOD_NS = CHUNK_SAMPLES * NS_PER_S // SAMPLE_RATE


def record(seconds: float) -> tuple[list[int], int]:
    """Capture times (ns) of ``seconds`` of blocks from PulseAudio's default source, and the
    blocks the source dropped."""
    source = SoundDeviceSource("pulse", SAMPLE_RATE, 1, CHUNK_SAMPLES)
    source.open()
    captures: list[int] = []
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            block = source.read(2.0)
            if block is None:
                raise RuntimeError("PulseAudio delivered no block within 2 s")
            captures.append(round(block.capture_time * NS_PER_S))
    finally:
        source.close()
    return captures, source.dropped_total


def judge(stamps: list[tuple[int, int]], captures: list[int], settle: int) -> dict[str, object]:
    """What the fusion node's continuity check makes of ``(sequence, stamp)`` per block."""
    continuity = AudioContinuity()
    block = np.zeros(CHUNK_SAMPLES, np.int16)
    for sequence, stamp in stamps[settle:]:
        continuity.observe(sequence, stamp, block)
    sequences = [sequence for sequence, _ in stamps[settle:]]
    errors = [abs(s - c) / 1e6 for (_, s), c in zip(stamps, captures, strict=True)][settle:]
    return {
        "dropped_ms": round(continuity.counts.overlap_ms, 1),
        "overlapping_blocks": continuity.counts.overlaps,
        "repeated_numbers": int(np.sum(np.diff(sequences) == 0)),
        "stamp_minus_capture_ms": summary(errors, 2, figures=SPREAD),
    }


def trial(seconds: float, settle_s: float) -> dict[str, object]:
    captures, dropped = record(seconds)
    settle = int(settle_s * NS_PER_S / PERIOD_NS)
    raw = [(sequence_at(c, captures[0], PERIOD_NS), c) for c in captures]
    stamper = DeviceStreamStamper(PERIOD_NS)
    stream = [(s.sequence, s.stamp_ns) for s in map(stamper.stamp, captures)]
    return {
        "blocks": len(captures) - settle,
        "dropped_by_source": dropped,
        "as_captured": judge(raw, captures, settle),
        "stream": judge(stream, captures, settle),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="audio recorded per trial")
    parser.add_argument("--settle", type=float, default=3.0, help="start-up seconds left out")
    parser.add_argument("--hog-cores", type=int, default=0, help="also record beside a CPU hog")
    parser.add_argument("--json", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="omniflow-pulse-") as pulse_dir:
        env = {**os.environ, "OMNIFLOW_PULSE_DIR": pulse_dir}
        started = subprocess.run(
            ["bash", str(PULSE)], env=env, capture_output=True, text=True, check=False
        )
        if started.returncode != 0:
            raise SystemExit(f"pulse_null.sh failed: {started.stderr.strip()}")
        os.environ["PULSE_SERVER"] = started.stdout.strip()
        try:
            trials = {"quiet": trial(args.seconds, args.settle)}
            if args.hog_cores:
                with cpu_hog(args.hog_cores) as used:
                    trials[f"hog{args.hog_cores}"] = trial(args.seconds, args.settle)
                trials[f"hog{args.hog_cores}"]["hog"] = used
        finally:
            subprocess.run(["bash", str(PULSE), "--stop"], env=env, capture_output=True)
    write_result(
        {
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
            "seconds": args.seconds,
            "trials": trials,
        },
        args.json,
    )


if __name__ == "__main__":
    main()
