#!/usr/bin/env python3
"""Write the committed speech sample test/data/samples/hello.wav.

The sample is synthesised, so anyone can regenerate it and nothing recorded
from a person is committed:

1. espeak-ng (Debian package ``espeak-ng``) speaks the text into a temporary
   WAV (22.05 kHz mono int16); it runs with an argument list, never a shell.
2. scipy's polyphase filter resamples it to 16 kHz, the rate the capture
   pipeline uses (22050 -> 16000 is the exact ratio 320/441).
3. 0.5 s of digital silence goes before and after, so voice-activity
   detection sees a clean onset and end of speech.
4. soundfile writes 16 kHz mono 16-bit PCM.

The output is deterministic for a given espeak-ng version (no random
dither, no timestamps in the file), so re-running it does not churn git.

Usage::

    python scripts/make_sample_audio.py [--out test/data/samples/hello.wav] [--text "..."]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import soundfile
from scipy.signal import resample_poly

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "test" / "data" / "samples" / "hello.wav"
DEFAULT_TEXT = "Hello robot. What is this red box?"
RATE = 16000
SILENCE_S = 0.5


def synthesise(text: str, voice: str = "en-us", words_per_minute: int = 150) -> np.ndarray:
    """Speak ``text`` with espeak-ng; return 16 kHz mono int16 samples."""
    espeak = shutil.which("espeak-ng")
    if espeak is None:
        raise SystemExit("espeak-ng is not installed: apt-get install espeak-ng")
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "espeak.wav"
        subprocess.run(
            [espeak, "-w", str(raw), "-v", voice, "-s", str(words_per_minute), text],
            check=True,
            timeout=60,
        )
        data, rate = soundfile.read(str(raw), dtype="float64", always_2d=True)
    mono = data.mean(axis=1)
    if rate != RATE:
        g = np.gcd(rate, RATE)
        mono = resample_poly(mono, RATE // g, rate // g)
    return np.clip(np.rint(mono * 32768.0), -32768, 32767).astype(np.int16)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="WAV file to write")
    parser.add_argument("--text", default=DEFAULT_TEXT, help="what the voice says")
    args = parser.parse_args(argv)

    speech = synthesise(args.text)
    silence = np.zeros(int(RATE * SILENCE_S), dtype=np.int16)
    samples = np.concatenate([silence, speech, silence])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    soundfile.write(str(args.out), samples, RATE, subtype="PCM_16")
    print(f"wrote {args.out}: {len(samples) / RATE:.2f} s, {RATE} Hz mono int16")
    return 0


if __name__ == "__main__":
    sys.exit(main())
