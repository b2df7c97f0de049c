#!/usr/bin/env python3
"""Asking again when unsure: how often the dialogue's ``clarify.*`` policy asks the user to
repeat a final heard word for word, and how often it catches a garbled one.

Method (prints one JSON object):

- Speech: ``benchmarks/asr.py``'s open sentences and all its commands, and the bundled
  session's questions, each in one of ``benchmarks/hearing.py``'s espeak-ng voices (by
  turns), and in the piper voice too where it is installed (``requirements/piper.txt``).
- Rooms: ``hearing.py``'s (fan, motor and babble; near and far; 16 kHz and the telephone
  band), at 30, 20, 10 and 5 dB SNR, each sentence in a stretch of the noise of its own.
- Recognisers: ``--models`` (default tiny.en; also base, moonshine, and pocketsphinx with
  its open vocabulary), as the fusion node runs them, told the source's band; each sentence
  streamed as fast as the recogniser takes it (asr.py's ``stream``); the final's text and
  confidence (``Transcript.confidence``) are kept.
- Per model, for each ``--below`` and ``--min-words`` pair (the dialogue's
  :class:`~omniflow.core.clarify.ClarifyPolicy`): finals heard word for word that would be
  asked again (``exact_asked`` of ``exact``); finals with half their words or more wrong that
  would be (``garbled_asked`` of ``garbled``); and the word error rate of the finals
  answered against that of all (``wer_answered``, ``wer_all``), over all rooms and at 16 kHz,
  10 dB. A stop request ("stop") never reaches the policy and is left out.

A benchmark prints figures; it does not fail. Run from the repository root (about 8 minutes
for tiny.en on the 2-core machine with the piper voice)::

    .venv/bin/python benchmarks/clarify.py --json build/bench/clarify.json
    .venv/bin/python benchmarks/clarify.py --models moonshine
    .venv/bin/python benchmarks/clarify.py --models pocketsphinx --below 0.45 --min-words 3
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
from pathlib import Path
from typing import Any

from _common import ratio, write_result
from asr import COMMANDS, OPEN, RATE, stream
from hearing import (
    LEAD_S,
    VOICES,
    WARM_S,
    distinct_values,
    make_noises,
    piper_voice,
    recognizer,
    room,
    synthesise,
)

from omniflow.core.clarify import CLARIFY_PARAMS, ClarifyPolicy
from omniflow.core.dialogue import DIALOGUE_PARAMS, StopPhrases
from omniflow.core.params import defaults
from omniflow.core.text import edit_distance, words
from omniflow.engines.asr import StreamingRecognizer, make_recognizer

SENTENCES = (*OPEN, *COMMANDS, "what is this", "what is that animal")
SNRS_DB = (30.0, 20.0, 10.0, 5.0)
TAIL_MS = 400  # the noise after the speech, as hearing.py's default --tail-ms


def heard_finals(model: str) -> list[dict[str, Any]]:
    """Every sentence in every room, heard by ``model``: reference, text, confidence."""
    say_piper, missing = piper_voice()
    if say_piper is None:
        print(f"piper voice left out: {missing}", file=sys.stderr)
    speech = []
    for i, text in enumerate(SENTENCES):
        said = synthesise(text, voice=VOICES[i % len(VOICES)], words_per_minute=150)
        speech.append(("espeak", i, text, said))
        if say_piper is not None:
            speech.append(("piper", i, text, say_piper(text)))
    around = round((WARM_S + LEAD_S + 0.6) * RATE) + TAIL_MS * RATE // 1000
    noises = make_noises(max(len(s) for *_, s in speech) + around, seed=7)
    rec = make_recognizer("pocketsphinx") if model == "pocketsphinx" else recognizer(model)
    finals = []
    try:
        for rate, (noise_name, noise), snr, far in itertools.product(
            (16_000, 8000), noises.items(), SNRS_DB, (False, True)
        ):
            rec.set_band_limited(rate < RATE)
            for family, i, text, samples in speech:
                span = len(samples) + around
                offset = (i * 7919 + int(snr) * 131) % (len(noise) - span + 1)
                mix, _ = room(samples, noise[offset : offset + span], snr, far, rate, i)
                out = stream(rec, mix[round(WARM_S * RATE) :], realtime=False)
                finals.append(
                    {
                        "rate_hz": rate,
                        "noise": noise_name,
                        "snr_db": snr,
                        "distance": "far" if far else "near",
                        "voice": family,
                        "said": text,
                        "heard": out["text"],
                        "confidence": None if math.isnan(conf := out["confidence"]) else conf,
                        "errors": edit_distance(words(text), words(out["text"])),
                        "words": len(words(text)),
                    }
                )
            where = f"{rate} Hz {noise_name} {snr:g} dB {'far' if far else 'near'}"
            print(f"{model} {where}: heard", file=sys.stderr, flush=True)
    finally:
        if isinstance(rec, StreamingRecognizer):  # a worker thread of its own
            rec.close()
    return finals


def scored(finals: list[dict[str, Any]], policy: ClarifyPolicy) -> dict[str, Any]:
    """What ``policy`` does to ``finals``: see the module."""

    def asked(f: dict[str, Any]) -> bool:
        return f["confidence"] is not None and policy.asks(f["heard"], f["confidence"])

    def wer(chosen: list[dict[str, Any]]) -> float | None:
        return ratio(sum(f["errors"] for f in chosen), sum(f["words"] for f in chosen))

    exact = [f for f in finals if f["errors"] == 0]
    garbled = [f for f in finals if 2 * f["errors"] >= f["words"]]
    loud = [f for f in finals if (f["rate_hz"], f["snr_db"]) == (16_000, 10.0)]
    return {
        "below": policy.below,
        "min_words": policy.min_words,
        "exact": len(exact),
        "exact_asked": sum(map(asked, exact)),
        "garbled": len(garbled),
        "garbled_asked": sum(map(asked, garbled)),
        "wer_all": wer(finals),
        "wer_answered": wer([f for f in finals if not asked(f)]),
        "16 kHz, 10 dB": {
            "finals": len(loud),
            "asked": sum(map(asked, loud)),
            "wer_all": wer(loud),
            "wer_answered": wer([f for f in loud if not asked(f)]),
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--models",
        default="tiny.en",
        help="comma-separated: tiny.en, base, moonshine, pocketsphinx",
    )
    parser.add_argument("--below", default="0.35,0.4,0.45,0.5", help="clarify.below values")
    parser.add_argument("--min-words", default="1,2,3", help="clarify.min_words values")
    parser.add_argument(
        "--json", type=Path, help="also write the figures, and every final heard, to this file"
    )
    args = parser.parse_args(argv)
    models = args.models.split(",")
    if not models or set(models) - {"tiny.en", "base", "moonshine", "pocketsphinx"}:
        parser.error(f"--models takes tiny.en, base, moonshine, pocketsphinx: {args.models}")
    belows = distinct_values(
        parser, "--below", args.below, float, lambda b: 0 <= b <= 1, "values within 0..1"
    )
    least = distinct_values(
        parser, "--min-words", args.min_words, int, lambda n: n >= 1, "whole numbers >= 1"
    )
    node = defaults(CLARIFY_PARAMS)
    dialogue = defaults(DIALOGUE_PARAMS)
    stop = StopPhrases.parse(dialogue["stop.words"], dialogue["stop.fillers"])
    result: dict[str, Any] = {
        "sentences": len(SENTENCES),
        "snr_db": list(SNRS_DB),
        "default": {"below": node["clarify.below"], "min_words": node["clarify.min_words"]},
        "models": {},
    }
    for model in models:
        finals = [f for f in heard_finals(model) if not stop.split(f["heard"])[0]]
        result["models"][model] = {
            "finals": len(finals),
            "policies": [
                scored(finals, ClarifyPolicy(below, n, node["clarify.reply"]))
                for below, n in itertools.product(belows, least)
            ],
        }
        if args.json is not None:
            result["models"][model]["heard"] = finals
    write_result(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
