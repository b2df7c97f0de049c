"""Cut a stream of response text (LLM token deltas) into phrases for text-to-speech.

A robot that waits for the whole answer sounds slow; one that speaks every token on its
own sounds broken. :class:`PhraseChunker` releases the *first* phrase of a turn as early
as is still natural (a sentence end, a comma once there are a couple of words, a word
count, or a time budget from the first token) and afterwards keeps natural phrasing
(sentences, long clauses, a hard word cap).

Rules, all of which cut only *between* complete words, so no word is ever lost (and only
the first rule's exception can split one):

- A word is complete once whitespace follows it (or the turn ended): tokens arrive
  mid-word ("hel" + "lo"), and "3." + "5" must stay "3.5". One exception saves the first
  phrase a token (``first_at_mark``): a word of letters that ends the first phrase with a
  sentence mark ("cup.", "Yes!") is complete at once. After a line's last word the model's
  next token is the line break that ends the answer, 30-55 ms later (the embedded model
  in the bundled session's replays here).
  Closing quotes, brackets and further sentence marks glued to it afterwards (``"``,
  ``)``, ``..``) are dropped: they would not be heard. A name with a dot inside
  ("example.com") cut by the tokens right after the dot is spoken as two phrases.
- A sentence end (``. ! ? …``, optionally followed by closing quotes or brackets) or a
  line break after a word ends a phrase. Not a sentence end: common abbreviations
  ("e.g.", "Dr.", "etc."), letter-dot abbreviations ("U.S.", "a.m."), single initials
  ("J."), and a number opening a phrase ("1." in a numbered list).
- CJK text has no spaces: its full-width sentence and clause marks (``。！？，；：、``)
  end a word by themselves, once the next non-closing character shows where they end.
- First phrase: a sentence end at once; a clause mark (``, ; : —``) after
  ``first_min_words``; the words before a clause opener ("and", "but", "that", "which",
  "because", ...) once they are ``first_clause_words`` long ("It is a red cup | that holds
  coffee"); otherwise ``first_max_words`` words; or, when ``first_max_wait_s`` has passed
  since the first token, whatever complete words there are.
- Later phrases: a sentence end; a clause mark after ``min_words``; ``max_words`` words.

Pure Python, no ROS: times are plain seconds (any monotonic clock) passed in by the caller.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from omniflow.errors import ConfigError

__all__ = ["PHRASE_REASONS", "Phrase", "PhraseChunker"]

#: Why a phrase was released; the values of :attr:`Phrase.reason`.
PHRASE_REASONS: tuple[str, ...] = (
    "sentence",
    "clause",
    "clause_opener",
    "first_words",
    "time_budget",
    "max_words",
    "end",
)

_SENTENCE_MARKS = frozenset(".!?…‽")
_CLAUSE_MARKS = frozenset(",;:—–")
_DASH_WORDS = frozenset({"-", "--"})
# Words that open a new clause: the first phrase may end before one (a natural place to
# breathe), so the robot starts speaking before the first sentence is complete.
_CLAUSE_OPENERS = frozenset(
    {
        "and",
        "but",
        "or",
        "so",
        "because",
        "since",
        "although",
        "though",
        "while",
        "when",
        "where",
        "which",
        "who",
        "whose",
        "that",
        "if",
        "unless",
        "until",
        "then",
    }
)
# Full-width CJK marks: they end a word without whitespace after them.
_CJK_SENTENCE_MARKS = frozenset("。！？｡．")
_CJK_CLAUSE_MARKS = frozenset("，；：、､")
_CJK_MARKS = _CJK_SENTENCE_MARKS | _CJK_CLAUSE_MARKS
# Characters that may trail a mark and still belong to it: 'He said "Stop!" and left'.
_CLOSERS = "\"')]}»”’」』）】》〉〕］｝"
_OPENERS = "\"'([{«“‘「『（【《〈〔［｛"
# What may follow a sentence mark inside its word: dropped after a first phrase released at
# the mark (see the module docstring).
_GLUED = "".join(sorted(_SENTENCE_MARKS)) + _CLOSERS

_ABBREVIATIONS = frozenset(
    {
        "e.g.",
        "i.e.",
        "etc.",
        "vs.",
        "cf.",
        "approx.",
        "ca.",
        "fig.",
        "mr.",
        "mrs.",
        "ms.",
        "dr.",
        "prof.",
        "st.",
        "jr.",
        "sr.",
        "mt.",
        "ft.",
        "lt.",
        "col.",
        "gen.",
        "sgt.",
        "capt.",
        "inc.",
        "ltd.",
        "co.",
        "corp.",
        "dept.",
        "univ.",
        "jan.",
        "feb.",
        "mar.",
        "apr.",
        "jun.",
        "jul.",
        "aug.",
        "sep.",
        "sept.",
        "oct.",
        "nov.",
        "dec.",
        "vol.",
        "pp.",
        "nr.",
    }
)  # not "no.": "No." is a whole answer far more often than "No. 5"
_LETTER_DOTS = re.compile(r"(?:[^\W\d_]\.){2,}")  # e.g. U.S. a.m. i.e.
_INITIAL = re.compile(r"[^\W\d_]\.")  # J. (in "J. R. R. Tolkien")
_LIST_NUMBER = re.compile(r"\d{1,3}\.")  # "1." opening a numbered-list item

_CJK = re.escape("".join(sorted(_CJK_MARKS)))
_CLOSE = re.escape(_CLOSERS)
# A word: non-space characters, ending at whitespace or right after a cluster of CJK marks
# (and the closers that follow it).
_WORD = re.compile(rf"[^\s{_CJK}]+(?:[{_CJK}][{_CJK}{_CLOSE}]*)?|[{_CJK}][{_CJK}{_CLOSE}]*")


@dataclass(frozen=True, slots=True)
class Phrase:
    """One phrase to speak.

    Attributes:
        text: The phrase, whitespace-normalised (runs of whitespace become one space) and
            stripped; never empty.
        index: 0-based position of the phrase within the turn.
        reason: Which rule released it, one of :data:`PHRASE_REASONS`.
    """

    text: str
    index: int
    reason: str


@dataclass(frozen=True, slots=True)
class _Word:
    text: str
    end: int  # offset just after the word in the buffer
    complete: bool
    line_break: bool  # the whitespace after it (so far) contains a line break


class PhraseChunker:
    """Turns response-text deltas into phrases: the first one early, the rest natural.

    Not thread-safe: one owner feeds it (the speech node's worker). A turn runs from the
    first :meth:`feed` until :meth:`finish` or :meth:`reset`; phrase indices restart at 0
    with every turn.
    """

    def __init__(
        self,
        first_min_words: int = 2,
        first_max_words: int = 6,
        first_max_wait_s: float = 0.35,
        min_words: int = 4,
        max_words: int = 25,
        first_clause_words: int = 3,
        first_at_mark: bool = True,
    ) -> None:
        """Validate and store the rules.

        Args:
            first_min_words: The first phrase may end at a clause mark (``, ; : —``) once it
                has this many words.
            first_max_words: The first phrase ends after this many words even without
                punctuation.
            first_clause_words: The first phrase may end before a clause opener ("and",
                "that", ...) once it has this many words; set it to ``first_max_words`` or
                more to end the first phrase only at marks and the word cap.
            first_at_mark: The first phrase goes as soon as a word of letters ends it with
                a sentence mark ("cup."), without waiting for the whitespace after it.
            first_max_wait_s: Seconds from the turn's first token after which the first
                phrase is released with whatever complete words there are (>= 1); ``inf``
                disables the budget.
            min_words: Later phrases end at a clause mark only once this long.
            max_words: Hard cap on any phrase, in words.

        Raises:
            ConfigError: a value is out of range or the limits contradict each other.
        """
        for name, value in (
            ("first_min_words", first_min_words),
            ("first_max_words", first_max_words),
            ("min_words", min_words),
            ("max_words", max_words),
            ("first_clause_words", first_clause_words),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
        if not isinstance(first_at_mark, bool):
            raise ConfigError(f"first_at_mark must be true or false, got {first_at_mark!r}")
        if first_max_words < first_min_words:
            raise ConfigError(
                f"first_max_words ({first_max_words}) must be >= "
                f"first_min_words ({first_min_words})"
            )
        if max_words < max(min_words, first_max_words):
            raise ConfigError(
                f"max_words ({max_words}) must be >= min_words ({min_words}) "
                f"and >= first_max_words ({first_max_words})"
            )
        if (
            isinstance(first_max_wait_s, bool)
            or not isinstance(first_max_wait_s, int | float)
            or math.isnan(first_max_wait_s)
            or first_max_wait_s < 0
        ):
            raise ConfigError(
                f"first_max_wait_s must be a number of seconds >= 0 (inf disables it), "
                f"got {first_max_wait_s!r}"
            )
        self.first_min_words = first_min_words
        self.first_max_words = first_max_words
        self.first_clause_words = first_clause_words
        self.first_at_mark = first_at_mark
        self.first_max_wait_s = float(first_max_wait_s)
        self.min_words = min_words
        self.max_words = max_words
        self._buffer = ""
        self._index = 0
        self._first_token_s: float | None = None
        self._glued = False  # the first phrase went out at a mark the next token may extend

    @property
    def phrases_released(self) -> int:
        """Phrases released so far in this turn (the index the next one gets)."""
        return self._index

    @property
    def pending_text(self) -> str:
        """Text received but not yet released, whitespace-normalised."""
        return " ".join(self._buffer.split())

    def feed(self, delta: str, now_s: float) -> list[Phrase]:
        """Add a text delta received at ``now_s`` and return the phrases it completes.

        Args:
            delta: The next piece of response text, cut anywhere (even mid-word).
            now_s: Current time in seconds on the caller's monotonic clock; the first
                delta with text starts the first phrase's time budget.
        """
        if self._first_token_s is None and delta.strip():
            self._first_token_s = now_s
        self._buffer += delta
        if self._glued:
            rest = self._buffer.lstrip(_GLUED)
            self._glued = not rest  # anything else (a space, a letter) ends the glued run
            self._buffer = rest
        phrases = self._release(at_end=False)
        phrases.extend(self.poll(now_s))
        return phrases

    def poll(self, now_s: float) -> list[Phrase]:
        """Release the first phrase if its time budget ran out; call it from a timer.

        Returns at most one phrase (the complete words so far, reason ``"time_budget"``), and
        only while the turn's first phrase is still pending.
        """
        if (
            self._index > 0
            or self._first_token_s is None
            or now_s - self._first_token_s < self.first_max_wait_s
        ):
            return []
        complete = [word for word in self._words(at_end=False) if word.complete]
        if not complete:
            return []
        return [self._cut(complete[-1].end, "time_budget")]

    def finish(self) -> list[Phrase]:
        """End the turn: return the phrases still pending, the last one flushed as is.

        The end of the turn completes the last word and counts as whitespace after a
        sentence mark; what is left after the usual rules goes out with reason ``"end"``.
        The chunker is then ready for the next turn.
        """
        phrases = self._release(at_end=True)
        if self._buffer.strip():
            phrases.append(self._cut(len(self._buffer), "end"))
        self.reset()
        return phrases

    def reset(self) -> None:
        """Drop pending text and start a new turn (e.g. on barge-in or cancel)."""
        self._buffer = ""
        self._index = 0
        self._first_token_s = None
        self._glued = False

    # ------------------------------------------------------------------ internals

    def _words(self, at_end: bool) -> list[_Word]:
        buffer = self._buffer
        words = []
        for match in _WORD.finditer(buffer):
            end = match.end()
            gap_end = end
            while gap_end < len(buffer) and buffer[gap_end].isspace():
                gap_end += 1
            words.append(
                _Word(
                    text=match.group(),
                    end=end,
                    complete=end < len(buffer) or at_end,
                    line_break=any(ch in "\n\r\u2028\u2029" for ch in buffer[end:gap_end]),
                )
            )
        return words

    def _release(self, at_end: bool) -> list[Phrase]:
        phrases = []
        while (cut := self._find_cut(at_end)) is not None:
            phrases.append(self._cut(*cut))
        return phrases

    def _find_cut(self, at_end: bool) -> tuple[int, str] | None:
        """Where the pending phrase ends (buffer offset) and why; None if not yet known."""
        first = self._index == 0
        previous_end = 0
        for count, word in enumerate(self._words(at_end), start=1):
            if not word.complete:
                if (
                    first
                    and self.first_at_mark
                    and _ends_sentence_at_once(word.text, opens_phrase=count == 1)
                ):
                    self._glued = True
                    return word.end, "sentence"
                return None
            if first and count > self.first_clause_words and word.text.lower() in _CLAUSE_OPENERS:
                return previous_end, "clause_opener"
            previous_end = word.end
            if word.line_break or _ends_sentence(word.text, opens_phrase=count == 1):
                return word.end, "sentence"
            if _ends_clause(word.text) and count >= (
                self.first_min_words if first else self.min_words
            ):
                return word.end, "clause"
            if first and count >= self.first_max_words:
                return word.end, "first_words"
            if count >= self.max_words:
                return word.end, "max_words"
        return None

    def _cut(self, end: int, reason: str) -> Phrase:
        text = " ".join(self._buffer[:end].split())
        self._buffer = self._buffer[end:]
        phrase = Phrase(text=text, index=self._index, reason=reason)
        self._index += 1
        return phrase


def _trailing_mark(word: str) -> str:
    """The word's last character that is not a closing quote or bracket ("" if none)."""
    core = word.rstrip(_CLOSERS)
    return core[-1] if core else ""


def _ends_sentence(word: str, opens_phrase: bool) -> bool:
    """Whether a complete word ends a sentence (see the module docstring for the rules)."""
    mark = _trailing_mark(word)
    if mark in _CJK_SENTENCE_MARKS or (mark in _SENTENCE_MARKS and mark != "."):
        return True
    if mark != ".":
        return False
    core = word.rstrip(_CLOSERS).lstrip(_OPENERS)
    if core.endswith(".."):
        return True  # an ellipsis written as dots
    lowered = core.lower()
    if lowered in _ABBREVIATIONS:
        return False
    if _LETTER_DOTS.fullmatch(core) or _INITIAL.fullmatch(core):
        return False
    return not (opens_phrase and _LIST_NUMBER.fullmatch(core))


def _ends_sentence_at_once(word: str, opens_phrase: bool) -> bool:
    """Whether a word still open at the end of the text ends a sentence whatever follows:
    a sentence mark right after a letter ("cup.", not "3." or '"Stop!"'), and a sentence
    end by :func:`_ends_sentence` ("Dr." and "J." are not)."""
    return (
        len(word) >= 2
        and word[-1] in _SENTENCE_MARKS
        and word[-2].isalpha()
        and _ends_sentence(word, opens_phrase)
    )


def _ends_clause(word: str) -> bool:
    """Whether a complete word ends at a clause mark (comma, semicolon, colon, dash)."""
    if word in _DASH_WORDS:
        return True
    mark = _trailing_mark(word)
    return mark in _CLAUSE_MARKS or mark in _CJK_CLAUSE_MARKS
