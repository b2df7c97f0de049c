"""Vision observations in words."""

from __future__ import annotations

import doctest

import omniflow.core.scene as scene
from omniflow.core.scene import describe, person_present, phrase


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
