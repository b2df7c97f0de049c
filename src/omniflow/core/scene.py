"""What the camera saw, in words: vision observations as short phrases and one sentence.

The fusion node's vision encoder reports observations as ``(kind, region)`` pairs: ``face``,
``person``, ``hand`` (region: where it points, one of nine frame regions such as
``top-left``), and ``class`` for a robot's classifier model (region: the class index as
text). A text-only language model gets them as words; the association records carry the
phrases of the tokens they chose. No ROS imports.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["describe", "phrase", "person_present"]

_PEOPLE = ("face", "person")


def phrase(kind: str, region: str | None) -> str:
    """One observation as a short phrase, e.g. ``hand pointing top-left``."""
    if kind == "hand" and region:
        return f"hand pointing {region}"
    if kind == "class" and region:
        return f"object of class {region}"
    return kind


def person_present(observations: Iterable[tuple[str, str | None]]) -> bool:
    """A face or a body was seen."""
    return any(kind in _PEOPLE for kind, _ in observations)


def describe(observations: Iterable[tuple[str, str | None]]) -> tuple[list[str], str]:
    """The phrases (one per observation, duplicates kept once) and a sentence for a model.

    >>> describe([("face", None), ("hand", "top-left")])
    (['face', 'hand pointing top-left'], 'The camera shows a face and a hand pointing top-left.')
    """
    phrases = list(dict.fromkeys(phrase(kind, region) for kind, region in observations))
    if not phrases:
        return [], ""
    items = [f"{'an' if p[0] in 'aeiou' else 'a'} {p}" for p in phrases]
    listed = items[0] if len(items) == 1 else ", ".join(items[:-1]) + f" and {items[-1]}"
    return phrases, f"The camera shows {listed}."
