#!/usr/bin/env python3
"""Echo handling for full duplex: which stage keeps the robot's voice from barging in.

Method (prints one JSON object):

- Voices: espeak-ng (``espeak-ng -w``) speaks the robot's lines (``en-us``) and the user's
  (``en-gb-scotland``, a different voice, quieter or louder per case), resampled to 16 kHz.
- Rooms (``--rooms``, seeded): the microphone hears the played reference delayed by 20-200 ms
  (output buffering plus distance), attenuated (-3 to -12 dB), convolved with a synthetic room
  impulse response (direct path, a few early reflections, an exponentially decaying noise tail
  with RT60 0.15-0.45 s), plus white noise at -55 dBFS; with ``--noise-db N`` a noisy room
  instead: steady pink noise N dB below the echo, and the VAD gated by the noise floor as the
  fusion node's is (``vad.noise.*`` defaults).
- Cases per room: ``echo`` (the robot talks alone: every VAD start is a false barge-in),
  ``user`` (the user talks, nothing plays), ``double`` (the user starts talking 1.2 s into the
  robot's speech, at -6..+3 dB relative to the echo). Each case begins with ``--room-before-s``
  (2 s) of the room alone, as a robot's microphone hears it before the robot first speaks:
  the VAD's noise floor (``vad.noise.history_s``, 1.5 s) and the gate's comfort noise are
  learnt from it. With ``--room-before-s 0`` they meet the room and the robot's voice at once.
- Candidates: ``none`` (the microphone straight to the VAD); ``gate``
  (:class:`omniflow.core.echo.EchoGate` as the fusion node runs it, suppress score 0.7),
  ``gate-no-linear`` (the same without its linear canceller, which changes only what the
  recogniser hears: same VAD figures, its cost shown apart), ``gate-0.8`` and ``gate-0.9``
  (higher suppress scores) and ``gate-confirm2`` (two clear chunks in a row before any
  passes); ``speex`` (Speex MDF cancellation,
  :class:`omniflow.engines.aec.SpeexEchoCanceller`, 20 ms frames, 300 ms tail, no gate) and
  ``speex+gate`` (Speex with its removed-energy share as the gate, 0.5).
  Every candidate sees the same 40 ms chunks with stream-time stamps and feeds the fusion
  node's VAD (webrtc, ``min_speech_ms`` 60, ``min_silence_ms`` 400).
- Figures: false barge-ins (VAD starts in ``echo``), detection rate and onset delay (the end
  of the chunk whose processing confirmed the start minus the user's first voiced 10 ms) in
  ``user`` and ``double``, and the processing time per 40 ms chunk (echo stage only, median
  and p90 over every chunk with a reference).
- ``--hear``: also what the recogniser makes of the user's words, through the fusion node's
  whole audio path (:class:`~omniflow.core.fusion_pipeline.FusionPipeline` with its default
  settings: the gate, the VAD, the lead-in, Whisper tiny.en) in each room: ``user`` and
  ``double`` with the robot falling silent ``--stop-after-ms`` after the user's onset, as
  the speech node does on a barge-in (its echo's reverberant tail still in the room). Word
  error rate against the words spoken, and in how many rooms the first word, "stop", was
  heard; each with the node's ``echo.linear`` on (``linear``) and off (``no-linear``).
  With ``--spoken-before`` each case is heard after the robot's whole line in the
  same room (the gate's linear canceller learns the room from it, as on a robot that has
  talked before: the path from its speaker to its microphone does not change between turns).

Run from the repository root::

    .venv/bin/python benchmarks/echo.py --rooms 16 --json build/bench/echo.json
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import soundfile
from _common import median, summary, write_result

from omniflow.core.echo import EchoGate, EchoReference
from omniflow.core.fusion_events import TranscriptEvent
from omniflow.core.fusion_pipeline import PIPELINE_PARAMS, FusionConfig, FusionPipeline
from omniflow.core.params import defaults
from omniflow.core.resample import resample_int16
from omniflow.core.room_sounds import pink_noise
from omniflow.core.text import edit_distance, words
from omniflow.engines.aec import SpeexEchoCanceller
from omniflow.engines.fusion_engines import ENGINE_PARAMS, fusion_engines_from_params
from omniflow.engines.vad import NS_PER_SAMPLE, make_vad
from omniflow.errors import EngineError

RATE = 16_000
CHUNK = 640
PLAYED_BLOCK = 320  # the speech node's 20 ms blocks
T0_NS = 1_000_000_000_000  # stream time of the first sample
ROBOT_TEXT = (
    "The red box on the table is a parcel for the kitchen. I can carry it there "
    "after I finish charging, or you can take it yourself now."
)
USER_TEXT = "Stop, what is that blue thing?"
USER_START_S = 1.2  # into the robot's speech
MIN_SPEECH_MS = 60.0  # the fusion node's vad.min_speech_ms (--min-speech-ms)
NODE_DEFAULTS = defaults(ENGINE_PARAMS)  # the fusion node's engine parameters (vad.noise.*)


def speak(text: str, voice: str) -> np.ndarray:
    """espeak-ng's rendering of ``text`` as 16 kHz int16."""
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "say.wav"
        subprocess.run(["espeak-ng", "-v", voice, "-w", str(wav), text], check=True)
        data, rate = soundfile.read(wav, dtype="int16")
    return resample_int16(data, rate, RATE) if rate != RATE else data


def room_response(rng: np.random.Generator) -> tuple[np.ndarray, dict[str, float]]:
    """A synthetic impulse response: delay, direct path, early reflections, decaying tail."""
    delay_ms = float(rng.uniform(20, 200))
    gain_db = float(rng.uniform(-12, -3))
    rt60 = float(rng.uniform(0.15, 0.45))
    length = int(rt60 * RATE)
    t = np.arange(length) / RATE
    tail = rng.standard_normal(length) * 10 ** (-3 * t / rt60) * 0.08
    tail[: int(0.003 * RATE)] = 0.0
    for _ in range(4):  # early reflections 2-15 ms after the direct path
        tail[int(rng.uniform(0.002, 0.015) * RATE)] += rng.uniform(-0.5, 0.5)
    tail[0] = 1.0
    ir = np.concatenate([np.zeros(int(delay_ms * RATE / 1000)), tail])
    ir *= 10 ** (gain_db / 20) / np.sqrt(np.sum(tail**2))
    return ir, {
        "delay_ms": round(delay_ms, 1),
        "gain_db": round(gain_db, 1),
        "rt60_s": round(rt60, 2),
    }


def onset_s(x: np.ndarray) -> float:
    """First 10 ms frame within 35 dB of the loudest one."""
    frames = x[: len(x) // 160 * 160].astype(np.float64).reshape(-1, 160)
    power = (frames**2).mean(axis=1) + 1e-9
    return float(np.argmax(power > power.max() * 10**-3.5) * 160 / RATE)


def make_stage(name: str, reference: EchoReference):
    if name == "gate":
        return EchoGate(reference)
    if name == "gate-0.8":
        return EchoGate(reference, suppress_score=0.8)
    if name == "gate-0.9":
        return EchoGate(reference, suppress_score=0.9)
    if name == "gate-confirm2":
        return EchoGate(reference, confirm=2)
    if name == "gate-no-linear":
        return EchoGate(reference, linear=False)
    if name == "speex":
        return SpeexEchoCanceller(reference, suppress_score=2.0)
    if name == "speex+gate":
        return SpeexEchoCanceller(reference)
    return None


def played_blocks(played: np.ndarray | None, chunk: int) -> list[tuple[int, np.ndarray]]:
    """(stamp, samples) of the speech node's 20 ms blocks of ``played`` that go out while
    microphone chunk ``chunk`` is heard (silence is not published)."""
    if played is None:
        return []
    per_chunk = CHUNK // PLAYED_BLOCK
    blocks = []
    for j in range(chunk * per_chunk, (chunk + 1) * per_chunk):
        piece = played[j * PLAYED_BLOCK : (j + 1) * PLAYED_BLOCK]
        if len(piece) == PLAYED_BLOCK and np.any(piece):
            blocks.append((T0_NS + j * PLAYED_BLOCK * NS_PER_SAMPLE, piece))
    return blocks


def run_case(
    stage_name: str,
    mic: np.ndarray,
    played: np.ndarray | None,
    user_onset_s: float | None,
    min_speech_ms: float,
    noise_margin_db: float = 0.0,
) -> dict[str, Any]:
    """Feed ``mic`` through one candidate and the VAD; return starts and timings."""
    reference = EchoReference(history_ms=1500)
    stage = make_stage(stage_name, reference)
    vad = make_vad(
        "webrtc",
        min_silence_ms=400.0,
        min_speech_ms=min_speech_ms,
        noise_margin_db=noise_margin_db,
        noise_history_s=NODE_DEFAULTS["vad.noise.history_s"],
    )
    starts: list[float] = []  # seconds from the stream start at which a START is confirmed
    costs: list[int] = []
    for i in range(len(mic) // CHUNK):
        stamp = T0_NS + i * CHUNK * NS_PER_SAMPLE
        end = stamp + CHUNK * NS_PER_SAMPLE
        for block_stamp, piece in played_blocks(played, i):  # every block played by now
            reference.add(block_stamp, piece)
        chunk = mic[i * CHUNK : (i + 1) * CHUNK]
        if stage is not None:
            t0 = time.perf_counter_ns()
            result = stage.process(chunk, stamp)
            if played is not None and not np.isnan(result.echo_score):
                costs.append(time.perf_counter_ns() - t0)
            chunk = result.samples
        for event in vad.process(chunk, stamp):
            if event.kind == "start":
                starts.append((end - T0_NS) / 1e9)
    out: dict[str, Any] = {"starts": len(starts), "costs": costs}
    if user_onset_s is not None:
        after = [s - user_onset_s for s in starts if s >= user_onset_s - 0.05]
        out["detected"] = bool(after)
        out["delay_ms"] = round(after[0] * 1000, 1) if after else None
    return out


def hear(
    mic: np.ndarray,
    played: np.ndarray | None,
    before: tuple[np.ndarray, np.ndarray] | None,
    linear: bool,
) -> str:
    """The finals the fusion node's audio path makes of ``mic`` (the robot playing
    ``played``), joined; fresh engines each time, so no state crosses cases. ``before``:
    the microphone and the played audio of the same room heard first, in the same stream;
    ``linear``: the node's ``echo.linear``."""
    if before is not None:
        played = np.zeros(len(mic), np.int16) if played is None else played
        mic, played = np.concatenate([before[0], mic]), np.concatenate([before[1], played])
    params = {
        **defaults((*PIPELINE_PARAMS, *ENGINE_PARAMS)),
        "vision.rate_hz": 0.0,
        "echo.linear": linear,
    }
    pipeline = FusionPipeline(FusionConfig.from_params(params), fusion_engines_from_params(params))
    try:
        finals: list[str] = []
        chunks = len(mic) // CHUNK
        for i in range(chunks):
            stamp = T0_NS + i * CHUNK * NS_PER_SAMPLE
            for block_stamp, piece in played_blocks(played, i):
                pipeline.push_played(block_stamp, piece)
            end = stamp + CHUNK * NS_PER_SAMPLE
            events = pipeline.step(end, audio=[(stamp, mic[i * CHUNK : (i + 1) * CHUNK])])
            finals += [e.text for e in events if isinstance(e, TranscriptEvent) and e.final]
        deadline = time.monotonic() + 60.0
        while (pipeline.finals_due or pipeline.speaking) and time.monotonic() < deadline:
            end += CHUNK * NS_PER_SAMPLE  # silence after the session, at its pace in stream time
            events = pipeline.step(
                end, audio=[(end - CHUNK * NS_PER_SAMPLE, np.zeros(CHUNK, np.int16))]
            )
            finals += [e.text for e in events if isinstance(e, TranscriptEvent) and e.final]
            time.sleep(0.02)
    finally:
        pipeline.engines.close()  # a decode thread left running aborts the process at exit
    return " ".join(t for t in finals if t)


def hearing(heard: list[str]) -> dict[str, Any]:
    """Word error rate over every room, and the rooms whose transcript begins with "stop"."""
    said = words(USER_TEXT)
    errors = sum(edit_distance(said, words(text)) for text in heard)
    return {
        "word_error_rate": round(errors / (len(said) * len(heard)), 3),
        "stop_heard": f"{sum(1 for t in heard if words(t)[:1] == ['stop'])}/{len(heard)}",
        "transcripts": heard,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rooms", type=int, default=16, help="synthetic rooms (seeds)")
    parser.add_argument(
        "--min-speech-ms", type=float, default=MIN_SPEECH_MS, help="the VAD's vad.min_speech_ms"
    )
    parser.add_argument(
        "--hear", action="store_true", help="also recognise the user's words (Whisper tiny.en)"
    )
    parser.add_argument(
        "--stop-after-ms",
        type=float,
        default=300.0,
        help="with --hear: the robot falls silent this long after the user's onset",
    )
    parser.add_argument(
        "--noise-db",
        type=float,
        help="a noisy room: pink noise this many dB below the echo (and the VAD gated by the "
        "noise floor, as the fusion node's is) instead of white noise at -55 dBFS",
    )
    parser.add_argument(
        "--room-before-s",
        type=float,
        default=2.0,
        help="the room alone before the robot speaks (the VAD's noise floor and the gate's "
        "comfort noise learn it)",
    )
    parser.add_argument(
        "--spoken-before",
        action="store_true",
        help="with --hear: the robot has said its line once in the same room before each "
        "case (the echo canceller learns the room from it, as on a robot that has talked)",
    )
    parser.add_argument("--json", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    if args.room_before_s < 0:
        parser.error(f"--room-before-s must not be negative, got {args.room_before_s}")
    if args.spoken_before and not args.hear:
        parser.error("--spoken-before changes only what --hear hears: give --hear too")
    robot = speak(ROBOT_TEXT, "en-us")
    user = speak(USER_TEXT, "en-gb-scotland")
    user_on = onset_s(user)
    candidates = [
        "none",
        "gate",
        "gate-no-linear",
        "gate-0.8",
        "gate-0.9",
        "gate-confirm2",
        "speex",
        "speex+gate",
    ]
    try:
        SpeexEchoCanceller(EchoReference())
    except EngineError as err:
        print(f"speex skipped: {err}", file=sys.stderr)
        candidates = [c for c in candidates if not c.startswith("speex")]
    rows: dict[str, dict[str, list]] = {
        c: {
            "false_starts": [],
            "user_delay": [],
            "double_delay": [],
            "user_detected": [],
            "double_detected": [],
            "costs": [],
        }
        for c in candidates
    }
    rooms = []
    heard = {canceller: {"user": [], "double": []} for canceller in ("linear", "no-linear")}
    lead = int(args.room_before_s * RATE)
    lead_s = lead / RATE
    for seed in range(args.rooms):
        rng = np.random.default_rng(seed)
        ir, room = room_response(rng)
        length = lead + len(robot) + RATE
        played = np.zeros(length, np.int16)
        played[lead : lead + len(robot)] = robot
        echo = np.convolve(played.astype(np.float64), ir)[:length]
        # The quiet room before the robot speaks draws on a generator of its own, so that
        # each seed's room, user level and white noise after it are the same whatever its
        # length (a noisy room's pink noise is drawn whole, after the user level).
        white = rng.standard_normal(length - lead)
        white = np.concatenate([np.random.default_rng((seed, 1)).standard_normal(lead), white])
        noise = white * 32768 * 10 ** (-55 / 20)
        user_db = float(rng.uniform(-6, 3))
        echo_rms = np.sqrt(np.mean(echo[lead : lead + len(robot)] ** 2))
        if args.noise_db is not None:
            noise = pink_noise(length, rng) * echo_rms / 10 ** (args.noise_db / 20)
        user_rms = np.sqrt(np.mean(user[user > 0].astype(np.float64) ** 2))
        talk = np.zeros(length)
        lo = lead + int(USER_START_S * RATE)
        scaled = user.astype(np.float64) * echo_rms / user_rms * 10 ** (user_db / 20)
        talk[lo : lo + len(user)] = scaled[: length - lo]
        room.update(user_vs_echo_db=round(user_db, 1))
        rooms.append(room)

        def pcm(x: np.ndarray) -> np.ndarray:
            return np.clip(np.round(x), -32768, 32767).astype(np.int16)

        gate_db = 0.0 if args.noise_db is None else NODE_DEFAULTS["vad.noise.margin_db"]
        onset = lead_s + USER_START_S + user_on
        for name in candidates:
            row = rows[name]
            r = run_case(name, pcm(echo + noise), played, None, args.min_speech_ms, gate_db)
            row["false_starts"].append(r["starts"])
            row["costs"].extend(r["costs"])
            r = run_case(name, pcm(talk + noise), None, onset, args.min_speech_ms, gate_db)
            row["user_detected"].append(r["detected"])
            row["user_delay"].append(r["delay_ms"])
            r = run_case(name, pcm(echo + talk + noise), played, onset, args.min_speech_ms, gate_db)
            row["double_detected"].append(r["detected"])
            row["double_delay"].append(r["delay_ms"])
            row["costs"].extend(r["costs"])
        if args.hear:
            cut = played.copy()
            cut[int((onset + args.stop_after_ms / 1000) * RATE) :] = 0
            cut_echo = np.convolve(cut.astype(np.float64), ir)[:length]
            before = (pcm(echo + noise), played) if args.spoken_before else None
            for linear in (True, False):
                canceller = "linear" if linear else "no-linear"
                heard[canceller]["user"].append(hear(pcm(talk + noise), None, before, linear))
                heard[canceller]["double"].append(
                    hear(pcm(cut_echo + talk + noise), cut, before, linear)
                )

    candidates = {}
    for name, row in rows.items():
        cpu_ms = summary(row["costs"], 3, scale=1e-6, count=None)
        candidates[name] = {
            "false_barge_ins": int(sum(row["false_starts"])),
            "rooms_with_false_barge_in": int(sum(1 for s in row["false_starts"] if s)),
            "user_detected": f"{sum(row['user_detected'])}/{args.rooms}",
            "user_onset_delay_ms_median": median(row["user_delay"], 1),
            "double_talk_detected": f"{sum(row['double_detected'])}/{args.rooms}",
            "double_talk_onset_delay_ms_median": median(row["double_delay"], 1),
            "double_talk_detected_within_600_ms": (
                f"{sum(1 for d in row['double_delay'] if d is not None and d <= 600)}/{args.rooms}"
            ),
            "double_talk_onset_delays_ms": row["double_delay"],
            "cpu_ms_per_chunk_median": cpu_ms["median"],
            "cpu_ms_per_chunk_p90": cpu_ms["p90"],
        }
    result = {
        "room_before_s": lead_s,
        "robot_s": round(len(robot) / RATE, 2),
        "user_s": round(len(user) / RATE, 2),
        "rooms": rooms,
        "candidates": candidates,
    }
    if args.hear:
        result["hearing"] = {
            "said": USER_TEXT,
            "stop_after_ms": args.stop_after_ms,
            **{
                canceller: {case: hearing(texts) for case, texts in cases.items()}
                for canceller, cases in heard.items()
            },
        }
    write_result(result, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
