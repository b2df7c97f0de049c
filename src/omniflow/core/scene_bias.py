"""Words the scene offers the recogniser: what the camera sees and the names the robot knows.

"What is in the cup?" is easier to hear when a cup is in view. :class:`SceneBias` turns the
labels of the frames in view around an utterance's start (newest frame first, each frame's
labels most confident first) and the names the robot knows (``asr.bias.words``) into a
short, de-duplicated word list (:meth:`SceneBias.words`), and that list into the text the
recogniser is primed with (:func:`bias_prompt`): for Whisper, the decoder's previous-text
context (faster-whisper's ``hotwords``), which makes those words likelier without forcing
them; ``benchmarks/scene_bias.py`` measured it against ``initial_prompt`` and no bias.

Labels nobody says to a robot (``person``: someone is always in view when someone speaks)
are left out by ``skip``; a label with an underscore or digits never reaches the prompt
(labels are words). No ROS imports, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from omniflow.core.params import ParamSpec
from omniflow.core.timing import NS_PER_MS
from omniflow.errors import ConfigError

__all__ = ["BIAS_PARAMS", "MAX_PROMPT_CHARS", "SceneBias", "bias_prompt", "parse_words"]

#: Longest bias text handed to the recogniser: Whisper keeps at most 223 tokens of context,
#: and a long list dilutes each word (about 4 characters a token).
MAX_PROMPT_CHARS = 200

# A word or name the robot may be primed with: letters (any script), spaces, ' and -.
_WORD = re.compile(r"^[^\W\d_]+(?:[ '\-][^\W\d_]+)*$")

# The fusion node's parameters of the scene bias (SceneBias.from_params reads them).
BIAS_PARAMS = (
    ParamSpec(
        "asr.bias.enabled",
        False,
        "Prime the recogniser with the labels of the objects in view around each "
        "utterance's start and the names in asr.bias.words, so 'the cup' is heard when a "
        "cup is in view (Whisper: its hotwords context; Moonshine takes no prompt and "
        "pocketsphinx a grammar instead: both ignore it; benchmarks/scene_bias.py). Off by "
        "default: in babble Whisper tiny.en heard labels unsaid, and on a question cut off "
        "it wrote the primed words instead",
        read_only=True,
    ),
    ParamSpec(
        "asr.bias.words",
        "",
        "Names and words the robot always knows, comma-separated (e.g. 'Ada, kitchen'); "
        "letters, spaces, ' and - only",
        read_only=True,
    ),
    ParamSpec(
        "asr.bias.look_back_ms",
        1000,
        "Frames encoded from this long before an utterance's start to window.after_ms "
        "after it give their labels (the newest frame first)",
        unit="ms",
        minimum=0,
        maximum=10000,
        read_only=True,
    ),
    ParamSpec(
        "asr.bias.max_words",
        8,
        "At most this many words prime one utterance (the newest frame's labels first, "
        "then older frames', then asr.bias.words)",
        minimum=1,
        maximum=32,
        read_only=True,
    ),
    ParamSpec(
        "asr.bias.skip_labels",
        "person",
        "Labels never used to prime the recogniser, comma-separated (a person is in view "
        "whenever someone speaks)",
        read_only=True,
    ),
)


def parse_words(text: str, what: str) -> tuple[str, ...]:
    """The comma-separated words of ``text`` (trimmed, inner spaces collapsed, empty items
    dropped). Raises ConfigError naming ``what`` and the first item that is not a word."""
    items = [" ".join(item.split()) for item in str(text).split(",")]
    for item in items:
        if item and not _WORD.match(item):
            raise ConfigError(
                f"{what}: {item!r} is not a word or name (letters, spaces, ' and - only); "
                "separate words with commas, e.g. 'Ada, kitchen'"
            )
    return tuple(item for item in items if item)


@dataclass(frozen=True)
class SceneBias:
    """Which words prime the recogniser for one utterance.

    ``names``: words always offered (after the scene's); ``skip``: labels never offered;
    ``look_back_ns``: frames this far before the start count; ``max_words``: the cap.
    """

    names: tuple[str, ...] = ()
    skip: tuple[str, ...] = ("person",)
    look_back_ns: int = 1000 * NS_PER_MS
    max_words: int = 8

    def __post_init__(self) -> None:
        if self.max_words < 1 or self.look_back_ns < 0:
            raise ConfigError(
                f"max_words ({self.max_words}) must be >= 1 and look_back_ns "
                f"({self.look_back_ns}) >= 0"
            )

    @classmethod
    def from_params(cls, params: Mapping[str, object]) -> SceneBias | None:
        """From the fusion node's ``asr.bias.*`` values; None when ``asr.bias.enabled`` is
        false. Raises ConfigError for a word list with something that is not a word (also
        when off: a typo is named before anyone turns it on)."""
        bias = cls(
            names=parse_words(params["asr.bias.words"], "asr.bias.words"),
            skip=parse_words(params["asr.bias.skip_labels"], "asr.bias.skip_labels"),
            look_back_ns=int(params["asr.bias.look_back_ms"]) * NS_PER_MS,
            max_words=int(params["asr.bias.max_words"]),
        )
        return bias if params["asr.bias.enabled"] else None

    def words(self, frames: Iterable[Sequence[str]]) -> tuple[str, ...]:
        """The words for one utterance: ``frames`` holds each frame's labels (newest frame
        first, most confident label first); then the names. Each word once (case aside),
        skipped labels and non-words left out, at most ``max_words``."""
        skip = {s.casefold() for s in self.skip}
        seen: set[str] = set()
        out: list[str] = []
        labels = [label for frame in frames for label in frame if label.casefold() not in skip]
        for word in (*labels, *self.names):
            word = " ".join(str(word).split())
            key = word.casefold()
            if key in seen or not _WORD.match(word):
                continue
            seen.add(key)
            out.append(word)
            if len(out) == self.max_words:
                break
        return tuple(out)


def bias_prompt(words: Sequence[str], max_chars: int = MAX_PROMPT_CHARS) -> str | None:
    """The text that primes the recogniser with ``words``: the words comma-separated, as
    many whole words as fit in ``max_chars``; None with none (no bias at all)."""
    text = ""
    for word in words:
        longer = f"{text}, {word}" if text else word
        if len(longer) > max_chars:
            break
        text = longer
    return text or None
