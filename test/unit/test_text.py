"""Tier 1 tests of omniflow.core.text: word splitting, the word-level edit distance and decoder
loops."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from omniflow.core.text import edit_distance, loop_cut, words


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


@pytest.mark.parametrize(
    ("heard", "prompt", "kept"),
    [
        # Whisper primed with what was in view, on a short noisy question (fusion test log).
        (
            "cup on the table dining table, dining table, dining table, dining",
            "cup, dining table",
            "cup on the table",
        ),
        ("go go go go go", None, "go"),  # a loop of other words keeps its first instance
        ("what is that thing that thing that thing that thing", None, "what is that thing"),
        ("no, no, no", None, "no, no, no"),  # three is speech, not a loop
        ("the table table", "table", "the table table"),  # two repeats of a prompt word
        ("cup cup cup cup", "cup, dining table", ""),  # nothing but the prompt's echo
        # Babble, primed with three labels not said (benchmarks/scene_bias.py): all echo.
        ("cat, dog, dog, dog, dog, dog, dog, dog.", "cat, dog, chair", ""),
        ("the cat, dog, dog, dog, dog.", "cat, dog, chair", "the cat,"),  # "the" was heard
        ("is the cup on the table", "cup, dining table", "is the cup on the table"),
        # The prompt's list read back after the question (fresh-clone run under a CPU hog).
        (
            "is the cup on the table dining table, dining hall,",
            "cup, dining table",
            "is the cup on the table",
        ),
        ("cup, dining table, dining table,", "cup, dining table", ""),
        ("bring me the cup,", "cup, dining table", "bring me the cup,"),  # one phrase: speech
        ("the cup, the dining table,", "cup, dining table", "the cup, the dining table,"),
        ("dining table, dining hall.", "cup, dining table", "dining table, dining hall."),
        ("", "cup", ""),
    ],
)
def test_loop_cut_drops_a_decoder_loop_at_the_end(heard: str, prompt, kept: str) -> None:
    tokens = heard.split()
    assert " ".join(tokens[: loop_cut(tokens, prompt)]) == kept


@given(
    st.lists(st.sampled_from(("a", "b", "c,", "C")), max_size=12), st.sampled_from((None, "a, b c"))
)
def test_loop_cut_keeps_a_prefix(tokens: list[str], prompt) -> None:
    keep = loop_cut(tokens, prompt)
    assert 0 <= keep <= len(tokens)
    assert loop_cut(tokens[:keep], prompt) <= keep
