#!/usr/bin/env python3
"""Measure the LLM backend against raw llama-cpp-python: tokens/s, first token, prefix reuse.

Method (prints one JSON object):

- Model: the embedded Gemma 3 270M Q4_K_M (assembled into the cache folder if needed), or
  ``--model`` any GGUF. One prompt: the default persona, four earlier turns, a scene and a
  question, laid out by ``omniflow.core.prompt.DEFAULT_FORMAT``.
- Baseline: ``llama_cpp.Llama.create_completion(text, stream=True)``; candidate:
  ``LlamaCppBackend.generate``. Both use the *same* ``Llama`` instance (the backend's), so
  threads, KV cache and memory are identical (two instances would leave one's idle threads
  spinning while the other runs); greedy sampling, repeat penalty 1.0, no stop strings and a
  fixed ``--max-tokens``, so both must write the same tokens (checked: ``same_text``). The two
  run interleaved, round by round, alternating which goes first, so load hits both alike.
- ``warm``: the prompt is already in both KV caches (each library reuses the common prefix),
  so only the last prompt token is evaluated: first-token time is then the per-call overhead.
  ``cold``: both caches are reset before every round, so the whole prompt is evaluated (the
  backend in ``prompt_chunk``-token pieces, llama.cpp in one 512-token batch).
- Per round: time to the first non-empty text delta (``first_token_ms``, from the call) and
  decode speed ``tokens_per_s`` = (tokens - 1) / (last delta - first delta). Median and p90
  over ``--rounds``; ratios candidate / baseline of the medians (target: tokens/s >= 0.95,
  first-token overhead <= 10 ms). ``cpu_ms`` is the process CPU time of the whole call: on a
  machine shared with other work it shows the cost of each path when wall times are noisy.
- ``chunks``: cold first token of the backend for several ``prompt_chunk`` values (the cost of
  being able to stop within one chunk during a long prompt).
- ``turn``: what a user waits for in a conversation, with the backend only: ``cold`` (empty
  cache), ``new_turn`` (system and history cached from the previous turn, the new question
  not yet evaluated) and ``warmed`` (the question fed by ``warm()`` while it was spoken, as
  the dialogue node does with the partial transcript: only ``"?\\nRobot:"`` is left).

:func:`measure_round` and :func:`measure_backend` take any ``generate()`` callable that yields
text deltas, so the dialogue node's benchmark can measure through the node with the same code.
``--personas`` also records the answers of a few persona texts to the same questions (how
the default system prompt was chosen). Run from the repository root (a few minutes)::

    .venv/bin/python benchmarks/llm.py --rounds 7 --personas --json build/bench/llm.json
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from _common import difference, median, ratio, summary, write_result

from omniflow.core.prompt import DEFAULT_FORMAT, Prompt, PromptFormat, Turn
from omniflow.engines.llm import (
    DEFAULT_SYSTEM_PROMPT,
    LlamaCppBackend,
    Sampling,
    embedded_model_path,
)

PROMPT = Prompt(
    DEFAULT_SYSTEM_PROMPT,
    scene="a person holding a red box; a table; a cup",
    history=(
        Turn("user", "Hello robot!"),
        Turn("robot", "Hello! How can I help you?"),
        Turn("user", "Can you see me?"),
        Turn("robot", "Yes, I can see you."),
    ),
    user="What is this red box that I am holding?",
)


# Persona texts tried on the base model (--personas): the default one carries a worked example.
PERSONAS = {
    "instruction": "A friendly robot answers the user's questions in one short sentence.",
    "default": DEFAULT_SYSTEM_PROMPT,
    "two_examples": "The robot is friendly and helpful. It gives correct, short answers.\n\n"
    "User: What colour is grass?\nRobot: Grass is green.\n"
    "User: Who wrote Hamlet?\nRobot: William Shakespeare wrote Hamlet.",
}
QUESTIONS = (
    ("", "What is the capital of France?"),
    ("a red box on a table", "What is this?"),
    ("", "Hello robot, how are you?"),
    ("a person waving", "Can you tell me what you see?"),
    ("", "How many legs does a dog have?"),
    ("", "What is the largest planet?"),
    ("a cup of coffee", "What am I holding?"),
)


def compare_personas(backend: LlamaCppBackend, temperatures: Iterable[float]) -> dict[str, Any]:
    """Answers of each persona to the same questions, with the default stop strings."""
    fmt, backend.fmt = backend.fmt, DEFAULT_FORMAT
    out: dict[str, Any] = {}
    for temperature in temperatures:
        backend.sampling.temperature = temperature
        for name, system in PERSONAS.items():
            out[f"{name}@{temperature:g}"] = [
                "".join(
                    backend.generate(
                        Prompt(system, scene=scene, user=question), cancel=threading.Event()
                    )
                )
                for scene, question in QUESTIONS
            ]
    backend.fmt = fmt
    backend.sampling.temperature = 0.0
    return out


def measure_round(
    generate: Callable[[], Iterable[str]], tokens_of: Callable[[list[str]], int] | None = None
) -> dict[str, Any]:
    """Run one generation; time the first non-empty delta and the decode speed.

    ``tokens_of(deltas)`` gives the number of generated tokens (default: one per delta).
    """
    t0 = time.perf_counter()
    c0 = time.process_time()
    first = last = None
    deltas: list[str] = []
    for delta in generate():
        now = time.perf_counter()
        if delta:
            if first is None:
                first = now
            last = now
            deltas.append(delta)
    end = time.perf_counter()
    cpu = time.process_time() - c0
    tokens = tokens_of(deltas) if tokens_of else len(deltas)
    rate = (tokens - 1) / (last - first) if first is not None and last > first else float("nan")
    return {
        "first_token_ms": (first - t0) * 1e3 if first is not None else float("nan"),
        "total_ms": (end - t0) * 1e3,
        "cpu_ms": cpu * 1e3,
        "tokens": tokens,
        "tokens_per_s": rate,
        "text": "".join(deltas),
    }


def summarize(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and p90 of each timed figure over rounds."""
    out: dict[str, Any] = {"rounds": len(rounds)}
    for key in ("first_token_ms", "tokens_per_s", "total_ms", "cpu_ms"):
        out[key] = summary((r[key] for r in rounds), 2, count=None)
    out["tokens"] = int(median((r["tokens"] for r in rounds), 0))
    return out


def measure_backend(
    generate: Callable[[], Iterable[str]],
    *,
    rounds: int = 5,
    before_round: Callable[[int], None] | None = None,
    tokens_of: Callable[[list[str]], int] | None = None,
) -> dict[str, Any]:
    """``rounds`` generations (``before_round(i)`` before each), summarised."""
    results = []
    for i in range(rounds):
        if before_round is not None:
            before_round(i)
        results.append(measure_round(generate, tokens_of))
    return summarize(results)


def _ratio(candidate: dict[str, Any], baseline: dict[str, Any]) -> dict[str, float | None]:
    return {
        "tokens_per_s": ratio(
            candidate["tokens_per_s"]["median"], baseline["tokens_per_s"]["median"]
        ),
        "cpu": ratio(candidate["cpu_ms"]["median"], baseline["cpu_ms"]["median"]),
        "first_token_overhead_ms": difference(
            candidate["first_token_ms"]["median"], baseline["first_token_ms"]["median"]
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, help="GGUF file (default: the embedded Gemma)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--n-ctx", type=int, default=2048)
    parser.add_argument(
        "--chunks",
        type=int,
        nargs="*",
        default=[16, 32, 64, 512],
        help="prompt_chunk values for the cold first-token comparison",
    )
    parser.add_argument(
        "--personas",
        action="store_true",
        help="also record each persona text's answers (greedy and 0.3)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)

    model = args.model or embedded_model_path()
    text = DEFAULT_FORMAT.render(PROMPT)
    t0 = time.perf_counter()
    backend = LlamaCppBackend(
        model,
        n_ctx=args.n_ctx,
        threads=args.threads,
        seed=1,
        fmt=PromptFormat(stop=()),
        sampling=Sampling(temperature=0.0, repeat_penalty=1.0, max_tokens=args.max_tokens),
    )
    backend.load()
    load_s = time.perf_counter() - t0
    raw = backend.llama
    import llama_cpp  # after load(): the backend sets up the OpenMP environment first

    def raw_generate() -> Iterable[str]:
        for chunk in raw.create_completion(
            text, max_tokens=args.max_tokens, temperature=0.0, repeat_penalty=1.0, stream=True
        ):
            yield chunk["choices"][0]["text"]

    def ours_generate(prompt: Prompt = PROMPT) -> Iterable[str]:
        return backend.generate(prompt, cancel=threading.Event())

    def ours_tokens(_: list[str]) -> int:
        return backend.last_stats.generated_tokens

    result: dict[str, Any] = {
        "model": model.name,
        "threads": args.threads,
        "max_tokens": args.max_tokens,
        "prompt_tokens": backend.count_tokens(text),
        "load_s": round(load_s, 2),
        "llama_cpp_python": llama_cpp.__version__,
    }

    for mode in ("warm", "cold"):
        rounds: dict[str, list[dict[str, Any]]] = {"raw": [], "backend": []}
        list(raw_generate())  # fill both caches once (and warm up the threads)
        list(ours_generate())
        for i in range(args.rounds):
            order = ("raw", "backend") if i % 2 == 0 else ("backend", "raw")
            for name in order:
                if mode == "cold":
                    backend.reset()
                if name == "raw":
                    rounds[name].append(measure_round(raw_generate))
                else:
                    rounds[name].append(measure_round(ours_generate, ours_tokens))
        same = rounds["raw"][0]["text"].strip() == rounds["backend"][0]["text"].strip()
        summary = {name: summarize(r) for name, r in rounds.items()}
        summary["ratio"] = _ratio(summary["backend"], summary["raw"])
        summary["same_text"] = same
        result[mode] = summary

    chunks: dict[str, Any] = {}
    for chunk in args.chunks:
        backend.sampling.prompt_chunk = chunk
        s = measure_backend(
            ours_generate,
            rounds=max(3, args.rounds // 2),
            before_round=lambda _: backend.reset(),
            tokens_of=ours_tokens,
        )
        chunks[str(chunk)] = {
            "cold_first_token_ms": s["first_token_ms"],
            "prompt_tok_per_s": ratio(
                result["prompt_tokens"] * 1e3, s["first_token_ms"]["median"], 1
            ),
        }
    backend.sampling.prompt_chunk = 32
    result["chunks"] = chunks

    # A conversation turn: previous turn cached, then the new question.
    question = "What colour is the cup on the table?"
    words = question.split()
    nxt = Prompt(
        PROMPT.system,
        scene=PROMPT.scene,
        history=PROMPT.history + (Turn("user", PROMPT.user), Turn("robot", "It is a red box.")),
        user=question,
    )

    def cold(_: int) -> None:
        backend.reset()

    def new_turn(_: int) -> None:
        backend.reset()
        backend.warm(Prompt(nxt.system, history=nxt.history))  # what the last turn left

    def warmed(_: int) -> None:
        new_turn(0)
        for n in range(1, len(words) + 1):  # the partial transcript grows word by word
            partial = " ".join(words[:n]).rstrip("?")  # the recogniser adds no "?"
            backend.warm(Prompt(nxt.system, scene=nxt.scene, history=nxt.history, user=partial))

    turn: dict[str, Any] = {"prompt_tokens": backend.count_tokens(DEFAULT_FORMAT.render(nxt))}
    evaluated: dict[str, int] = {}
    for name, prepare in (("cold", cold), ("new_turn", new_turn), ("warmed", warmed)):
        s = measure_backend(
            lambda: ours_generate(nxt),
            rounds=args.rounds,
            before_round=prepare,
            tokens_of=ours_tokens,
        )
        evaluated[name] = backend.last_stats.evaluated_tokens
        turn[name] = {"first_token_ms": s["first_token_ms"], "evaluated_tokens": evaluated[name]}
    result["turn"] = turn
    if args.personas:
        result["personas"] = compare_personas(backend, (0.0, 0.3))
    backend.close()

    write_result(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
