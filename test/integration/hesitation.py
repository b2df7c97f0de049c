"""The hesitation set: spoken sentences with pauses inside them, made at test time with
espeak-ng (several voices), and finished questions without any.

An unfinished sentence is said in parts ("I would like the" ... "red cup please.") with a
500-800 ms silence between them, the kind of pause people make to find a word; a turn-taking
policy that cuts the user off answers inside it. Each :class:`Clip` knows, in samples at
16 kHz, where its speech runs are, so a test can tell whether an answer started inside a
pause or after the last word.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import soundfile

from omniflow.core.resample import resample_int16

RATE = 16_000
LEAD_S = 0.3  # silence before the first word and after the last
# Parts of the sentence, each said in one breath; a pause of the given ms between parts.
# Whisper tiny.en, given each first part alone, hears it unfinished ("I want to go to...",
# "Please give me", "I would like."): what is tested is the wait the policy gives to words
# heard as unfinished. Fragments it closes as sentences were dropped from the set, since
# the robot rightly answers the words it heard: "What is the colour of" as "What is the color
# on?", "Could you bring me" as "Don't you bring me?", "Please put the ... bottle on" as
# "Please vote on that. I'll go on." (in every voice, run by run).
HESITATIONS = (
    ("en-us", ("I would like the", "red cup please."), (700,)),
    ("en-gb", ("Please give me", "the green bottle."), (600,)),
    ("en-us+f3", ("I want to go to", "the kitchen now."), (800,)),
    ("en-gb-x-rp", ("I would like to", "have the red cup."), (500,)),
)
FINISHED = (
    ("en-us", "What is this?"),
    ("en-gb", "Where is my phone?"),
    ("en-us+f3", "Can you help me?"),
)


@dataclass(frozen=True)
class Clip:
    """16 kHz int16 audio and the ``(start, end)`` sample ranges of its speech runs."""

    voice: str
    parts: tuple[str, ...]
    samples: np.ndarray
    runs: tuple[tuple[int, int], ...]

    @property
    def text(self) -> str:
        return " ".join(self.parts)

    @property
    def pauses(self) -> tuple[tuple[int, int], ...]:
        """The silences between speech runs, as sample ranges."""
        return tuple((a[1], b[0]) for a, b in zip(self.runs, self.runs[1:], strict=False))

    @property
    def speech_end(self) -> int:
        """The sample after the last word."""
        return self.runs[-1][1]


def _speak(text: str, voice: str, out: Path) -> np.ndarray:
    """``text`` in ``voice`` at 16 kHz, silence trimmed off both ends."""
    exe = shutil.which("espeak-ng")
    if exe is None:
        pytest.skip("espeak-ng is not installed")
    subprocess.run([exe, "-w", str(out), "-v", voice, "-s", "150", text], check=True, timeout=30)
    data, rate = soundfile.read(str(out), dtype="int16")
    speech = resample_int16(data, rate, RATE)
    voiced = np.flatnonzero(np.abs(speech.astype(np.int32)) > 300)
    return speech[voiced[0] : voiced[-1] + 1]


def make_clip(voice: str, parts: tuple[str, ...], pauses_ms: tuple[int, ...], tmp: Path) -> Clip:
    """The parts said one after another in ``voice`` with these silences between them."""
    lead = np.zeros(int(LEAD_S * RATE), dtype=np.int16)
    pieces, runs, at = [lead], [], len(lead)
    for i, part in enumerate(parts):
        speech = _speak(part, voice, tmp / f"{voice}-{i}.wav")
        pieces.append(speech)
        runs.append((at, at + len(speech)))
        at += len(speech)
        if i < len(pauses_ms):
            gap = np.zeros(pauses_ms[i] * RATE // 1000, dtype=np.int16)
            pieces.append(gap)
            at += len(gap)
    pieces.append(lead)
    return Clip(voice, parts, np.concatenate(pieces), tuple(runs))


def hesitation_set(tmp: Path) -> tuple[list[Clip], list[Clip]]:
    """(sentences with pauses inside them, finished questions)."""
    unfinished = [make_clip(v, parts, pauses, tmp) for v, parts, pauses in HESITATIONS]
    finished = [make_clip(v, (text,), (), tmp) for v, text in FINISHED]
    return unfinished, finished
