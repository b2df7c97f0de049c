#!/usr/bin/env python3
"""Scene-biased hearing: does priming Whisper with the labels in view help, and does it make
it hear labels nobody said? (issue 16, point 4).

Method (prints one JSON object):

- Speech: short questions about one object each (``TARGETS``: cup, bottle, cat, dog, chair,
  laptop, in ``TEMPLATES``), said by espeak-ng voices (``hearing.VOICES``, by turns, 150
  words/min), placed 0.3 s into a room (``hearing.room``): the fan and babble at 10 dB SNR
  and the fan at 5 dB, near (``--quick``: the fan at 10 dB only).
- Scenes: *in view*, the object asked about and two other labels are in view; *not in view*,
  three other labels are (the object asked about is not). The words and their text come from
  :mod:`omniflow.core.scene_bias` as the fusion node makes them (``SceneBias.words``,
  ``bias_prompt``).
- Runs, each over the same audio: ``none`` (no bias: today's recogniser), and for each of
  faster-whisper's two ways into the decoder's context, ``hotwords`` and ``initial_prompt``,
  the in-view and the not-in-view scene.
- Recogniser: Whisper tiny.en as the fusion node runs it (``WhisperRecognizer``, 2 threads,
  beam 5): each question is fed in 40 ms chunks, the worker let go idle, then ``finish()``
  (one decode of the whole question: its time is the final decode's cost).
- Figures per run: the in-view word's miss rate (questions whose transcript lacks the object
  asked about, plural allowed) per target word and overall, the question's word error rate,
  false hits (a label of the scene that was not said appearing in the transcript, per label
  offered; the ``none`` run is scored against the not-in-view scene's labels, what it hears
  without being primed), the decode time (median, p90), and each figure's ratio to ``none``
  measured in the same run.

A benchmark prints figures; it does not fail on a slow machine. Run from the repository root
(``--quick``, as ``make bench`` runs it: 10 minutes at a load average of 7-12 on 2 cores;
the whole run three times as long; ``--questions 1``, a check that it runs, is
``test/unit/test_scene_bias_benchmark.py``)::

    .venv/bin/python benchmarks/scene_bias.py --json build/bench/scene_bias.json
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import ratio, summary, write_result
from asr import RATE
from hearing import LEAD_S, VOICES, WARM_S, make_noises, room, synthesise

from omniflow.core.scene_bias import SceneBias, bias_prompt
from omniflow.core.text import edit_distance, words
from omniflow.engines.asr import WHISPER_PROMPTS, WhisperRecognizer

TARGETS = ("cup", "bottle", "cat", "dog", "chair", "laptop")
TEMPLATES = (
    "Is the {} on the table?",
    "Can you see my {}?",
    "Where did I put the {}?",
    "What colour is that {}?",
)
ROOMS = (("fan", 10.0), ("babble", 10.0), ("fan", 5.0))
CHUNK = RATE * 40 // 1000
TAIL_S = 0.4
# The longest wait for one decode: generous, the figures are about words, not speed.
WAIT_S = 300.0


def said(word: str, hypothesis: list[str]) -> bool:
    """Whether ``word`` (one or more words) is in the hypothesis's words, plural allowed."""
    parts = word.lower().split()
    n = len(parts)
    for i in range(len(hypothesis) - n + 1):
        got = hypothesis[i : i + n]
        if got[:-1] == parts[:-1] and got[-1] in (parts[-1], parts[-1] + "s", parts[-1] + "es"):
            return True
    return False


def _room(text: str) -> tuple[str, float]:
    noise, _, snr = text.partition(":")
    if noise not in ("fan", "motor", "babble"):
        raise argparse.ArgumentTypeError(f"{noise!r}: the noises are fan, motor and babble")
    try:
        return noise, float(snr)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give NOISE:SNR_DB, e.g. babble:10") from None


def _count(flags: list[bool]) -> tuple[int, int]:
    return sum(flags), len(flags)


def scenes(target: int) -> dict[str, tuple[str, ...]]:
    """The labels in view for a question about ``TARGETS[target]``: with it and without."""
    others = [TARGETS[(target + k) % len(TARGETS)] for k in (1, 2, 3)]
    bias = SceneBias()
    return {
        "in_view": bias.words([[TARGETS[target], *others[:2]]]),
        "not_in_view": bias.words([others]),
    }


def decode(rec: WhisperRecognizer, samples: np.ndarray, prompt: str | None) -> tuple[str, float]:
    """One question through the recogniser as the node feeds it; its text and the final
    decode's time (ms)."""
    rec.start(0)
    rec.set_prompt(prompt)
    for i in range(0, len(samples), CHUNK):
        rec.feed(samples[i : i + CHUNK])
    if not rec.wait_idle(WAIT_S):
        raise SystemExit(f"Whisper did not finish a partial decode within {WAIT_S:g} s")
    t0 = time.perf_counter_ns()
    text = rec.finish().text
    return text, (time.perf_counter_ns() - t0) / 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the fan at 10 dB only")
    parser.add_argument(
        "--room",
        action="append",
        type=_room,
        help="a room NOISE:SNR_DB instead of the default ones (repeatable), e.g. babble:10",
    )
    parser.add_argument(
        "--questions",
        type=int,
        default=len(TARGETS) * len(TEMPLATES),
        help="ask only the first N questions (a quick check that the run works)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    if not 1 <= args.questions <= len(TARGETS) * len(TEMPLATES):
        parser.error(f"--questions {args.questions}: ask 1 to {len(TARGETS) * len(TEMPLATES)}")
    asked = itertools.islice(itertools.product(range(len(TARGETS)), TEMPLATES), args.questions)
    questions = []
    for t, (target, template) in enumerate(asked):
        text = template.format(TARGETS[target])
        voice = VOICES[t % len(VOICES)]
        questions.append((target, text, synthesise(text, voice=voice, words_per_minute=150)))
    lead = round((WARM_S + LEAD_S + TAIL_S) * RATE)
    span = max(len(s) for _, _, s in questions) + lead
    noises = make_noises(4 * span, seed=11)
    rooms = tuple(args.room) if args.room else ROOMS[:1] if args.quick else ROOMS
    runs = ["none"]
    runs += [f"{way}/{scene}" for way in WHISPER_PROMPTS for scene in ("in_view", "not_in_view")]
    recognizers = {
        way: WhisperRecognizer(threads=2, prompt_as=way, finish_timeout_s=WAIT_S)
        for way in WHISPER_PROMPTS
    }
    rows: list[dict[str, Any]] = []
    try:
        for (noise_name, snr), (i, (target, text, samples)) in itertools.product(
            rooms, enumerate(questions)
        ):
            need = len(samples) + lead
            offset = (i * 7919) % (len(noises[noise_name]) - need + 1)
            noise = noises[noise_name][offset : offset + need]
            mix, _ = room(samples, noise, snr, far=False, rate=RATE, seed=i)
            # The recogniser hears the question from LEAD_S before the voice, as the
            # hearing benchmark's recognisers do (the WARM_S before it is the suppressor's).
            mix = mix[round(WARM_S * RATE) :]
            labels = scenes(target)
            for run in runs:
                way, _, scene = run.partition("/")
                rec = recognizers[way if scene else WHISPER_PROMPTS[0]]
                offered = labels[scene or "not_in_view"]
                prompt = bias_prompt(labels[scene]) if scene else None
                hyp_text, decode_ms = decode(rec, mix, prompt)
                ref, hyp = words(text), words(hyp_text)
                unsaid = [w for w in offered if not said(w, ref)]
                rows.append(
                    {
                        "run": run,
                        "room": f"{noise_name} {snr:g} dB",
                        "target": TARGETS[target],
                        "text": text,
                        "heard": hyp_text,
                        "missed": not said(TARGETS[target], hyp),
                        "errors": edit_distance(ref, hyp),
                        "words": len(ref),
                        "false_hits": sum(said(w, hyp) for w in unsaid),
                        "unsaid_labels": len(unsaid),
                        "decode_ms": decode_ms,
                    }
                )
            print(f"{noise_name} {snr:g} dB: {text}", file=sys.stderr, flush=True)
    finally:
        for rec in recognizers.values():
            rec.close()

    def figures(chosen: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "in_view_word_miss_rate": ratio(sum(r["missed"] for r in chosen), len(chosen)),
            "wer": ratio(sum(r["errors"] for r in chosen), sum(r["words"] for r in chosen)),
            "false_hit_rate": ratio(
                sum(r["false_hits"] for r in chosen), sum(r["unsaid_labels"] for r in chosen)
            ),
            "false_hits": sum(r["false_hits"] for r in chosen),
            "decode_ms": summary([r["decode_ms"] for r in chosen], 1),
            "questions": len(chosen),
        }

    by_run = {run: figures([r for r in rows if r["run"] == run]) for run in runs}
    base = by_run["none"]
    for fig in by_run.values():
        fig["ratio_vs_none"] = {
            key: ratio(fig[key], base[key])
            for key in ("in_view_word_miss_rate", "wer", "false_hit_rate")
        } | {"decode_ms_median": ratio(fig["decode_ms"]["median"], base["decode_ms"]["median"])}
    per_word = {
        run: {
            word: ratio(*_count([r["missed"] for r in rows if (r["run"], r["target"]) == key]))
            for word in TARGETS
            for key in [(run, word)]
        }
        for run in runs
    }
    result = {
        "recogniser": "whisper tiny.en, 2 threads, beam 5 (the fusion node's default)",
        "rooms": [f"{n} {s:g} dB" for n, s in rooms],
        "questions": len(questions),
        "by_run": by_run,
        "in_view_word_miss_rate_by_word": per_word,
        "by_room": {
            room_name: {
                run: figures([r for r in rows if r["run"] == run and r["room"] == room_name])
                for run in runs
            }
            for room_name in dict.fromkeys(r["room"] for r in rows)
        },
        "transcripts": [[r["run"], r["room"], r["text"], r["heard"]] for r in rows],
    }
    write_result(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
