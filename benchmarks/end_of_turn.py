#!/usr/bin/env python3
"""Semantic end of turn: the embedded model's scores of finished and unfinished sentences,
the waits the policy chooses for them, and what a score costs.

For every sentence, as the dialogue node sees it: the words arrive as partial transcripts
(each evaluated ahead, ``warm``), then the final text is scored
(``LlamaCppBackend.turn_end_probability``: the probability that the sentence or the
``User:`` line ends there). Finished turns are questions and requests, some without their
full stop; unfinished ones are the same kind of sentences cut where people pause to find a
word ("I would like the"), some with the full stop or ellipsis a recogniser puts at the end
of a fragment. What is scored is ``without_closing_stop`` of each (trailing full stops left out).
Printed per sentence: the probability and the wait of ``EndOfTurnPolicy`` (the
``end_of_turn.*`` defaults, or ``--threshold``); in the summary: the lowest finished score,
the highest unfinished one, how many of each got the wrong wait, and the time of the final
score after the partials (``warmed``: the last partial held all the words, as when the
final reuses the decode that covers the speech; ``incremental``: the final adds its last
word to what the partials evaluated) and without partials (``cold``: the system text
cached, the user's line evaluated), median and p90, in one run. Prints JSON; ``--json
PATH`` also writes it::

    .venv/bin/python benchmarks/end_of_turn.py --json build/bench/end_of_turn.json
"""

from __future__ import annotations

import argparse
import threading
import time
from dataclasses import replace
from pathlib import Path

from _common import summary, write_result

from omniflow.core.end_of_turn import END_OF_TURN_PARAMS, EndOfTurnPolicy, without_closing_stop
from omniflow.core.params import defaults
from omniflow.core.prompt import Prompt
from omniflow.engines.llm import LLM_PARAMS, make_backend
from omniflow.engines.model_worker import llm_values, warm_up

FINISHED = (
    "What is this?",
    "Please bring me the red cup.",
    "What colour is the box?",
    "Where is my phone?",
    "Can you help me?",
    "I would like the red cup please.",
    "Turn left.",
    "What time is it?",
    "Hello.",
    "Thank you.",
    "Put the bottle on the table.",
    "How many apples are there?",
    "What is the colour of the cup?",
    "Stop.",
)
UNFINISHED = (
    "What is the colour of",
    "I would like the",
    "Could you bring me",
    "Put the bottle on",
    "Where did I put my",
    "Can you tell me what",
    "Please pick up the",
    "How many",
    "I want to",
    "Is there a",
    "Show me the",
    "What is the",
)


def final_score(backend, system: str, text: str, partials: int) -> tuple[float, float]:
    """(probability, seconds of the final score) for ``text`` after ``partials`` partial
    transcripts, the first words one more each, evaluated ahead as the node does."""
    backend.reset()
    warm_up(backend, system)
    words = without_closing_stop(text).split()
    for n in range(1, partials + 1):
        backend.warm(Prompt(system=system, user=" ".join(words[:n])))
    t0 = time.perf_counter()
    probability = backend.turn_end_probability(
        Prompt(system=system, user=without_closing_stop(text)), threading.Event()
    )
    return probability, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threshold", type=float, help="instead of end_of_turn.threshold")
    parser.add_argument("--json", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    params = defaults(LLM_PARAMS)
    policy = EndOfTurnPolicy.from_params(defaults(END_OF_TURN_PARAMS))
    if args.threshold is not None:
        policy = replace(policy, threshold=args.threshold)
    system = str(params["llm.system_prompt"])
    backend = make_backend(llm_values(params))
    backend.load()
    sentences = [(t, True) for t in FINISHED]
    sentences += [(t.rstrip("."), True) for t in FINISHED if t.endswith(".")]
    sentences += [(t, False) for t in UNFINISHED]
    sentences += [(t + suffix, False) for t in UNFINISHED[:4] for suffix in (".", "...")]
    rows, warmed, incremental, cold = [], [], [], []
    try:
        for text, finished in sentences:
            n = len(text.split())
            p, seconds = final_score(backend, system, text, n - 1)
            incremental.append(seconds)
            warmed.append(final_score(backend, system, text, n)[1])
            cold.append(final_score(backend, system, text, 0)[1])
            wait_ms = round(policy.wait_s(p) * 1000)
            rows.append({"text": text, "finished": finished, "p": round(p, 5), "wait_ms": wait_ms})
            print(
                f"{'finished  ' if finished else 'unfinished'} p={p:.5f} wait {wait_ms} ms  {text}"
            )
    finally:
        backend.close()
    done = [r["p"] for r in rows if r["finished"]]
    open_ = [r["p"] for r in rows if not r["finished"]]
    out = {
        "policy": {
            "threshold": policy.threshold,
            "short_wait_ms": round(policy.short_wait_s * 1000),
            "long_wait_ms": round(policy.long_wait_s * 1000),
        },
        "finished_min_p": min(done),
        "unfinished_max_p": max(open_),
        "finished_given_the_long_wait": sum(not policy.complete(p) for p in done),
        "unfinished_given_the_short_wait": sum(policy.complete(p) for p in open_),
        "of": {"finished": len(done), "unfinished": len(open_)},
        "score_ms": {
            "warmed": summary(warmed, 1, scale=1000),
            "incremental": summary(incremental, 1, scale=1000),
            "cold": summary(cold, 1, scale=1000),
        },
        "sentences": rows,
    }
    write_result(out, args.json)


if __name__ == "__main__":
    main()
