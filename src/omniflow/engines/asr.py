"""Streaming speech recognition: decode while the user speaks, finish with only the tail left.

A :class:`Recognizer` is driven by the VAD: :meth:`~Recognizer.start` at the speech start
event (with its stream-time stamp), :meth:`~Recognizer.feed` with every chunk while speech
lasts, :meth:`~Recognizer.finish` at the end event. ``feed`` decodes as it goes and returns a
new partial hypothesis whenever it changed, so the transcript is published during the
utterance and ``finish`` only has the last chunks to decode: no waiting at the end.

:class:`PocketsphinxRecognizer` uses pocketsphinx 5 and the US English acoustic model,
dictionary and language model that ship inside its wheel (nothing is downloaded). Open
vocabulary with that language model is weak; with a JSGF grammar of the robot's commands it
is exact and very cheap (real-time factor about 0.01-0.02 here), which is what a command
set needs. Word times come from the decoder's segmentation (10 ms frames) and are returned
in the stream time given to :meth:`~Recognizer.start`.

Library errors are translated into :class:`~omniflow.errors.EngineError`.
"""

from __future__ import annotations

import abc
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from omniflow.engines.vad import NS_PER_SAMPLE, SAMPLE_RATE, check_pcm16k
from omniflow.errors import ConfigError, EngineError

__all__ = [
    "PocketsphinxRecognizer",
    "RecognitionResult",
    "Recognizer",
    "Word",
]

#: A recognised word with its start and end in stream time (ns).
Word = tuple[str, int, int]

# Pronunciation variants ("the(2)") and fillers ("<sil>", "[NOISE]") in pocketsphinx output.
_VARIANT = re.compile(r"\(\d+\)$")


@dataclass(frozen=True)
class RecognitionResult:
    """The final hypothesis of one utterance.

    ``confidence`` is the engine's posterior probability in [0, 1], NaN when it gives none;
    ``words`` has the stream-time segment of each word where the engine provides them.
    """

    text: str
    confidence: float = math.nan
    words: list[Word] = field(default_factory=list)


class Recognizer(abc.ABC):
    """One utterance at a time: ``start`` -> ``feed``... -> ``finish``. Not thread-safe."""

    @abc.abstractmethod
    def start(self, stamp_ns: int) -> None:
        """Begin an utterance whose first fed sample was captured at ``stamp_ns``."""

    @abc.abstractmethod
    def feed(self, samples: np.ndarray) -> str | None:
        """Decode 16 kHz int16 mono samples; return the partial text if it changed, else None."""

    @abc.abstractmethod
    def finish(self) -> RecognitionResult:
        """End the utterance and return its final hypothesis."""

    @property
    @abc.abstractmethod
    def active(self) -> bool:
        """True between :meth:`start` and :meth:`finish`."""


def _load_pocketsphinx() -> Any:
    try:
        import pocketsphinx
    except ImportError as err:
        raise EngineError(
            "the pocketsphinx recognizer needs the pocketsphinx package: pip install "
            "pocketsphinx (listed in requirements/runtime.txt)") from err
    return pocketsphinx


class PocketsphinxRecognizer(Recognizer):
    """pocketsphinx 5 with its bundled US English model; a JSGF grammar for command sets.

    ``grammar_path`` (a .jsgf file) or ``grammar`` (its text) restricts recognition to the
    grammar's sentences; with neither, the bundled trigram language model decodes open
    speech. ``model_dir``/``dictionary`` override the bundled acoustic model and dictionary.
    ``second_pass=False`` skips the language model's flat-lexicon and best-path passes at
    the end of an utterance: ``finish()`` then takes ~4 ms instead of ~75 ms on open speech,
    for a somewhat worse transcript (no effect with a grammar). Loading takes about 0.2 s:
    build one recognizer per stream and reuse it. The acoustic normalisation adapts across
    utterances, so the same audio decoded twice may give different open-vocabulary text.
    """

    def __init__(self, grammar_path: str | Path | None = None, *, grammar: str | None = None,
                 model_dir: str | Path | None = None, dictionary: str | Path | None = None,
                 second_pass: bool = True) -> None:
        if grammar_path is not None and grammar is not None:
            raise ConfigError("give grammar_path or grammar, not both")
        ps = _load_pocketsphinx()
        kwargs: dict[str, Any] = {"loglevel": "FATAL", "samprate": SAMPLE_RATE}
        if not second_pass:
            kwargs.update(fwdflat=False, bestpath=False)
        if model_dir is not None:
            kwargs["hmm"] = str(model_dir)
        if dictionary is not None:
            kwargs["dict"] = str(dictionary)
        try:
            self._decoder = ps.Decoder(**kwargs)
        except (RuntimeError, ValueError) as err:
            raise EngineError(f"cannot load the pocketsphinx model: {err}") from err
        if grammar_path is not None:
            path = Path(grammar_path)
            if not path.is_file():
                raise ConfigError(f"JSGF grammar file not found: {path}")
            grammar = path.read_text(encoding="utf-8")
        if grammar is not None:
            try:
                self._decoder.add_jsgf_string("grammar", grammar)
                self._decoder.activate_search("grammar")
            except (RuntimeError, ValueError) as err:
                raise ConfigError(f"invalid JSGF grammar (or a word not in the "
                                  f"dictionary): {err}") from err
        self._frame_ns = 1_000_000_000 // int(self._decoder.config["frate"])
        self._start_ns = 0
        self._active = False
        self._partial = ""
        self._fed = 0

    @property
    def active(self) -> bool:
        """True between :meth:`start` and :meth:`finish`."""
        return self._active

    def start(self, stamp_ns: int) -> None:
        """Begin an utterance; an utterance still open is abandoned (its result dropped)."""
        if self._active:
            self._end_utt()
        self._start_ns = int(stamp_ns)
        self._partial = ""
        self._fed = 0
        try:
            self._decoder.start_utt()
        except RuntimeError as err:
            raise EngineError(f"pocketsphinx could not start an utterance: {err}") from err
        self._active = True

    def feed(self, samples: np.ndarray) -> str | None:
        """Decode ``samples`` now; return the new partial text when it changed, else None.

        Raises AudioFormatError for samples that are not 16 kHz mono int16 (the utterance
        stays open), EngineError if called outside an utterance or if decoding fails.
        """
        chunk = check_pcm16k(samples)
        if not self._active:
            raise EngineError("feed() outside an utterance: call start() first")
        try:
            self._decoder.process_raw(np.ascontiguousarray(chunk).tobytes(), False, False)
        except RuntimeError as err:
            raise EngineError(f"pocketsphinx failed to decode: {err}") from err
        self._fed += len(chunk)
        hyp = self._decoder.hyp()
        text = hyp.hypstr if hyp is not None else ""
        if text == self._partial:
            return None
        self._partial = text
        return text

    def finish(self) -> RecognitionResult:
        """Decode the tail and return text, posterior confidence and word times."""
        if not self._active:
            raise EngineError("finish() outside an utterance: call start() first")
        self._end_utt()
        hyp = self._decoder.hyp()
        if hyp is None or not hyp.hypstr:
            return RecognitionResult("", math.nan, [])
        confidence = float(hyp.prob)
        if not 0.0 <= confidence <= 1.0:
            confidence = math.nan
        words: list[Word] = []
        for seg in self._decoder.seg():
            word = seg.word
            if word.startswith(("<", "[")):  # <s>, </s>, <sil>, [NOISE]: not words
                continue
            words.append((_VARIANT.sub("", word),
                          self._start_ns + seg.start_frame * self._frame_ns,
                          self._start_ns + (seg.end_frame + 1) * self._frame_ns))
        return RecognitionResult(hyp.hypstr, confidence, words)

    @property
    def fed_ns(self) -> int:
        """Duration of audio fed into the current (or last) utterance."""
        return self._fed * NS_PER_SAMPLE

    def _end_utt(self) -> None:
        self._active = False
        try:
            self._decoder.end_utt()
        except RuntimeError as err:
            raise EngineError(f"pocketsphinx failed to end the utterance: {err}") from err
