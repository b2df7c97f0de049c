"""What the camera saw, in words a small language model can use, and what the hand points at.

The vision encoder reports objects with names and boxes (COCO labels: ``cup``, ``dining
table``, ``cat``, ``person``), a hand with its pointing ray, faces and bodies. This module
turns them into ``(kind, detail)`` pairs (:func:`scene_pairs`; the payload of a vision token)
and those into short phrases and one or two sentences (:func:`describe`)::

    a cup in the centre, on a dining table. The hand points at the cup.

Positions are a 3 x 3 grid of the frame (``top-left`` .. ``in the centre`` ..
``bottom-right``), sizes a word for objects that fill much or little of the frame, and an
object standing on a table, bed, couch, bench or chair says so (the support itself is then
not listed again). :func:`resolve_pointing` finds the object the hand points at: the first
box along its ray (wrist -> middle knuckle, from the knuckle on), or, without a ray or a hit,
the box nearest the hand; among boxes at a similar distance the smaller one wins (a cup on a
table rather than the table). Boxes are normalised (x0, y0, x1, y1). No ROS imports.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = [
    "SUPPORTS",
    "SeenObject",
    "describe",
    "object_phrase",
    "person_present",
    "phrase",
    "position",
    "resolve_pointing",
    "scene_pairs",
]

Box = tuple[float, float, float, float]
Point = tuple[float, float]

#: Labels that other objects stand on ("a cup, on a dining table").
SUPPORTS = frozenset({"dining table", "bed", "couch", "bench", "chair"})
_PEOPLE = ("face", "person")
# Objects named in one description at most (a tiny model reads it).
MAX_LISTED = 4
# A hand without a ray hit refers to a box at most this far away (frame widths).
MAX_REACH = 0.2
# Weight of a box's size (square root of its area) against its distance along the ray.
SIZE_WEIGHT = 0.5


@dataclass(frozen=True)
class SeenObject:
    """One detected object: its label, score (0..1) and normalised box."""

    label: str
    score: float
    box: Box


def _centre(box: Box) -> Point:
    return (box[0] + box[2]) / 2, (box[1] + box[3]) / 2


def _area(box: Box) -> float:
    return max(0.0, box[2] - box[0]) * max(0.0, box[3] - box[1])


def position(box: Box) -> str:
    """Where a box's centre is, in words.

    >>> position((0.4, 0.4, 0.6, 0.6)), position((0.0, 0.4, 0.2, 0.6)), position((0.7, 0, 1, 0.2))
    ('in the centre', 'centre-left', 'top-right')
    """
    x, y = _centre(box)
    col = ("left", "centre", "right")[min(2, int(x * 3))]
    row = ("top", "centre", "bottom")[min(2, int(y * 3))]
    if row == col == "centre":
        return "in the centre"
    if row == "centre":
        return f"centre-{col}"
    return f"{row}-{col}"


def _size(box: Box) -> str:
    area = _area(box)
    return "large " if area >= 0.3 else "small " if area < 0.02 else ""


def _support(obj: SeenObject, others: Sequence[SeenObject]) -> SeenObject | None:
    """The larger support box under ``obj``'s bottom centre, if any."""
    x, bottom = _centre(obj.box)[0], obj.box[3]
    for other in others:
        b = other.box
        if (
            other.label in SUPPORTS
            and other is not obj
            and _area(b) > _area(obj.box)
            and b[0] <= x <= b[2]
            and b[1] <= bottom <= b[3]
        ):
            return other
    return None


def object_phrase(obj: SeenObject, others: Sequence[SeenObject] = ()) -> str:
    """An object with its size, position and support, without an article.

    >>> cup = SeenObject("cup", 0.9, (0.1, 0.3, 0.3, 0.6))
    >>> object_phrase(cup, [cup, SeenObject("dining table", 0.6, (0, 0, 1, 1))])
    'cup, centre-left, on a dining table'
    >>> object_phrase(SeenObject("cat", 0.9, (0.05, 0.05, 0.95, 0.95)))
    'large cat in the centre'
    """
    where = position(obj.box)
    text = f"{_size(obj.box)}{obj.label}" + (f" {where}" if where[0] == "i" else f", {where}")
    support = _support(obj, others)
    return f"{text}, on {_article(support.label)} {support.label}" if support else text


def _ray_entry(origin: Point, direction: Point, box: Box) -> float | None:
    """Distance along the unit ray to where it enters ``box`` (0 inside), None if it misses."""
    t_near, t_far = 0.0, math.inf
    for o, d, lo, hi in (
        (origin[0], direction[0], box[0], box[2]),
        (origin[1], direction[1], box[1], box[3]),
    ):
        if abs(d) < 1e-9:
            if not lo <= o <= hi:
                return None
            continue
        t0, t1 = sorted(((lo - o) / d, (hi - o) / d))
        t_near, t_far = max(t_near, t0), min(t_far, t1)
    return t_near if t_near <= t_far else None


def _distance(point: Point, box: Box) -> float:
    dx = max(box[0] - point[0], 0.0, point[0] - box[2])
    dy = max(box[1] - point[1], 0.0, point[1] - box[3])
    return math.hypot(dx, dy)


def resolve_pointing(
    hand_box: Box, ray: tuple[Point, Point] | None, objects: Sequence[SeenObject]
) -> SeenObject | None:
    """The object the hand points at, or None (see the module docstring).

    A person whose box holds the hand is the user, not a target.

    >>> cup = SeenObject("cup", 0.9, (0.26, 0.03, 0.70, 0.70))
    >>> table = SeenObject("dining table", 0.6, (0.0, 0.0, 1.0, 1.0))
    >>> hand, ray = (0.67, 0.45, 0.77, 0.59), ((0.76, 0.52), (0.69, 0.50))
    >>> resolve_pointing(hand, ray, [cup, table]).label
    'cup'
    >>> resolve_pointing(hand, None, [SeenObject("cat", 0.8, (0.0, 0.0, 0.3, 0.2))]) is None
    True
    """
    centre = _centre(hand_box)
    targets = [o for o in objects if not (o.label == "person" and _distance(centre, o.box) == 0.0)]
    best: tuple[float, SeenObject] | None = None
    if ray is not None:
        (wx, wy), (kx, ky) = ray
        norm = math.hypot(kx - wx, ky - wy)
        if norm > 1e-6:
            direction = ((kx - wx) / norm, (ky - wy) / norm)
            for obj in targets:
                t = _ray_entry((kx, ky), direction, obj.box)
                if t is not None:
                    cost = t + SIZE_WEIGHT * math.sqrt(_area(obj.box))
                    if best is None or cost < best[0]:
                        best = (cost, obj)
    if best is None:
        for obj in targets:
            d = _distance(centre, obj.box)
            if d <= MAX_REACH:
                cost = d + SIZE_WEIGHT * math.sqrt(_area(obj.box))
                if best is None or cost < best[0]:
                    best = (cost, obj)
    return best[1] if best else None


def scene_pairs(
    objects: Sequence[SeenObject],
    hand: tuple[Box, tuple[Point, Point] | None, str | None] | None = None,
    others: Iterable[tuple[str, str | None]] = (),
) -> tuple[tuple[tuple[str, str | None], ...], str | None]:
    """A frame as ``(kind, detail)`` pairs, and the label the hand points at (or None).

    ``objects``: most confident first; ``hand``: (box, ray, region) of a detected hand;
    ``others``: pairs from other detectors (``("face", None)``). Objects become
    ``("object", phrase)`` (people ``("person", phrase)``) and a resolved pointing
    ``("pointing", label)``, else the hand ``("hand", region)``.
    """
    pairs: list[tuple[str, str | None]] = []
    supports = {id(s) for o in objects if (s := _support(o, objects)) is not None}
    for obj in [o for o in objects if id(o) not in supports][:MAX_LISTED]:
        kind = "person" if obj.label == "person" else "object"
        pairs.append((kind, object_phrase(obj, objects)))
    pairs.extend(others)
    pointed = None
    if hand is not None:
        box, ray, region = hand
        target = resolve_pointing(box, ray, objects)
        pointed = target.label if target else None
        pairs.append(("pointing", pointed) if pointed else ("hand", region))
    return tuple(pairs), pointed


def _article(text: str) -> str:
    return "an" if text[:1] in "aeiou" else "a"


def phrase(kind: str, detail: str | None) -> str:
    """One pair as a short phrase, e.g. ``hand pointing top-left``, ``hand pointing at the
    cup``, ``cup, centre-left`` (objects and people: their phrase as it is)."""
    if kind == "hand" and detail:
        return f"hand pointing {detail}"
    if kind == "pointing" and detail:
        return f"hand pointing at the {detail}"
    if kind == "class" and detail:
        return f"object of class {detail}"
    if kind in ("object", "person") and detail:
        return detail
    return kind


def person_present(observations: Iterable[tuple[str, str | None]]) -> bool:
    """A face or a body was seen."""
    return any(kind in _PEOPLE for kind, _ in observations)


def describe(observations: Iterable[tuple[str, str | None]]) -> tuple[list[str], str]:
    """The phrases (one per pair, duplicates kept once) and the words for a model.

    >>> describe([("face", None), ("hand", "top-left")])
    (['face', 'hand pointing top-left'], 'The camera shows a face and a hand pointing top-left.')
    >>> describe([("object", "large cat in the centre"), ("pointing", "cat")])[1]
    'The camera shows a large cat in the centre. The hand points at the cat.'
    """
    pairs = list(dict.fromkeys(observations))
    phrases = list(dict.fromkeys(phrase(kind, detail) for kind, detail in pairs))
    if not phrases:
        return [], ""
    pointed = [detail for kind, detail in pairs if kind == "pointing" and detail]
    listed = [phrase(k, d) for k, d in pairs if k != "pointing"]
    items = list(dict.fromkeys(f"{_article(p)} {p}" for p in listed))
    sentences = []
    if items:
        if any("," in item for item in items) or len(items) == 1:
            text = "; ".join(items)  # phrases with commas: "; " keeps them apart
        else:
            text = ", ".join(items[:-1]) + f" and {items[-1]}"
        sentences.append(f"The camera shows {text}.")
    sentences.extend(f"The hand points at the {label}." for label in pointed[:1])
    return phrases, " ".join(sentences)
