"""Vision observations in words."""

from __future__ import annotations

import doctest

import pytest

import omniflow.core.scene as scene
from omniflow.core.scene import (
    SeenObject,
    describe,
    object_phrase,
    person_present,
    phrase,
    position,
    resolve_pointing,
    scene_pairs,
)


def test_docstring_examples():
    assert doctest.testmod(scene).failed == 0


def test_phrases():
    assert phrase("hand", "bottom-right") == "hand pointing bottom-right"
    assert phrase("hand", None) == "hand"
    assert phrase("class", "17") == "object of class 17"
    assert phrase("face", None) == "face"


def test_sentences():
    assert describe([]) == ([], "")
    assert describe([("person", None)]) == (["person"], "The camera shows a person.")
    phrases, sentence = describe([("face", None), ("face", None), ("person", None), ("class", "3")])
    assert phrases == ["face", "person", "object of class 3"]
    assert sentence == "The camera shows a face, a person and an object of class 3."


def test_person_present():
    assert person_present([("hand", "top-left"), ("face", None)])
    assert not person_present([("hand", "top-left")])
    assert not person_present([])


CUP = SeenObject("cup", 0.93, (0.26, 0.03, 0.70, 0.70))
TABLE = SeenObject("dining table", 0.55, (0.0, 0.0, 1.0, 1.0))
CAT = SeenObject("cat", 0.84, (0.0, 0.0, 0.97, 0.99))
HAND = (0.67, 0.45, 0.77, 0.59)  # the sample session's hand beside the cup
LEFTWARDS = ((0.76, 0.52), (0.69, 0.50))  # wrist -> middle knuckle


@pytest.mark.parametrize(
    ("box", "words"),
    [
        ((0.0, 0.0, 0.2, 0.2), "top-left"),
        ((0.4, 0.0, 0.6, 0.2), "top-centre"),
        ((0.8, 0.4, 1.0, 0.6), "centre-right"),
        ((0.3, 0.3, 0.7, 0.7), "in the centre"),
        ((0.4, 0.8, 0.6, 1.0), "bottom-centre"),
    ],
)
def test_positions_are_a_three_by_three_grid(box, words):
    assert position(box) == words


def test_the_hand_points_at_the_cup_not_the_table_it_stands_on():
    assert resolve_pointing(HAND, LEFTWARDS, [CUP, TABLE]) is CUP
    pairs, pointed = scene_pairs([CUP, TABLE], (HAND, LEFTWARDS, "middle-left"))
    assert pointed == "cup"
    assert pairs == (("object", "cup in the centre, on a dining table"), ("pointing", "cup"))
    assert describe(pairs)[1] == (
        "The camera shows a cup in the centre, on a dining table. The hand points at the cup."
    )


def test_a_hand_pointing_away_from_every_box_falls_back_to_the_nearest_box():
    small = SeenObject("cup", 0.9, (0.5, 0.45, 0.6, 0.55))
    rightwards = ((0.69, 0.50), (0.76, 0.52))
    assert resolve_pointing(HAND, rightwards, [small]) is small  # by position: 0.12 away
    assert resolve_pointing(HAND, None, [small]) is small
    far = SeenObject("cup", 0.9, (0.0, 0.0, 0.1, 0.1))
    assert resolve_pointing(HAND, rightwards, [far]) is None


def test_the_user_holding_the_hand_is_not_what_it_points_at():
    user = SeenObject("person", 0.8, (0.5, 0.2, 1.0, 1.0))
    assert resolve_pointing(HAND, LEFTWARDS, [user]) is None
    assert resolve_pointing(HAND, LEFTWARDS, [user, CAT]) is CAT
    pairs, pointed = scene_pairs([user], (HAND, LEFTWARDS, "middle-left"), [("face", None)])
    assert pointed is None and ("hand", "middle-left") in pairs
    assert person_present(pairs)


def test_a_hand_without_a_target_keeps_its_direction_and_a_long_scene_stays_short():
    many = [
        SeenObject(f"thing{i}", 0.9 - i / 10, (i / 10, 0.1, i / 10 + 0.05, 0.2)) for i in range(6)
    ]
    pairs, _ = scene_pairs(many)
    assert [p for k, p in pairs] == [object_phrase(o) for o in many[:4]]
    assert describe([("hand", "top-left")])[1] == "The camera shows a hand pointing top-left."
    assert phrase("pointing", "cat") == "hand pointing at the cat"
