#!/usr/bin/env python3
"""Resident memory of the dialogue's language model over many turns (MB per 100 turns).

``benchmarks/soak.py`` measures each node's RSS through the whole graph; this isolates what
the dialogue node's model does to it. The embedded backend (``llm.*`` defaults: Gemma 3 270M
through llama-cpp-python) answers ``--turns`` questions in a row as the dialogue node asks
them: each question's words are warmed and scored for the end of the turn as they grow (three
partials), then answered (at most 24 tokens), with the default persona, a changing scene and
the last ``history.max_turns`` turns. Questions are drawn from a small vocabulary with a fixed
seed, so every prompt is new and its length varies as in a conversation.

RSS is read from ``/proc/self/statm`` after every turn. Reported: RSS at the start, after
``--warmup`` turns, at the end, its lowest and highest after the warm-up, and the slope of a
least-squares line through the samples after the warm-up, in MB per 100 turns, with its
standard error (glibc keeps and returns freed heap in steps of tens of MB, so a short run's
slope is mostly that noise: judge it against its error). ``--trim`` calls glibc's
``malloc_trim(0)`` after each turn (growth that goes away with it is freed heap the allocator
kept, not live data); ``--trace`` reports what Python allocated after the warm-up and still
holds at the end, by line. Prints JSON; ``--json PATH`` also writes it.

    .venv/bin/python benchmarks/model_memory.py --turns 400 --json build/bench/model_memory.json
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import os
import platform
import random
import threading
import time
import tracemalloc
from pathlib import Path

import numpy as np
from _common import rss_mb, write_result

from omniflow.core.params import defaults
from omniflow.core.prompt import Prompt, Turn
from omniflow.core.turn_context import TURN_PARAMS
from omniflow.engines.llm.factory import make_backend
from omniflow.engines.llm.params import LLM_PARAMS

WORDS = (
    "what is this that the a cup cat table red blue robot where can you see me bring please "
    "animal small big colour on under near my your left right"
).split()
SCENES = ("a cup on a table", "a cat", "a person, a cup", "a dining table, a chair", "nothing")


def slope_with_error(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least-squares slope of ``y`` against ``x`` and its standard error."""
    slope, intercept = np.polyfit(x, y, 1)
    residuals = y - (slope * x + intercept)
    spread = float(np.sum((x - x.mean()) ** 2))
    error = float(np.sqrt(np.sum(residuals**2) / max(len(x) - 2, 1) / spread))
    return float(slope), error


def run(turns: int, warmup: int, trim: bool, trace: bool) -> dict:
    llm_defaults = defaults(LLM_PARAMS)
    max_turns = int(defaults(TURN_PARAMS)["history.max_turns"])
    backend = make_backend({})
    backend.load()
    libc = ctypes.CDLL("libc.so.6") if trim else None
    rng = random.Random(1)
    history: list[Turn] = []
    samples: list[float] = []
    start_mb = rss_mb()
    snapshot = None
    began = time.perf_counter()
    for turn in range(turns):
        words = [rng.choice(WORDS) for _ in range(rng.randint(3, 9))]
        question = " ".join(words) + "?"

        prompt = functools.partial(
            Prompt,
            llm_defaults["llm.system_prompt"],
            scene=SCENES[turn % len(SCENES)],
            history=tuple(history[-max_turns:]),
        )
        for n in range(1, 4):  # the partials as the question is spoken
            partial = prompt(user=" ".join(words[: len(words) * n // 3]))
            backend.warm(partial)
            backend.turn_end_probability(partial)
        tokens = backend.generate(prompt(user=question), cancel=threading.Event(), max_tokens=24)
        answer = "".join(tokens)
        history += [Turn("user", question), Turn("robot", answer.strip() or "...")]
        del history[:-max_turns]
        if libc is not None:
            libc.malloc_trim(0)
        samples.append(rss_mb())
        if turn + 1 == warmup and trace:
            tracemalloc.start()
            snapshot = tracemalloc.take_snapshot()
    seconds = time.perf_counter() - began
    after = np.asarray(samples[warmup:])
    x = np.arange(len(after), dtype=np.float64)
    slope, error = slope_with_error(x, after) if len(after) > 2 else (float("nan"),) * 2
    result = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "model": str(backend.model_path),
        "turns": turns,
        "warmup_turns": warmup,
        "seconds_per_turn": round(seconds / turns, 3),
        "trim": trim,
        "rss_mb": {
            "start": round(start_mb, 1),
            "after_warmup": round(samples[warmup - 1], 1) if warmup else round(start_mb, 1),
            "end": round(samples[-1], 1),
            "min_after_warmup": round(float(after.min()), 1) if len(after) else None,
            "max_after_warmup": round(float(after.max()), 1) if len(after) else None,
        },
        "mb_per_100_turns": round(slope * 100, 3),
        "mb_per_100_turns_stderr": round(error * 100, 3),
    }
    if snapshot is not None:
        held = tracemalloc.take_snapshot().compare_to(snapshot, "lineno")
        result["python_held_after_warmup"] = [str(s) for s in held[:8]]
    backend.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=400, help="questions answered")
    parser.add_argument("--warmup", type=int, default=50, help="turns left out of the slope")
    parser.add_argument("--trim", action="store_true", help="malloc_trim(0) after each turn")
    parser.add_argument("--trace", action="store_true", help="Python allocations held")
    parser.add_argument("--json", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    if not 0 <= args.warmup < args.turns:
        parser.error("--warmup must be at least 0 and less than --turns")
    write_result(run(args.turns, args.warmup, args.trim, args.trace), args.json)


if __name__ == "__main__":
    main()
