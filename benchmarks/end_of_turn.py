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

``--heard`` measures instead what the recogniser makes of the same sentences said alone
(espeak-ng, ``VOICES``, clean and with white noise at 20 and 10 dB SNR, 300 ms of silence
before and 400 ms after, as the fusion node feeds a final; Whisper tiny.en with the node's
defaults): the words heard, the confidence of the last one, and how many sentences of each
kind ``end_of_turn.unsure_word`` holds as guessed (Whisper closes a fragment with a word of
its own, "I would like the" as "I would like that.").
"""

from __future__ import annotations

import argparse
import math
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from _common import summary, write_result
from echo import speak

from omniflow.core.end_of_turn import END_OF_TURN_PARAMS, EndOfTurnPolicy, without_closing_stop
from omniflow.core.params import defaults
from omniflow.core.prompt import Prompt
from omniflow.engines.asr import WhisperRecognizer
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


VOICES = ("en-us", "en-gb", "en-us+f3", "en-gb-x-rp", "en-us+m3")
SNRS_DB = (None, 20.0, 10.0)  # None: clean (a -60 dBFS floor)
RATE = 16_000


def heard(policy: EndOfTurnPolicy) -> dict:
    """Each sentence said in each voice and noise, recognised: the last word's confidence
    and whether the policy takes it for a guess."""
    recognizer = WhisperRecognizer()
    rows = []
    try:
        for finished, texts in ((True, FINISHED), (False, UNFINISHED)):
            for n, text in enumerate(texts):
                for v, voice in enumerate(VOICES):
                    speech = speak(text, voice).astype(np.float64)
                    rms = np.sqrt(np.mean(speech**2))
                    for snr_db in SNRS_DB:
                        rng = np.random.default_rng([n, v, int(snr_db or 0), finished])
                        audio = np.concatenate(
                            [np.zeros(RATE * 3 // 10), speech, np.zeros(RATE * 4 // 10)]
                        )
                        scale = 32.0 if snr_db is None else rms / 10 ** (snr_db / 20)
                        audio += rng.standard_normal(len(audio)) * scale
                        pcm = np.clip(np.round(audio), -32768, 32767).astype(np.int16)
                        result = recognizer.decode_once(pcm)
                        last = float(result.words[-1].confidence) if result.words else math.nan
                        rows.append(
                            {
                                "text": text,
                                "finished": finished,
                                "voice": voice,
                                "snr_db": snr_db,
                                "heard": result.text,
                                "last_word_confidence": round(last, 3),
                                "guessed": bool(policy.guessed(last)),
                            }
                        )
                        print(
                            f"{'finished  ' if finished else 'unfinished'} {voice:11} "
                            f"{snr_db or '-':>5} last {last:.3f}"
                            f"{' guessed' if rows[-1]['guessed'] else '        '} "
                            f"{text!r} -> {result.text!r}"
                        )
    finally:
        recognizer.close()

    def of(finished: bool) -> dict:
        kind = [r for r in rows if r["finished"] is finished]
        return {
            "sentences": len(kind),
            "held_as_guessed": sum(r["guessed"] for r in kind),
            "last_word_confidence": summary(
                [r["last_word_confidence"] for r in kind], 3, figures=("min", "median")
            ),
            "guessed": [f"{r['text']!r} -> {r['heard']!r}" for r in kind if r["guessed"]],
        }

    return {
        "unsure_word": policy.unsure_word,
        "finished": of(True),
        "unfinished": of(False),
        "rows": rows,
    }


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
    parser.add_argument(
        "--heard", action="store_true", help="the recogniser's last words instead (no model)"
    )
    parser.add_argument("--json", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    params = defaults(LLM_PARAMS)
    policy = EndOfTurnPolicy.from_params(defaults(END_OF_TURN_PARAMS))
    if args.threshold is not None:
        policy = replace(policy, threshold=args.threshold)
    if args.heard:
        write_result(heard(policy), args.json)
        return
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
