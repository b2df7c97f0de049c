#!/usr/bin/env python3
"""Compare the speech recognisers on real speech with noise: word error rate, cost, latency.

Method (prints one JSON object):

- Speech: espeak-ng (Debian package) speaks ``COMMANDS`` (what a JSGF grammar of robot
  commands covers) and ``OPEN`` (open conversation the grammar cannot cover), en-us, 150
  words/min, resampled 22.05 -> 16 kHz. Each utterance is ``--lead-ms`` of silence (300: the
  fusion node's ``asr.lead_in_ms``, what it feeds the recogniser before the onset; 0 is how it
  fed it before), the speech, then
  ``--tail-ms`` of silence (the fusion node's VAD reports the end only after
  ``vad.min_silence_ms`` = 400 ms of silence, so that is what a recogniser is fed), with white
  noise at ``--snr`` dB (relative to the speech's RMS; seeded).
- Engines, one recogniser each, reused across utterances as in the node: pocketsphinx with its
  bundled trigram language model (open vocabulary); pocketsphinx with a JSGF grammar of the
  commands; Whisper tiny.en (faster-whisper, int8, ``WhisperRecognizer``) with 1 and 2 threads
  (beam search of 5, the default) and greedy with 2 threads; its partials are drafts that
  read a 10 s window (the default ``asr.whisper.draft_window_s``), and ``whisper2_full_drafts``
  has drafts read the whole 30 s window, as before drafts were cut; ``whisper2_final_10s``
  has finals read a 10 s window (``asr.whisper.final_window_s``, the rest of the window
  filled in from the padding's encoding; only when asked for with ``--engines``), and
  ``whisper2_no_room`` has a pause's decode hear nothing after the speech
  (``asr.whisper.room_after_ms`` 0; only when asked for). Whisper base with 2 threads and
  beam 5 (``base2``, only when asked for with ``--engines``). Moonshine base
  (``moonshine2``, ``MoonshineRecognizer``, 2 threads: ``asr.engine: moonshine``).
- Streaming as in the node: 40 ms chunks fed at real time (the feeder sleeps until each chunk's
  capture time has passed), ``finish()`` right after the last chunk (the VAD's end event).
  At the end, ``end()`` and then ``poll_final()`` every 10 ms until the final is there (the
  non-blocking path; ``finish()`` would block for the whole latency instead).
  Per utterance: ``feed()`` time (the slice thread's cost per chunk: median and max),
  ``end()`` time (what the slice thread is blocked for at the end of the utterance), the
  latency from ``end()`` to the final transcript (what the user waits for once the VAD has
  seen the end; a blocking ``finish()`` takes this long), the first partial's delay after
  speech onset, and the engine's compute:
  pocketsphinx's feed+finish time; Whisper's and Moonshine's worker decode time (partials
  and finals).
  Real-time factor = compute / audio duration; for Whisper also one decode of the whole
  utterance (``rtf_one_decode``: what a decode-at-the-end design would wait for), its word
  error rate (``wer_full_decode``: the streaming final, which reuses the decode that already
  covers the speech, must stay within +0.02 of it) and its time against the streaming
  final's latency (``full_decode_ms``, ``final_over_full_decode``).
- Word error rate: (substitutions + deletions + insertions) / reference words after lower
  case and punctuation removed, over all utterances of a set.

Model load times are reported once. ``--repeats`` passes over the sentences; medians are over
all utterances. Run from the repository root (about 2 minutes; real-time pacing)::

    .venv/bin/python benchmarks/asr.py --json build/bench/asr.json
"""

from __future__ import annotations

import argparse
import math
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import soundfile
from _common import median, ratio, summary, write_result
from scipy.signal import resample_poly

from omniflow.core.text import edit_distance, words
from omniflow.engines.asr import (
    PocketsphinxRecognizer,
    Recognizer,
    StreamingRecognizer,
    WhisperRecognizer,
)
from omniflow.engines.moonshine import MoonshineRecognizer
from omniflow.engines.whisper_models import whisper_model_dir

CHUNK = 640  # 40 ms at 16 kHz
POLL_S = 0.01  # the fusion slice thread looks at the node clock every quarter slice
RATE = 16_000
COMMANDS = ("hello robot", "what is this red box", "stop", "turn left", "bring me the cup")
OPEN = (
    "can you tell me where the kitchen is",
    "the weather looks nice today",
    "please put the green bottle on the table",
)
GRAMMAR = """#JSGF V1.0;
grammar commands;
public <command> = hello robot | what is this red box | stop | turn left | bring me the cup;
"""


def speak(text: str, tail_ms: int, snr_db: float, seed: int, lead_ms: int = 300) -> np.ndarray:
    """espeak-ng's ``text`` at 16 kHz int16, silence around it, white noise at ``snr_db``."""
    exe = shutil.which("espeak-ng")
    if exe is None:
        raise SystemExit("espeak-ng is not installed: apt-get install espeak-ng")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "speech.wav"
        subprocess.run(
            [exe, "-w", str(out), "-v", "en-us", "-s", "150", text], check=True, timeout=30
        )
        data, rate = soundfile.read(str(out), dtype="float64")
    speech = resample_poly(data, 320, 441) * 32767  # 22050 Hz -> 16000 Hz
    assert rate == 22_050, rate
    voiced = speech[np.abs(speech) > 1]
    noise_rms = math.sqrt(float(np.mean(voiced**2))) / 10 ** (snr_db / 20)
    lead, tail = np.zeros(RATE * lead_ms // 1000), np.zeros(RATE * tail_ms // 1000)
    signal = np.concatenate([lead, speech, tail])
    noisy = signal + np.random.default_rng(seed).normal(0.0, noise_rms, len(signal))
    return np.clip(np.rint(noisy), -32768, 32767).astype(np.int16)


def stream(rec: Recognizer, samples: np.ndarray, realtime: bool = True) -> dict[str, Any]:
    """Feed ``samples`` at real time (or as fast as the recogniser takes them), finish; the
    times that matter for the node (the final's latency means something only at real time)."""
    feeds: list[int] = []
    first_partial_s = math.nan
    rec.start(0)
    t_start = time.perf_counter()
    for n, i in enumerate(range(0, len(samples), CHUNK)):
        due = t_start + (n + 1) * CHUNK / RATE  # the chunk is complete at this time
        pause = due - time.perf_counter()
        if realtime and pause > 0:
            time.sleep(pause)
        t0 = time.perf_counter_ns()
        partial = rec.feed(samples[i : i + CHUNK])
        feeds.append(time.perf_counter_ns() - t0)
        if partial and math.isnan(first_partial_s):
            first_partial_s = (n + 1) * CHUNK / RATE - 0.3  # after the speech began
    t0 = time.perf_counter_ns()
    rec.end()
    end_ns = time.perf_counter_ns() - t0
    result = rec.poll_final()
    while result is None:  # what the node's slice thread would do: look again next slice
        time.sleep(POLL_S)
        result = rec.poll_final()
    latency_ns = time.perf_counter_ns() - t0
    return {
        "text": result.text,
        "confidence": result.confidence,
        "feed_ns": feeds,
        "end_ns": end_ns,
        "latency_ns": latency_ns,
        "first_partial_s": first_partial_s,
    }


def run_engine(
    name: str, make: Any, utterances: list[tuple[str, str, np.ndarray]]
) -> dict[str, Any]:
    t0 = time.perf_counter()
    rec = make()
    load_s = time.perf_counter() - t0
    errors = {"commands": [0, 0], "open": [0, 0]}
    feeds: list[int] = []
    ends: list[float] = []
    finishes: list[float] = []
    partial_delays: list[float] = []
    compute_rtf: list[float] = []
    texts: list[list[str]] = []
    audio_s = 0.0
    whisper = isinstance(rec, StreamingRecognizer)  # decodes on a worker of its own
    for kind, ref, samples in utterances:
        before = rec.stats.decode_ns_total if whisper else 0
        out = stream(rec, samples)
        duration = len(samples) / RATE
        audio_s += duration
        if whisper:
            compute = (rec.stats.decode_ns_total - before) / 1e9
        else:
            compute = (sum(out["feed_ns"]) + out["end_ns"]) / 1e9
        compute_rtf.append(compute / duration)
        ref_words, hyp_words = words(ref), words(out["text"])
        errors[kind][0] += edit_distance(ref_words, hyp_words)
        errors[kind][1] += len(ref_words)
        feeds += out["feed_ns"]
        ends.append(out["end_ns"] / 1e6)
        finishes.append(out["latency_ns"] / 1e6)
        partial_delays.append(out["first_partial_s"])  # NaN without partials: left out
        texts.append([ref, out["text"]])
    partials = summary(partial_delays, 2, figures=("median",))
    result: dict[str, Any] = {
        "engine": name,
        "load_s": round(load_s, 2),
        "audio_s": round(audio_s, 1),
        "wer_commands": ratio(*errors["commands"]),
        "wer_open": ratio(*errors["open"]),
        "wer_all": ratio(sum(e for e, _ in errors.values()), sum(n for _, n in errors.values())),
        "rtf_compute_median": median(compute_rtf, 4),
        "feed_ms": summary(feeds, 4, figures=("median", "p99", "max"), scale=1e-6, count=None),
        "end_ms": summary(ends, 3, figures=("median", "max"), count=None),
        "final_latency_ms": summary(finishes, 2, figures=("median", "p90", "max"), count=None),
        "first_partial_s_median": partials["median"],
        "utterances": len(utterances),
        "with_partials": partials["n"],
        "texts": texts,
    }
    if whisper:
        st = rec.stats
        one, full_ms, full_errors = [], [], [0, 0]
        rec.wait_idle(60)  # decode_once shares the worker's model
        for _, ref, samples in utterances:
            t0 = time.perf_counter()
            text = rec.decode_once(samples).text  # one full decode of it all
            full_ms.append((time.perf_counter() - t0) * 1000)
            one.append(full_ms[-1] / 1000 / (len(samples) / RATE))
            full_errors[0] += edit_distance(words(ref), words(text))
            full_errors[1] += len(words(ref))
        result.update(
            {
                "rtf_one_decode_median": median(one, 4),
                "wer_full_decode": ratio(*full_errors),
                "full_decode_ms": summary(full_ms, 1, figures=("median", "p90"), count=None),
                "final_over_full_decode": {
                    "median": ratio(median(finishes), median(full_ms)),
                    "p90": ratio(summary(finishes, 2)["p90"], summary(full_ms, 2)["p90"]),
                },
                "decodes": st.decodes,
                "decode_ms_mean": round(st.decode_ns_total / max(st.decodes, 1) / 1e6, 1),
                "finals_ready": st.finals_ready,
                "finals_in_flight": st.finals_in_flight,
                "finals_queued": st.finals_queued,
                "drafts_stopped": st.drafts_stopped,
            }
        )
        rec.close()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--snr", type=float, default=20.0, help="white noise, dB below speech")
    parser.add_argument(
        "--tail-ms",
        type=int,
        default=400,
        help="silence fed after the speech (the VAD's min_silence_ms)",
    )
    parser.add_argument(
        "--lead-ms",
        type=int,
        default=300,
        help="silence fed before the speech (the fusion node's asr.lead_in_ms)",
    )
    parser.add_argument("--repeats", type=int, default=1, help="passes over the sentences")
    parser.add_argument(
        "--engines",
        default="ps_open,ps_grammar,moonshine2,whisper1,whisper2,whisper2_greedy,whisper2_full_drafts",
        help="comma-separated subset of the engines",
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)

    sentences = [("commands", t) for t in COMMANDS] + [("open", t) for t in OPEN]
    utterances = [
        (kind, text, speak(text, args.tail_ms, args.snr, seed=100 * r + i, lead_ms=args.lead_ms))
        for r in range(args.repeats)
        for i, (kind, text) in enumerate(sentences)
    ]
    engines = {
        "ps_open": lambda: PocketsphinxRecognizer(),
        "ps_grammar": lambda: PocketsphinxRecognizer(grammar=GRAMMAR),
        "moonshine2": lambda: MoonshineRecognizer(threads=2),
        "whisper1": lambda: WhisperRecognizer(threads=1),
        "whisper2": lambda: WhisperRecognizer(threads=2),
        "whisper2_greedy": lambda: WhisperRecognizer(threads=2, beam_size=1),
        "whisper2_full_drafts": lambda: WhisperRecognizer(threads=2, draft_window_s=30.0),
        "whisper2_final_10s": lambda: WhisperRecognizer(threads=2, final_window_s=10.0),
        "whisper2_no_room": lambda: WhisperRecognizer(threads=2, room_after_ms=0),
        "base2": lambda: WhisperRecognizer(whisper_model_dir("base")[0], threads=2),
    }
    result = {
        "snr_db": args.snr,
        "tail_ms": args.tail_ms,
        "lead_ms": args.lead_ms,
        "repeats": args.repeats,
        "engines": [
            run_engine(name, engines[name], utterances) for name in args.engines.split(",")
        ],
    }
    write_result(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
