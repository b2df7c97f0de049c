#!/usr/bin/env python3
"""A later question about what is in view now: does the answer name it, or the earlier object?

Method (prints one JSON object):

- Model: the embedded Gemma 3 270M through the dialogue's backend (``llm.*`` defaults:
  greedy), the default persona, prompts laid out by ``omniflow.core.prompt.DEFAULT_FORMAT``.
- Each case is two turns about two different COCO objects: the user asked "What is this?"
  with object A in view and the robot said "This is a A."; now object B is in view (the
  scene text the fusion node writes: "The camera shows a B in the centre. The hand points at
  the B.") and the user asks one of ``QUESTIONS``. ``--cases`` pairs are drawn from
  ``OBJECTS`` with a fixed seed, each question by turns.
- Two layouts of the same history, in the same run, case by case: ``scene_in_history`` (the
  product: the earlier user turn keeps the scene it was asked in, ``Turn.scene``) and the
  baseline ``without`` (the history holds only what was said, as before).
- Per layout: answers that name B (its last word appears), answers that name A, and the
  answers themselves.

    .venv/bin/python benchmarks/grounded_turns.py --cases 40 --json build/bench/grounded_turns.json
"""

from __future__ import annotations

import argparse
import platform
import random
import threading
from pathlib import Path

from _common import write_result

from omniflow.core.params import defaults
from omniflow.core.prompt import Prompt, Turn
from omniflow.engines.llm.factory import make_backend
from omniflow.engines.llm.params import LLM_PARAMS

OBJECTS = (
    "cup", "cat", "person", "dog", "bottle", "chair", "book", "banana", "laptop", "teddy bear"
)  # fmt: skip
QUESTIONS = ("What is this?", "What is that?", "What do you see?", "What am I pointing at?")
LAYOUTS = ("scene_in_history", "without")


def scene(name: str) -> str:
    return f"The camera shows a {name} in the centre. The hand points at the {name}."


def run(cases: int, seed: int) -> dict:
    system = str(defaults(LLM_PARAMS)["llm.system_prompt"])
    backend = make_backend({})
    backend.load()
    pairs = [(a, b) for a in OBJECTS for b in OBJECTS if a != b]
    random.Random(seed).shuffle(pairs)
    results = {layout: {"names_now": 0, "names_before": 0, "answers": []} for layout in LAYOUTS}
    try:
        for index, (before, now) in enumerate(pairs[:cases]):
            question = QUESTIONS[index % len(QUESTIONS)]
            for layout in LAYOUTS:
                earlier = scene(before) if layout == "scene_in_history" else ""
                history = (
                    Turn("user", "What is this?", earlier),
                    Turn("robot", f"This is a {before}."),
                )
                prompt = Prompt(system, scene=scene(now), history=history, user=question)
                answer = "".join(backend.generate(prompt, cancel=threading.Event())).strip()
                said = answer.lower()
                out = results[layout]
                out["names_now"] += now.split()[-1] in said
                out["names_before"] += before.split()[-1] in said
                out["answers"].append(f"{before} -> {now}, {question} {answer}")
    finally:
        backend.close()
    return {
        "benchmark": "grounded_turns",
        "machine": platform.machine(),
        "cases": min(cases, len(pairs)),
        "seed": seed,
        **results,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--cases", type=int, default=40, help="pairs of objects (at most 90)")
    parser.add_argument("--seed", type=int, default=0, help="which pairs")
    parser.add_argument("--json", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    write_result(run(args.cases, args.seed), args.json)


if __name__ == "__main__":
    main()
