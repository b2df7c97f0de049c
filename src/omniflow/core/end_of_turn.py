"""Semantic end of turn: how long to wait after the user stops, from what they said.

A pause alone does not say whether the user has finished: "What is this?" is a whole turn,
"I would like the" is not, and people pause in the middle of a sentence for half a second
or more while they look for a word. The dialogue model already loaded scores how likely the
words so far end the turn (the probability that the user's sentence or line ends there, the
next token a full stop, question or exclamation mark or a line break, in the model's own
prompt layout), and :class:`EndOfTurnPolicy` turns that
probability into a wait counted from the end of the speech:

- at least ``threshold``: the turn is clearly complete, a short wait (``short_wait_s``;
  the fusion node's VAD, which reports the end after ``vad.min_silence_ms``, sets the floor);
- below it: the sentence is likely unfinished, a long wait (``long_wait_s``) for the user to
  go on; speech before it ends joins the words so far into one turn;
- no probability (a model that cannot score, a score that failed): ``unscored_wait_s``;
- words the recogniser heard trail off (:func:`trails_off`: an ellipsis, a comma, a colon at
  the end): the long wait whatever the score. Whisper closes a voice that stops mid-sentence
  with "..."; the words before it may still read as a sentence to the model ("Please put
  the" heard as "Please vote no..." scored complete, and the robot answered in the pause);
- the recogniser's last word is a guess (:meth:`EndOfTurnPolicy.guessed`: its confidence
  below ``unsure_word``): the long wait whatever the score. Whisper often closes a voice
  that stops mid-sentence with a word of its own, which makes the fragment a sentence: "I
  would like the" heard as "I would like that." (last word 0.09), "Show me the" as "Show
  me now" (0.07), "Please pick up the" as "Please pick up now." (0.14).

A clearly complete turn can also be answered ahead (``answer_ahead``, off by default): the
model starts its answer while the short wait runs, so the turn finds its first words ready;
the answer is spoken only if the turn starts with exactly those words.

What is scored is :func:`without_closing_stop`: a recogniser closes whatever it heard with
a full stop, fragments too ("I would like the."), and after a full stop the model expects
the line to end (0.37-0.83 for such fragments), so trailing full stops and ellipses are left
out and the model itself says whether a full stop would come; question and exclamation
marks stay. A fragment the user went on from joins the next words without it too.

The defaults come from ``benchmarks/end_of_turn.py`` (the scores of finished and unfinished
sentences with the embedded model, and the waits this policy chooses for them). No ROS, no
model here: the dialogue node asks its model for the probability and
:class:`~omniflow.core.dialogue.DialogueManager` applies the wait.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from omniflow.core.params import ParamSpec, defaults

__all__ = ["END_OF_TURN_PARAMS", "EndOfTurnPolicy", "trails_off", "without_closing_stop"]

END_OF_TURN_PARAMS = (
    ParamSpec(
        "end_of_turn.enabled",
        True,
        "Wait after the user's speech as long as the language model's end-of-turn "
        "probability says (false: answer as soon as the final transcript arrives)",
        live=True,
    ),
    ParamSpec(
        "end_of_turn.threshold",
        0.05,
        "End-of-turn probability from which a turn counts as complete and gets the short "
        "wait (benchmarks/end_of_turn.py, the embedded model: finished sentences score "
        "0.26-0.99, unfinished ones 0.0001-0.016)",
        minimum=0.0,
        maximum=1.0,
        live=True,
    ),
    ParamSpec(
        "end_of_turn.short_wait_ms",
        200,
        "Silence after a complete turn before it is answered, counted from the end of the "
        "speech (the fusion node's vad.min_silence_ms is the floor: it ends the speech)",
        unit="ms",
        minimum=0,
        maximum=3000,
        live=True,
    ),
    ParamSpec(
        "end_of_turn.long_wait_ms",
        1000,
        "Silence after a likely unfinished sentence before it is answered anyway; speech "
        "before then continues the same turn",
        unit="ms",
        minimum=0,
        maximum=5000,
        live=True,
    ),
    ParamSpec(
        "end_of_turn.answer_ahead",
        False,
        "Start generating the answer to a turn that scored complete while its short wait "
        "runs; it is spoken only if the turn then starts with the same words, and dropped "
        "if the user goes on. Worth it with a recogniser whose final comes before the wait "
        "ends (asr.engine moonshine: 0.86x end of speech -> speaker); off by default: "
        "with Whisper it gains nothing, and the generation takes the cores while the "
        "fusion node must hear a user who goes on",
        live=True,
    ),
    ParamSpec(
        "end_of_turn.unsure_word",
        0.15,
        "A final whose last word the recogniser is less sure of than this gets the long "
        "wait whatever its score: Whisper closes a sentence cut off in a pause with a "
        "guessed word ('I would like the' heard as 'I would like that.', 0.09): "
        "benchmarks/end_of_turn.py --heard holds 7 of 180 such fragments and 1 of 210 "
        "finished sentences (0.2: 11 and 3; 0.3: 23 and 15). 0: off; a recogniser without "
        "word confidences (Moonshine) is never held",
        minimum=0.0,
        maximum=1.0,
        live=True,
    ),
    ParamSpec(
        "end_of_turn.unscored_wait_ms",
        400,
        "Silence before answering when the model gives no end-of-turn probability (a "
        "remote model, a failed score)",
        unit="ms",
        minimum=0,
        maximum=5000,
        live=True,
    ),
)


_TRAILING = ".…,;: \t"


def without_closing_stop(text: str) -> str:
    """``text`` without the full stops, ellipses, commas and colons at its end (what the
    recogniser added, not the user): the words whose end-of-turn probability is asked for,
    and a fragment as it joins the words that continue it.

    >>> without_closing_stop("I would like the..."), without_closing_stop("What is this?")
    ('I would like the', 'What is this?')
    """
    return text.rstrip(_TRAILING)


def trails_off(text: str) -> bool:
    """Whether the recogniser closed ``text`` as a voice that stopped mid-sentence: an
    ellipsis, a comma, a semicolon or a colon at its end.

    >>> trails_off("Please vote no..."), trails_off("What is this?"), trails_off("Yes.")
    (True, False, False)
    """
    return text.rstrip().endswith(("...", "…", ",", ";", ":"))


@dataclass(frozen=True)
class EndOfTurnPolicy:
    """The wait after the user's speech for an end-of-turn probability; see the module."""

    enabled: bool
    threshold: float
    short_wait_s: float
    long_wait_s: float
    unscored_wait_s: float
    unsure_word: float
    answer_ahead: bool = False

    def __post_init__(self) -> None:
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"threshold must be within 0..1, got {self.threshold}")
        if not 0.0 <= self.unsure_word <= 1.0:
            raise ValueError(f"unsure_word must be within 0..1, got {self.unsure_word}")
        if min(self.short_wait_s, self.long_wait_s, self.unscored_wait_s) < 0:
            raise ValueError("the waits must not be negative")

    @classmethod
    def from_params(cls, params: Mapping[str, object]) -> EndOfTurnPolicy:
        """From ``END_OF_TURN_PARAMS`` values (the waits in ms)."""
        return cls(
            enabled=bool(params["end_of_turn.enabled"]),
            threshold=float(params["end_of_turn.threshold"]),
            short_wait_s=float(params["end_of_turn.short_wait_ms"]) / 1000,
            long_wait_s=float(params["end_of_turn.long_wait_ms"]) / 1000,
            unscored_wait_s=float(params["end_of_turn.unscored_wait_ms"]) / 1000,
            answer_ahead=bool(params["end_of_turn.answer_ahead"]),
            unsure_word=float(params["end_of_turn.unsure_word"]),
        )

    @classmethod
    def default(cls) -> EndOfTurnPolicy:
        """The policy of the ``END_OF_TURN_PARAMS`` defaults."""
        return cls.from_params(defaults(END_OF_TURN_PARAMS))

    def complete(self, probability: float) -> bool:
        """Whether a turn with this end-of-turn probability counts as complete."""
        return probability >= self.threshold

    def guessed(self, last_word_confidence: float) -> bool:
        """Whether the recogniser's last word is a guess: its confidence below
        ``unsure_word`` (NaN, no confidence given: not a guess).

        >>> policy = EndOfTurnPolicy.default()
        >>> policy.guessed(0.09), policy.guessed(0.9), policy.guessed(float("nan"))
        (True, False, False)
        """
        return last_word_confidence < self.unsure_word

    def wait_s(
        self, probability: float | None, text: str = "", last_word_confidence: float = math.nan
    ) -> float:
        """Seconds of silence after the speech before the turn is answered; ``text`` is the
        words as the recogniser closed them (see :func:`trails_off`), and
        ``last_word_confidence`` how sure it is of the last (see :meth:`guessed`).

        >>> policy = EndOfTurnPolicy.default()
        >>> policy.wait_s(0.05), policy.wait_s(0.0005), policy.wait_s(None)
        (0.2, 1.0, 0.4)
        >>> policy.wait_s(0.9, "I would like the..."), policy.wait_s(None, "the red,")
        (1.0, 1.0)
        >>> policy.wait_s(0.9, "I would like that.", 0.11), policy.wait_s(0.9, "What is this?", 0.8)
        (1.0, 0.2)
        """
        if trails_off(text) or self.guessed(last_word_confidence):
            return self.long_wait_s
        if probability is None or probability != probability:  # None or NaN: not scored
            return self.unscored_wait_s
        return self.short_wait_s if self.complete(probability) else self.long_wait_s

    def answers_ahead(
        self, probability: float | None, text: str = "", last_word_confidence: float = math.nan
    ) -> bool:
        """Whether to start the answer while the wait for these words runs: they are a
        clearly complete turn (scored at least ``threshold``, not trailing off), so the
        turn is likely to start after the short wait.

        >>> from dataclasses import replace
        >>> policy = replace(EndOfTurnPolicy.default(), answer_ahead=True)
        >>> policy.answers_ahead(0.9, "What is this?"), policy.answers_ahead(0.0005, "I want")
        (True, False)
        >>> policy.answers_ahead(None, "What is this?"), policy.answers_ahead(0.9, "the red,")
        (False, False)
        >>> EndOfTurnPolicy.default().answers_ahead(0.9, "What is this?")  # off by default
        False
        """
        if not self.answer_ahead or probability is None or probability != probability:
            return False
        return (
            self.complete(probability)
            and not trails_off(text)
            and not self.guessed(last_word_confidence)
        )
