"""Asking the user to say it again when the recogniser is unsure of what it heard.

In a loud room the recogniser writes down something, and a small language model answers
whatever it is given: "What's in different box?" got "Two plus two is four.", and words
heard in babble got answers about things nobody asked. A person who did not catch a question
asks for it again. :class:`ClarifyPolicy` does that for a spoken turn: when the final
transcript that ends it has at least ``min_words`` words and the recogniser's confidence in
it (``Transcript.confidence``) is below ``below``, the robot says ``reply`` instead of an
answer.

The defaults come from ``benchmarks/clarify.py`` (the hearing benchmark's rooms at 30 to
5 dB, Whisper tiny.en, whose confidence is the exponential of the mean log-probability of
its tokens): 0.45 and three words asked again 4 of 402 finals heard word for word and 127
of 346 with half their words or more wrong. Short finals are left alone: "Turn left." and
"Hello robot." are heard right with confidences down to 0.31 (with one word as the least,
25 finals heard right were asked again), and a stop request never reaches this policy.
Moonshine's confidence has the same meaning (the mean over its greedy tokens);
pocketsphinx gives its hypothesis' posterior per word (the n-th root for n words). With its
open vocabulary, which heard 25 of 956 finals word for word in the same rooms, 695 of its 714
finals of three words or more are asked again. A recogniser that gives no confidence (NaN)
is never asked about.

No ROS here: :class:`~omniflow.core.dialogue.DialogueManager` applies the policy to the
turns it starts from speech.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from omniflow.core.params import ParamSpec, defaults
from omniflow.core.text import words

__all__ = ["CLARIFY_PARAMS", "ClarifyPolicy"]

CLARIFY_PARAMS = (
    ParamSpec(
        "clarify.below",
        0.45,
        "A spoken turn whose final transcript has at least clarify.min_words words and a "
        "recogniser confidence below this gets clarify.reply instead of an answer "
        "(benchmarks/clarify.py, Whisper tiny.en: 0.45 asks again 4 of 402 finals heard word "
        "for word and 127 of 346 with half their words or more wrong); 0: off. Pocketsphinx's "
        "open vocabulary, which mishears most sentences, is asked again nearly always",
        minimum=0.0,
        maximum=1.0,
        live=True,
    ),
    ParamSpec(
        "clarify.min_words",
        3,
        "Shorter finals are answered whatever their confidence (short commands such as "
        "'Turn left.' are heard right with confidences down to 0.31)",
        unit="words",
        minimum=1,
        maximum=100,
        live=True,
    ),
    ParamSpec(
        "clarify.reply",
        "Sorry, I didn't catch that. Could you say it again?",
        "What the robot says to a turn it is unsure of; empty: nothing (it listens again)",
        live=True,
    ),
)


@dataclass(frozen=True)
class ClarifyPolicy:
    """When to ask the user to say it again; see the module."""

    below: float
    min_words: int
    reply: str

    def __post_init__(self) -> None:
        if not 0.0 <= self.below <= 1.0 or self.min_words < 1:
            raise ValueError(
                f"clarify.below must be within 0..1 and clarify.min_words >= 1 (got "
                f"{self.below}, {self.min_words})"
            )

    @classmethod
    def from_params(cls, params: Mapping[str, object]) -> ClarifyPolicy:
        """From ``CLARIFY_PARAMS`` values."""
        return cls(
            below=float(params["clarify.below"]),
            min_words=int(params["clarify.min_words"]),
            reply=str(params["clarify.reply"]).strip(),
        )

    @classmethod
    def default(cls) -> ClarifyPolicy:
        """The policy of the ``CLARIFY_PARAMS`` defaults."""
        return cls.from_params(defaults(CLARIFY_PARAMS))

    @classmethod
    def off(cls) -> ClarifyPolicy:
        """A policy that never asks."""
        return cls(below=0.0, min_words=1, reply="")

    def asks(self, text: str, confidence: float) -> bool:
        """Whether a final transcript ``text`` heard with ``confidence`` is asked again.

        >>> policy = ClarifyPolicy.default()
        >>> policy.asks("What's in different box?", 0.31), policy.asks("Turn left.", 0.31)
        (True, False)
        >>> policy.asks("What is that animal?", 0.57), policy.asks("What is it?", math.nan)
        (False, False)
        """
        return (
            not math.isnan(confidence)
            and confidence < self.below
            and len(words(text)) >= self.min_words
        )
