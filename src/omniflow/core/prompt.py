"""What the language model is asked, as plain values, and its text layout for base models.

A :class:`Prompt` holds one turn's inputs: the persona/instructions (``system``), what the
camera shows as text (``scene``, from the vision tokens the association chose), the earlier
turns (``history``), the user's words (``user``, possibly a partial transcript that is still
growing) and, for multimodal backends only, the chosen frames (``images``).

:class:`PromptFormat` lays a prompt out as text for a *base* model (one without a chat
template, such as the embedded Gemma 3 270M)::

    {system}

    (Robot sees: {the scene of that turn})
    User: {turn}
    Robot: {turn}
    (Robot sees: {scene})
    User: {user}
    Robot:

Why this order: the part that changes least comes first, so it stays in the model's KV cache
across turns. The system text never changes and the history only grows at its end; the scene
changes with every turn, so it sits *after* the history, next to the question it is about,
and a new scene costs only its own few tokens instead of the whole history. An earlier user
turn keeps the scene it was asked in (:attr:`Turn.scene`): a small model given "What is
this?" / "This is a cup." without it took the cup for what the next question was about and
named the wrong thing, and with it the history reads exactly as that turn's prompt did, so
the cache holds it already. The user's text is last because it grows while the user speaks
(:meth:`PromptFormat.prefix` is everything before it). Newlines inside any field are folded
into spaces: a line break is what ends a turn (a stop string), so the user cannot inject a
fake "Robot:" line.

:func:`fit_history` makes a prompt fit a token budget by dropping the oldest turns, then, if
even that is not enough, by keeping only the last words of the user's text (the end of what
was said is what the answer is about). It never raises. No llama import here: callers pass a
token counter.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal

__all__ = ["DEFAULT_FORMAT", "Prompt", "PromptFormat", "Turn", "fit_history"]

_SPACES = re.compile(r"\s+")


@dataclass(frozen=True)
class Turn:
    """One earlier turn of the conversation. ``scene``: what the robot saw when the exchange
    began ("" when nothing), kept by its first turn (the user's question, or the robot's
    words when it spoke up unprompted) and laid out before it."""

    role: Literal["user", "robot"]
    text: str
    scene: str = ""


@dataclass(frozen=True)
class Prompt:
    """Everything one generation is conditioned on. Frozen: trimming returns a new one."""

    system: str
    scene: str = ""
    history: tuple[Turn, ...] = ()
    user: str = ""
    images: tuple[Any, ...] = ()


def _one_line(text: str) -> str:
    """Fold whitespace runs (including newlines) into single spaces; strip the ends."""
    return _SPACES.sub(" ", text).strip()


@dataclass(frozen=True)
class PromptFormat:
    """Text layout of a :class:`Prompt` for a base model, and the strings that end an answer.

    ``user_label``/``robot_label`` name the speakers; ``scene_template`` wraps the scene
    text (``{scene}``). ``stop`` ends generation: any of them in the output ends the answer
    and is never emitted. The default stops at the first line break, which keeps a base
    model's answers to one line (short, and it cannot go on to write the user's next turn).
    """

    user_label: str = "User"
    robot_label: str = "Robot"
    scene_template: str = "(Robot sees: {scene})"
    stop: tuple[str, ...] = ("\n", "User:", "Robot:")

    def _body(self, prompt: Prompt) -> str:
        """System text and history: the part that stays warm across turns."""
        parts = []
        system = prompt.system.strip()
        if system:
            parts.append(system + "\n\n")
        for turn in prompt.history:
            label = self.user_label if turn.role == "user" else self.robot_label
            parts.append(self._scene_line(turn.scene))
            parts.append(f"{label}: {_one_line(turn.text)}\n")
        parts.append(self._scene_line(prompt.scene))
        return "".join(parts)

    def _scene_line(self, scene: str) -> str:
        scene = _one_line(scene)
        return self.scene_template.format(scene=scene) + "\n" if scene else ""

    def prefix(self, prompt: Prompt) -> str:
        """Everything before the user's text: system, history, scene and the user label.

        It ends with ``"User:"`` (no trailing space: the space belongs to the user's first
        word, as a tokenizer sees it), so ``render(p, open_turn=False) == prefix(p) + " " +
        user`` and a growing user text only ever appends tokens.
        """
        return self._body(prompt) + f"{self.user_label}:"

    def render(self, prompt: Prompt, *, open_turn: bool = True) -> str:
        """The whole prompt; with ``open_turn`` it ends with ``"\\nRobot:"`` for generation.

        Without user text there is no user line (a proactive turn: the robot speaks up on
        its own): ``open_turn`` then gives the body followed directly by ``"Robot:"``.
        """
        user = _one_line(prompt.user)
        if not user:
            body = self._body(prompt)
            return body + f"{self.robot_label}:" if open_turn else body
        text = f"{self.prefix(prompt)} {user}"
        return text + f"\n{self.robot_label}:" if open_turn else text


DEFAULT_FORMAT = PromptFormat()


def _last_words(text: str, fits: Callable[[str], bool]) -> str:
    """The longest tail of ``text``'s words for which ``fits`` holds ("" if none)."""
    words = _one_line(text).split(" ")
    low, high = 0, len(words)  # invariant: words[high:] fits (the empty tail always does)
    if fits(" ".join(words)):
        return " ".join(words)
    # Binary search over the first word kept: keeping fewer words never needs more tokens.
    while high - low > 1:
        mid = (low + high) // 2
        if fits(" ".join(words[mid:])):
            high = mid
        else:
            low = mid
    return " ".join(words[high:])


def fit_history(
    prompt: Prompt,
    count_tokens: Callable[[str], int],
    budget: int,
    *,
    fmt: PromptFormat = DEFAULT_FORMAT,
) -> tuple[Prompt, int]:
    """Make ``fmt.render(prompt)`` fit in ``budget`` tokens; never raises.

    Drops the oldest turns first (returns how many were dropped). If the prompt without any
    history still does not fit, keeps only the last words of the user's text that fit; if
    even an empty user text does not fit, shortens the scene and then the system text
    (keeping their first words) so that something can always be generated. The input prompt
    is not changed (it is frozen; a new one is returned).
    """

    def fits(p: Prompt) -> bool:
        return count_tokens(fmt.render(p)) <= budget

    if fits(prompt):
        return prompt, 0
    history = prompt.history
    # Fewer turns never need more tokens: binary search for the fewest turns to drop.
    low, high = 0, len(history)
    if not fits(replace(prompt, history=())):
        low = high
    else:
        while high - low > 1:
            mid = (low + high) // 2
            if fits(replace(prompt, history=history[mid:])):
                high = mid
            else:
                low = mid
        low = high
    dropped = low
    trimmed = replace(prompt, history=history[dropped:])
    if fits(trimmed):
        return trimmed, dropped
    # Even the bare prompt is too long: the user's last words matter most.
    trimmed = replace(
        trimmed, user=_last_words(trimmed.user, lambda text: fits(replace(trimmed, user=text)))
    )
    if fits(trimmed):
        return trimmed, dropped
    for field_name in ("scene", "system"):
        words = _one_line(getattr(trimmed, field_name)).split(" ")
        low, high = 0, len(words)  # invariant: words[:low] fits
        while high - low > 0:
            mid = (low + high + 1) // 2
            if fits(replace(trimmed, **{field_name: " ".join(words[:mid])})):
                low = mid
            else:
                high = mid - 1
        trimmed = replace(trimmed, **{field_name: " ".join(words[:low])})
        if fits(trimmed):
            break
    return trimmed, dropped
