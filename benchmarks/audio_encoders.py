#!/usr/bin/env python3
"""Measure the audio encoders of issue 3: VAD cost per 40 ms chunk, ASR real-time factor.

Method (prints one JSON object):

- VAD: each engine (``webrtc``; ``silero`` when onnxruntime and the silero-vad model are
  installed) processes ``test/data/samples/hello.wav`` followed by 1 s of silence, in 40 ms
  chunks (640 samples) with stream-time stamps, ``--repeats`` times through one detector
  (so the recurrent state and the re-chunking buffer are exercised as in the node). Every
  ``process()`` call is timed with ``perf_counter_ns``; median, p90, p99 and max per chunk in
  ms, against the 1 ms target. The events of the first pass are reported too.
- ASR: pocketsphinx decodes the same sample streamed in 40 ms chunks (``start``/``feed``/
  ``finish``), open vocabulary and with the command grammar of the unit tests. Real-time
  factor = decode wall time / audio duration (median of ``--asr-repeats``); the time left at
  the end of the utterance (``finish()`` alone) is reported separately, since that is the
  delay a user waits for once they stop speaking. Model load time is reported once.

One thread each (onnxruntime is set to one intra-op thread). Run from the repository root::

    .venv/bin/python benchmarks/audio_encoders.py --json build/bench/audio_encoders.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import soundfile
from _common import summary, write_result

from omniflow.engines.asr import PocketsphinxRecognizer
from omniflow.engines.vad import NS_PER_SAMPLE, make_vad
from omniflow.errors import EngineError

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "test" / "data" / "samples" / "hello.wav"
CHUNK = 640
GRAMMAR = """#JSGF V1.0;
grammar commands;
public <command> = <one>+;
<one> = what is this red box | hello robot | stop;
"""


def _stats_ms(values_ns: list[int]) -> dict[str, float | int | None]:
    return summary(values_ns, 4, figures=("median", "p90", "p99", "max"), scale=1e-6, count=None)


def bench_vad(engine: str, samples: np.ndarray, repeats: int) -> dict[str, Any]:
    """Per-chunk cost of ``process()`` for one engine over ``repeats`` passes."""
    try:
        vad = make_vad(engine)
    except EngineError as err:
        return {"engine": engine, "skipped": str(err)}
    stream = np.concatenate([samples, np.zeros(16_000, dtype=np.int16)])
    times: list[int] = []
    first_events: list[tuple[str, float]] = []
    offset = 0
    for r in range(repeats):
        for i in range(0, len(stream) - CHUNK + 1, CHUNK):
            chunk = stream[i : i + CHUNK]
            stamp = (offset + i) * NS_PER_SAMPLE
            t0 = time.perf_counter_ns()
            events = vad.process(chunk, stamp)
            times.append(time.perf_counter_ns() - t0)
            if r == 0:
                first_events += [(e.kind, e.stamp_ns / 1e9) for e in events]
        offset += len(stream)
    return {
        "engine": engine,
        "window_samples": vad.window_samples,
        "chunks": len(times),
        "per_chunk_ms": _stats_ms(times),
        "target_ms": 1.0,
        "events_s": first_events,
    }


def bench_asr(samples: np.ndarray, grammar: str | None, repeats: int) -> dict[str, Any]:
    """Real-time factor of streamed pocketsphinx decoding, and the cost of ``finish()``."""
    t0 = time.perf_counter()
    rec = PocketsphinxRecognizer(grammar=grammar)
    load_s = time.perf_counter() - t0
    duration = len(samples) / 16_000
    totals, finishes, text = [], [], ""
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        rec.start(0)
        for i in range(0, len(samples), CHUNK):
            rec.feed(samples[i : i + CHUNK])
        t1 = time.perf_counter_ns()
        text = rec.finish().text
        t2 = time.perf_counter_ns()
        totals.append(t2 - t0)
        finishes.append(t2 - t1)
    return {
        "mode": "grammar" if grammar else "open",
        "load_s": round(load_s, 3),
        "audio_s": round(duration, 3),
        "rtf_median": round(float(np.median(totals)) / 1e9 / duration, 4),
        "finish_ms": _stats_ms(finishes),
        "text": text,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=20, help="VAD passes over the sample")
    parser.add_argument("--asr-repeats", type=int, default=5, help="ASR decodes per mode")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)

    samples, rate = soundfile.read(str(SAMPLE), dtype="int16")
    assert rate == 16_000, rate
    result = {
        "sample": str(SAMPLE.relative_to(REPO)),
        "vad": [bench_vad(e, samples, args.repeats) for e in ("webrtc", "silero")],
        "asr": [bench_asr(samples, g, args.asr_repeats) for g in (None, GRAMMAR)],
    }
    write_result(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
