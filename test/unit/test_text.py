"""Tier 1 tests of omniflow.core.text: word splitting and the word-level edit distance."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from omniflow.core.text import edit_distance, words


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Hello robot.", ["hello", "robot"]),
        ("  Where's the KITCHEN?!", ["where's", "the", "kitchen"]),
        ("turn left, then stop", ["turn", "left", "then", "stop"]),
        ("", []),
        ("... !", []),
    ],
)
def test_words_lower_case_without_punctuation(text: str, expected: list[str]) -> None:
    assert words(text) == expected


@pytest.mark.parametrize(
    ("ref", "hyp", "expected"),
    [
        ("hello robot", "hello robot", 0),
        ("hello robot", "hello", 1),  # a deletion
        ("hello robot", "hello there robot", 1),  # an insertion
        ("turn left", "turn right", 1),  # a substitution
        ("can you tell me where the kitchen is", "tell me where kitchen is", 3),
        ("", "some words", 2),
        ("some words", "", 2),
        ("a b c", "c b a", 2),
    ],
)
def test_edit_distance_counts_word_errors(ref: str, hyp: str, expected: int) -> None:
    assert edit_distance(ref.split(), hyp.split()) == expected


WORD_LISTS = st.lists(st.sampled_from(("a", "b", "c", "d")), max_size=8)


@given(WORD_LISTS, WORD_LISTS)
def test_edit_distance_is_a_symmetric_bounded_distance(ref: list[str], hyp: list[str]) -> None:
    distance = edit_distance(ref, hyp)
    assert distance == edit_distance(hyp, ref)
    assert abs(len(ref) - len(hyp)) <= distance <= max(len(ref), len(hyp))
    assert (distance == 0) == (ref == hyp)


@given(WORD_LISTS, WORD_LISTS, WORD_LISTS)
def test_edit_distance_obeys_the_triangle_inequality(a, b, c) -> None:
    assert edit_distance(a, c) <= edit_distance(a, b) + edit_distance(b, c)
