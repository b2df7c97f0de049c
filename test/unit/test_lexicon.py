"""One word space for labels and speech (tier 1, no ROS): the vocabulary, content words,
queries and sights, with the shipped label vectors."""

from __future__ import annotations

import pytest

from omniflow.core.lexicon import (
    CLOSE_WORDS,
    COCO_LABELS,
    content_words,
    vocabulary,
)
from omniflow.core.semantic import hamming
from omniflow.engines.embedding import load_word_space


@pytest.fixture(scope="module")
def words():
    return load_word_space()


def test_the_vocabulary_is_the_80_coco_labels_then_their_close_words():
    assert len(COCO_LABELS) == len(set(COCO_LABELS)) == 80
    assert set(CLOSE_WORDS) <= set(COCO_LABELS)
    vocab = vocabulary()
    assert vocab[:80] == COCO_LABELS and len(vocab) == len(set(vocab))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("What colour is the cat?", (("cat",), False)),
        ("What is this?", ((), True)),
        ("Stop. What is that animal?", (("animal",), True)),
        ("Where are my glasses", (("glasses", "glass"), False)),
        ("Put it here, near the cups!", (("put", "near", "cups", "cup"), True)),
        ("", ((), False)),
    ],
)
def test_content_words_drop_function_words_and_note_pointing(text, expected):
    assert content_words(text) == expected


def test_the_shipped_word_space_has_every_label(words):
    assert set(COCO_LABELS) <= set(words.words)
    assert words.vectors.shape == (len(words.words), 384)


@pytest.mark.parametrize(
    ("text", "object_word", "points"),
    [
        ("What colour is the cat?", "cat", False),
        ("Is the mug full?", "mug", False),
        ("What is on the dining table?", "dining table", False),
        ("Where is the teddy bear", "teddy bear", False),
        ("What is this?", None, True),
        ("Hello there", None, False),
        ("Tell me about the zorgle", None, False),  # unknown and no embedder: nothing
    ],
)
def test_a_query_finds_the_object_word(words, text, object_word, points):
    query = words.query(text)
    assert (query.object_word, query.points) == (object_word, points)
    assert (query.code is None) == (object_word is None)
    assert query.evidence == (object_word is not None or points)


def test_a_sight_codes_its_main_object_and_lists_its_words(words):
    cup = words.sight(["cup", "dining table"])
    assert cup.main == "cup" and cup.code == words.code("cup")
    assert {"cup", "mug", "table", "dining table"} <= set(cup.words)
    pointed = words.sight(["dining table"], pointed="cup")
    assert pointed.labels == ("cup", "dining table") and pointed.code == words.code("cup")
    assert words.sight([]).code == 0 and words.sight([]).main is None


def test_codes_of_one_object_are_nearer_than_of_two(words):
    cup, mug, cat, kitten = (words.code(w) for w in ("cup", "mug", "cat", "kitten"))
    assert hamming(cat, kitten) < hamming(cat, cup)
    assert hamming(cup, mug) <= hamming(mug, cat)
