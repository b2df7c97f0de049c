#!/usr/bin/env python3
"""Warm start: the first answer after start against a later one (the model with and without
its warm-up), and the recogniser's first decode against a later one.

Method (prints one JSON object), ``--rounds`` fresh engines per variant, the variants
alternating round by round so load on the machine falls on both alike:

- Language model (the embedded Gemma 3 270M, 2 threads): load, then (variant ``warm_up``)
  ``omniflow.engines.model_worker.warm_up`` as the dialogue node's configure does, or
  (``cold``) nothing; then two turns with the same system text and scene and different
  questions. Figure: each turn's first-token time (the backend's ``first_token_s``: prompt
  evaluation and the first token) and the ratio first turn / second turn (the issue's
  target: <= 1.5). Each turn has its own scene, so both evaluate a scene and a question
  after the cached system text, as turns in a conversation do.
- Recognisers (Whisper tiny.en with beam 5, the default, and Moonshine base; 2 threads
  each): construct (the load-time warm-up decodes run on its worker), wait until idle, then
  decode two espeak-ng utterances. Figure: each decode's time and the ratio first / second.

Run from the repository root (about 2 minutes)::

    .venv/bin/python benchmarks/warm_start.py --rounds 3 --json build/bench/warm_start.json
"""

from __future__ import annotations

import argparse
import functools
import sys
import threading
import time
from pathlib import Path

import numpy as np
from _common import median, ratio, write_result
from asr import speak

from omniflow.core.params import defaults
from omniflow.core.prompt import Prompt
from omniflow.engines.asr import make_recognizer
from omniflow.engines.llm import LLM_PARAMS, make_backend
from omniflow.engines.model_worker import llm_values, warm_up

# (scene, question) of the first and the second turn.
TURNS = (
    ("a white cup on a wooden table; a hand points at it", "What is this?"),
    ("a red box on a grey shelf; a person stands beside it", "What colour is the box?"),
)
UTTERANCES = ("what is this red box", "please put the green bottle on the table")


def first_token_s(backend, system: str, scene: str, question: str) -> float:
    for _ in backend.generate(
        Prompt(system=system, scene=scene, user=question), cancel=threading.Event(), max_tokens=1
    ):
        pass
    return backend.last_stats.first_token_s


def llm_round(warm: bool) -> list[float]:
    params = defaults(LLM_PARAMS)
    backend = make_backend(llm_values(params))
    backend.load()
    if warm:
        warm_up(backend, params["llm.system_prompt"])
    try:
        system = params["llm.system_prompt"]
        return [first_token_s(backend, system, *turn) * 1000 for turn in TURNS]
    finally:
        backend.close()


# As the fusion node builds them (asr.engine), with the parameters' defaults.
RECOGNISERS = {name: functools.partial(make_recognizer, name) for name in ("whisper", "moonshine")}


def asr_round(make, audio: list[np.ndarray]) -> list[float]:
    rec = make()
    rec.wait_idle(60)
    times = []
    for samples in audio:
        t0 = time.perf_counter()
        rec.decode_once(samples)  # a full decode, as a final
        times.append((time.perf_counter() - t0) * 1000)
    rec.close()
    return times


def spread(runs: list[list[float]]) -> dict[str, float | None]:
    first, later = [r[0] for r in runs], [r[1] for r in runs]
    return {
        "first_ms_median": median(first, 1),
        "later_ms_median": median(later, 1),
        "first_over_later": ratio(median(first), median(later), 2),
        "n": len(runs),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="fresh engines per variant")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    audio = [speak(text, 400, 20.0, seed) for seed, text in enumerate(UTTERANCES)]
    llm: dict[bool, list[list[float]]] = {True: [], False: []}
    rec: dict[str, list[list[float]]] = {name: [] for name in RECOGNISERS}
    for _ in range(args.rounds):
        for variant in (False, True):
            llm[variant].append(llm_round(variant))
        for name, make in RECOGNISERS.items():
            rec[name].append(asr_round(make, audio))
    result = {
        "llm_first_token": {"cold": spread(llm[False]), "warm_up": spread(llm[True])},
        **{f"{name}_decode": spread(runs) for name, runs in rec.items()},
    }
    write_result(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
