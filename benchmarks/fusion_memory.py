#!/usr/bin/env python3
"""Resident memory of the fusion pipeline over a long accelerated stream (MB/hour).

The fusion node's pipeline, without ROS or DDS:
:class:`~omniflow.core.fusion_pipeline.FusionPipeline` with the node's default settings (a
256-slot token ring, the 80/120 ms association window, 40 ms slices, preroll, the cut at
15 s, the echo stage unless ``--no-echo``), the webrtc VAD, the pocketsphinx recogniser on
every chunk of speech (partials as they change, finals handed over as the node does) and the
default vision encoder (mediapipe detectors + frame descriptor + LSH) on frames at
``--vision-rate``. The audio runs in the slices' ingest stage (as the node with
``audio.prompt`` false), so ``stage_ms_mean`` accounts for all the work. The stream is real
data looped in stream time: ``test/data/samples/hello.wav`` followed by ``--gap`` seconds of
low noise, again and again, in 40 ms chunks; frames of ``test/data/samples/scene.avi`` in a
loop. Stream time is simulated (no sleeping), so 30 minutes run in a few minutes of CPU.

Found with this script: after about 100 s of this loop webrtc's adaptive noise model takes the
steady noise gap for speech and never reports the end; the recogniser then decodes one endless
utterance and RSS grew ~590 MB/hour. The node therefore cuts speech at
``vad.max_utterance_s`` (15 s: final transcript, VAD reset), and so does this pipeline
(``counts.forced_ends``).

RSS is read from ``/proc/self/statm`` once per simulated minute; the figure is the slope of a
least-squares line through the samples after ``--warmup`` simulated minutes (allocator and
model caches settle first), in MB per simulated hour, and over the second half of the samples
alone (``mb_per_hour_second_half``: the allocator keeps filling up for about 50 simulated
minutes, so judge a long run by that). Target: <= 0.03 MB/hour. Prints JSON;
``--json PATH`` also writes it. A benchmark prints figures; it does not fail on a slow machine.

Finding where memory goes: ``--vision-rate 0`` (no vision encoder), ``--no-asr`` (VAD only),
``--no-echo``, ``--asr-engine whisper``; ``--trim`` calls glibc's ``malloc_trim(0)`` before
each RSS sample (growth that disappears with it is freed heap the allocator kept, not live
data); ``--trace`` starts tracemalloc at the end of the warm-up and reports what Python
allocated after it and still holds at the end (by line and by file), and the change in the
number of live objects by type (gc), so Python-level growth is told apart from native growth.

    .venv/bin/python benchmarks/fusion_memory.py --minutes 30 --json build/bench/fusion_memory.json
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import gc
import json
import os
import time
import tracemalloc
from pathlib import Path

import cv2
import numpy as np
import soundfile
from _common import slope_per_hour, smaps_rss

from omniflow.core.association import Decision
from omniflow.core.fusion_events import SceneEvent, TranscriptEvent
from omniflow.core.fusion_pipeline import FusionConfig, FusionPipeline
from omniflow.core.timing import CHUNK_SAMPLES, NS_PER_MS, NS_PER_S, NS_PER_SAMPLE, SAMPLE_RATE
from omniflow.engines.asr import ASR_ENGINES, make_recognizer
from omniflow.engines.fusion_engines import EchoSettings, make_fusion_engines
from omniflow.engines.vision import make_default_encoder

SAMPLES = Path(__file__).resolve().parents[1] / "test" / "data" / "samples"
CHUNK = CHUNK_SAMPLES  # 40 ms at 16 kHz


def rss_mb() -> float:
    """Resident set size of this process, from /proc/self/statm."""
    with open("/proc/self/statm", encoding="ascii") as statm:
        pages = int(statm.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 1e6


def audio_loop(gap_s: float, seed: int = 0) -> np.ndarray:
    """hello.wav then ``gap_s`` of quiet noise: one period of the looped stream."""
    speech, rate = soundfile.read(SAMPLES / "hello.wav", dtype="int16")
    assert rate == SAMPLE_RATE
    rng = np.random.default_rng(seed)
    gap = rng.normal(0, 30, int(gap_s * rate)).astype(np.int16)
    period = np.concatenate([speech, gap])
    return period[: len(period) // CHUNK * CHUNK]


def video_frames(limit: int = 60) -> list[np.ndarray]:
    """The RGB frames of scene.avi (looped by the caller)."""
    capture = cv2.VideoCapture(str(SAMPLES / "scene.avi"))
    frames = []
    while len(frames) < limit:
        ok, bgr = capture.read()
        if not ok:
            break
        frames.append(np.ascontiguousarray(bgr[:, :, ::-1]))
    capture.release()
    return frames


class Pipeline:
    """The fusion node's pipeline with the node's default settings, counting its events."""

    def __init__(
        self, vision_rate_hz: float, asr: str | None = "pocketsphinx", echo: bool = True
    ) -> None:
        engines = make_fusion_engines(
            vad_engine="webrtc",
            min_speech_ms=60,
            min_silence_ms=400,
            recognizer=(lambda: make_recognizer(asr)) if asr else None,
            vision=make_default_encoder if vision_rate_hz > 0 else None,
            echo=EchoSettings() if echo else None,
        )
        config = FusionConfig(
            ring_capacity=256,
            window_before_ns=80 * NS_PER_MS,
            window_after_ns=120 * NS_PER_MS,
            slice_ns=40 * NS_PER_MS,
            max_utterance_ns=15 * NS_PER_S,
            vision_rate_hz=vision_rate_hz if vision_rate_hz > 0 else 1.0,
            echo_wait_ns=60 * NS_PER_MS,
            max_future_ns=NS_PER_S,
        )
        self.fusion = FusionPipeline(config, engines)
        self.ring, self.associator = self.fusion.ring, self.fusion.associator
        self.scheduler = self.fusion.scheduler
        self.counts = {
            "finals": 0,
            "partials": 0,
            "decisions": 0,
            "vision": 0,
            "nonempty_finals": 0,
            "forced_ends": 0,
        }

    def step(
        self, now_ns: int, audio: tuple[int, np.ndarray], frame: tuple[int, np.ndarray] | None
    ) -> None:
        """One chunk (and the newest frame) in, the events counted."""
        for event in self.fusion.step(now_ns, audio=[audio], frame=frame, prompt=False):
            if isinstance(event, TranscriptEvent):
                if event.final:
                    self.counts["finals"] += 1
                    self.counts["nonempty_finals"] += bool(event.text)
                else:
                    self.counts["partials"] += 1
            elif isinstance(event, Decision):
                self.counts["decisions"] += 1
            elif isinstance(event, SceneEvent):
                self.counts["vision"] += 1
        self.counts["forced_ends"] = self.fusion.stats.forced_ends


def object_counts() -> collections.Counter[str]:
    """Live objects tracked by the garbage collector, by type name."""
    return collections.Counter(type(o).__name__ for o in gc.get_objects())


def smaps_growth(before: dict[str, int], after: dict[str, int], top: int = 8) -> list[str]:
    """The mappings whose resident size changed most between two :func:`_common.smaps_rss`."""
    names = set(before) | set(after)
    change = sorted(
        ((after.get(n, 0) - before.get(n, 0), n) for n in names), key=lambda c: -abs(c[0])
    )
    return [f"{kb:+d} kB {name}" for kb, name in change[:top] if kb]


def malloc_trim() -> None:
    """Give glibc's free heap pages back to the system (``malloc_trim(0)``)."""
    ctypes.CDLL("libc.so.6").malloc_trim(0)


def run(
    minutes: float,
    warmup: float,
    vision_rate_hz: float,
    camera_fps: float,
    gap_s: float,
    asr: str | None = "pocketsphinx",
    trace: bool = False,
    trim: bool = False,
    echo: bool = True,
) -> dict[str, object]:
    smaps_warm: dict[str, int] | None = None
    audio = audio_loop(gap_s)
    frames = video_frames()
    pipeline = Pipeline(vision_rate_hz, asr, echo)
    traced: dict[str, object] = {}
    snapshot_mid: tracemalloc.Snapshot | None = None
    mid_minute = warmup + (minutes - warmup) / 2
    counts_before: collections.Counter[str] | None = None
    origin = 1_000 * NS_PER_S
    end_ns = origin + int(minutes * 60 * NS_PER_S)
    frame_period = int(NS_PER_S / camera_fps)
    chunk_ns = CHUNK * NS_PER_SAMPLE
    samples_min: list[float] = []
    samples_rss: list[float] = []
    next_sample = origin
    t_ns, chunk_index, frame_index = origin, 0, 0
    next_frame_ns = origin
    pipeline.scheduler.start(origin)
    wall0 = time.perf_counter()
    frame = None
    while t_ns < end_ns:
        offset = (chunk_index * CHUNK) % len(audio)
        chunk = (t_ns, audio[offset : offset + CHUNK])
        chunk_index += 1
        t_ns += chunk_ns
        while next_frame_ns <= t_ns:
            frame = (next_frame_ns, frames[frame_index % len(frames)])
            frame_index += 1
            next_frame_ns += frame_period
        pipeline.step(t_ns, chunk, frame)
        frame = None
        if t_ns >= next_sample:
            minute = (t_ns - origin) / 60 / NS_PER_S
            if trim:
                malloc_trim()
            samples_min.append(minute)
            samples_rss.append(rss_mb())
            next_sample += 60 * NS_PER_S
            if smaps_warm is None and minute >= warmup:
                smaps_warm = smaps_rss()
            if trace and counts_before is None and minute >= warmup:
                gc.collect()
                counts_before = object_counts()
                tracemalloc.start(8)
            if (
                trace
                and snapshot_mid is None
                and counts_before is not None
                and minute >= mid_minute
            ):
                gc.collect()
                snapshot_mid = tracemalloc.take_snapshot()
    if trace and counts_before is not None:
        traced = trace_report(counts_before, snapshot_mid)
    wall = time.perf_counter() - wall0
    smaps_end = smaps_rss()  # before the fit below maps BLAS pages of its own
    kept = [(m, r) for m, r in zip(samples_min, samples_rss, strict=True) if m >= warmup]
    stats = pipeline.scheduler.stats
    return {
        "simulated_minutes": minutes,
        "warmup_minutes": warmup,
        "wall_s": round(wall, 1),
        "speedup": round(minutes * 60 / wall, 1),
        "rss_mb_start": round(samples_rss[0], 2),
        "rss_mb_after_warmup": round(kept[0][1], 2) if kept else None,
        "rss_mb_end": round(samples_rss[-1], 2),
        "rss_mb_max": round(max(samples_rss), 2),
        "mb_per_hour": slope_per_hour([m for m, _ in kept], [r for _, r in kept]),
        "target_mb_per_hour": 0.03,
        "samples": len(kept),
        "mb_per_hour_second_half": slope_per_hour(
            [m for m, _ in kept[len(kept) // 2 :]], [r for _, r in kept[len(kept) // 2 :]]
        ),
        "rss_mb_every_10_min": [
            round(r, 3) for m, r in zip(samples_min, samples_rss, strict=True) if round(m) % 10 == 0
        ],
        "counts": pipeline.counts,
        "ring": pipeline.ring.stats.as_dict(),
        "association": vars(pipeline.associator.stats),
        "slices_run": stats.slices_run,
        "stage_ms_mean": {
            name: round(ns / max(stats.slices_run, 1) / 1e6, 3)
            for name, ns in stats.stage_ns_total.items()
        },
        "vision_rate_hz": vision_rate_hz,
        "camera_fps": camera_fps,
        "asr": asr,
        "echo": echo,
        "malloc_trim": trim,
        "rss_growth_by_mapping": smaps_growth(smaps_warm or {}, smaps_end),
        **traced,
    }


def trace_report(
    counts_before: collections.Counter[str],
    snapshot_mid: tracemalloc.Snapshot | None,
    top: int = 12,
) -> dict[str, object]:
    """What Python allocated after the warm-up and still holds, by line and by file; what
    grew between the middle of the measured span and its end (steady state cancels out);
    and the change in live objects by type (only types that changed)."""
    gc.collect()
    exclude = [tracemalloc.Filter(False, tracemalloc.__file__)]
    snapshot = tracemalloc.take_snapshot().filter_traces(exclude)
    grew = []
    if snapshot_mid is not None:
        diff = snapshot.compare_to(snapshot_mid.filter_traces(exclude), "lineno")
        grew = [
            f"{d.traceback[0].filename}:{d.traceback[0].lineno} {d.size_diff / 1e3:+.1f} kB "
            f"({d.count_diff:+d} blocks)"
            for d in diff[:top]
            if d.size_diff
        ]
    traced_now, traced_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    counts = object_counts()
    counts.subtract(counts_before)
    by_line = snapshot.statistics("lineno")[:top]
    by_file = snapshot.statistics("filename")[:top]
    return {
        "traced_kb_held_since_warmup": round(traced_now / 1e3, 1),
        "traced_kb_peak": round(traced_peak / 1e3, 1),
        "growth_second_half_kb": round(
            sum(
                d.size_diff
                for d in snapshot.compare_to(snapshot_mid.filter_traces(exclude), "filename")
            )
            / 1e3,
            1,
        )
        if snapshot_mid is not None
        else None,
        "grew_second_half": grew,
        "top_lines": [
            f"{s.traceback[0].filename}:{s.traceback[0].lineno} "
            f"{s.size / 1e3:.1f} kB in {s.count} blocks"
            for s in by_line
        ],
        "top_files": [
            f"{s.traceback[0].filename} {s.size / 1e3:.1f} kB in {s.count} blocks" for s in by_file
        ],
        "object_count_changes": {k: v for k, v in counts.most_common() if v},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="simulated stream length")
    parser.add_argument(
        "--warmup", type=float, default=5.0, help="simulated minutes left out of the slope"
    )
    parser.add_argument(
        "--vision-rate", type=float, default=5.0, help="frames encoded per s (0: vision off)"
    )
    parser.add_argument("--camera-fps", type=float, default=15.0, help="frames offered per s")
    parser.add_argument("--gap", type=float, default=2.0, help="seconds between utterances")
    parser.add_argument(
        "--asr-engine", default="pocketsphinx", choices=ASR_ENGINES, help="the recogniser"
    )
    parser.add_argument("--no-asr", action="store_true", help="VAD only, no recogniser")
    parser.add_argument(
        "--no-echo", action="store_true", help="no echo stage (the node's echo.enabled false)"
    )
    parser.add_argument(
        "--trace",
        action="store_true",
        help="tracemalloc from the end of the warm-up; gc object counts",
    )
    parser.add_argument(
        "--trim",
        action="store_true",
        help="malloc_trim(0) before each RSS sample (allocator check)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    result = run(
        args.minutes,
        args.warmup,
        args.vision_rate,
        args.camera_fps,
        args.gap,
        asr=None if args.no_asr else args.asr_engine,
        trace=args.trace,
        trim=args.trim,
        echo=not args.no_echo,
    )
    text = json.dumps(result, indent=2, default=str)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
