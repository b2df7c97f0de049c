#!/usr/bin/env python3
"""Voice activity in steady room noise: does a question inside it start and end, and does the
noise alone start anything? (issue 16, point 2)

Method (prints one JSON object): espeak-ng (en-us, 150 words/min) says each of ``QUESTIONS``;
each is placed 3 s into 8 s of noise (``omniflow.core.room_sounds``: pink noise, a fan) at
20, 10 and 5 dB SNR (the question's active level over the noise RMS, measured on the mix), for
``--seeds`` noise seeds. Every detector processes the mix in 40 ms chunks with the fusion
node's timings (``min_speech_ms`` 60, ``min_silence_ms`` 400):

- ``webrtc``: webrtcvad alone (aggressiveness 2), what the fusion node ran before;
- ``webrtc+floor``: webrtcvad gated by the noise floor (``noise_margin_db`` 6, the default of
  the fusion node's ``vad.noise.margin_db``);
- ``silero``, ``silero+floor``: the silero ONNX model, alone and gated (when installed);
- ``webrtc+floor+speex``, ``webrtc+floor+rnnoise``: the default detector behind a noise
  suppressor (``omniflow.engines.denoise``, the fusion node's ``audio.denoise``), its cost
  included.

Per detector and condition: ``found`` is the share of runs where the question's speech is
exactly one or two utterances (its sentences may split at a pause) that start within 0.3 s of
its onset and end within the question (+0.6 s); ``false_starts`` counts starts outside it;
``open_at_end`` counts runs still in "speech" when the noise ends (speech without end). The
cost per 40 ms chunk (median, p90) is measured over all runs. Run from the repository root::

    .venv/bin/python benchmarks/vad_noise.py --json build/bench/vad_noise.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import summary, write_result

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
from make_sample_audio import synthesise  # noqa: E402

from omniflow.core.room_sounds import fan_noise, mix_at_snr, pink_noise  # noqa: E402
from omniflow.engines.denoise import make_denoiser  # noqa: E402
from omniflow.engines.vad import make_vad  # noqa: E402
from omniflow.errors import ConfigError, EngineError  # noqa: E402

RATE, CHUNK, NS_PER_SAMPLE = 16_000, 640, 62_500
QUESTIONS = ("What is that animal on the table?", "Bring me the red cup from the kitchen please.")
NOISES = {"pink": pink_noise, "fan": fan_noise}
SNRS_DB = (20.0, 10.0, 5.0)
AT_S, LENGTH_S = 3.0, 8.0
TIMING = {"min_speech_ms": 60.0, "min_silence_ms": 400.0}
FLOOR = {"noise_margin_db": 6.0}
DETECTORS = {  # name: (VAD engine, its options, noise suppressor)
    "webrtc": ("webrtc", {}, "none"),
    "webrtc+floor": ("webrtc", FLOOR, "none"),
    "silero": ("silero", {}, "none"),
    "silero+floor": ("silero", FLOOR, "none"),
    "webrtc+floor+speex": ("webrtc", FLOOR, "speex"),
    "webrtc+floor+rnnoise": ("webrtc", FLOOR, "rnnoise"),
}


def events(
    engine: str, options: dict, denoise: str, mix: np.ndarray, costs: list[int]
) -> tuple[list, bool]:
    """(kind, seconds) of every event over the mix, and whether speech is open at its end."""
    vad = make_vad(engine, **TIMING, **options)
    suppressor = make_denoiser(denoise)
    out = []
    for i in range(0, len(mix) - CHUNK + 1, CHUNK):
        t0 = time.perf_counter_ns()
        chunk = mix[i : i + CHUNK]
        if suppressor is not None:
            chunk = suppressor.process(chunk)
        found = vad.process(chunk, i * NS_PER_SAMPLE)
        costs.append(time.perf_counter_ns() - t0)
        out += [(e.kind, e.stamp_ns / 1e9) for e in found]
    return out, vad.is_speech


def judge(found: list, open_at_end: bool, end_s: float) -> dict[str, Any]:
    inside = [(k, t) for k, t in found if AT_S - 0.3 <= t <= end_s + 0.6]
    kinds = [k for k, _ in inside]
    ok = (
        kinds in (["start", "end"], ["start", "end"] * 2)
        and abs(inside[0][1] - AT_S) <= 0.3
        and not open_at_end
    )
    false = sum(1 for k, t in found if k == "start" and (k, t) not in inside)
    return {"found": ok, "false_starts": false, "open_at_end": open_at_end}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=6, help="noise seeds per condition")
    parser.add_argument("--json", type=Path, default=None, help="also write the result here")
    args = parser.parse_args(argv)
    speech = [synthesise(q, words_per_minute=150) for q in QUESTIONS]
    detectors = {}
    for name, (engine, options, denoise) in DETECTORS.items():
        try:
            make_vad(engine, **options)
            make_denoiser(denoise)
        except (ConfigError, EngineError) as err:
            print(f"{name}: left out ({err})", file=sys.stderr)
            continue
        detectors[name] = (engine, options, denoise)
    results: dict[str, Any] = {name: {} for name in detectors}
    costs: dict[str, list[int]] = {name: [] for name in detectors}
    measured_snr: list[float] = []
    for noise_name, make_noise in NOISES.items():
        for snr in SNRS_DB:
            runs: dict[str, list[dict]] = {name: [] for name in detectors}
            for seed in range(args.seeds):
                noise = make_noise(round(LENGTH_S * RATE), np.random.default_rng(seed))
                for question in speech:
                    mix, snr_mix = mix_at_snr(question, noise, snr, at=round(AT_S * RATE))
                    measured_snr.append(snr_mix - snr)
                    end_s = AT_S + len(question) / RATE
                    for name, (engine, options, denoise) in detectors.items():
                        found, open_end = events(engine, options, denoise, mix, costs[name])
                        runs[name].append(judge(found, open_end, end_s))
            for name, judged in runs.items():
                results[name][f"{noise_name} {snr:g} dB"] = {
                    "runs": len(judged),
                    "found": round(sum(r["found"] for r in judged) / len(judged), 3),
                    "false_starts": sum(r["false_starts"] for r in judged),
                    "open_at_end": sum(r["open_at_end"] for r in judged),
                }
    result = {
        "method": "questions in steady noise, 40 ms chunks; see the docstring",
        "snr_error_db": summary(np.abs(measured_snr), 2, figures=("median", "max")),
        "detectors": {
            name: {
                "per_chunk_ms": summary(costs[name], 4, scale=1e-6),
                "conditions": results[name],
            }
            for name in detectors
        },
    }
    write_result(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
