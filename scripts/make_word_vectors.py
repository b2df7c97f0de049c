#!/usr/bin/env python3
"""Write ``src/omniflow/data/coco_words.npz``: the all-MiniLM-L6-v2 vectors of the 80 COCO
labels and their close words (``omniflow.core.lexicon.vocabulary()``), shipped so the fusion
node does not embed ~140 words (about 2 s here) at every configure.

Arrays: ``words`` (str), ``vectors`` (float16, one unit row per word; float16 keeps the file
small and moves a cosine by < 1e-3). Run again after changing the vocabulary;
test/unit/test_embedding.py checks that the shipped rows match the model.

    .venv/bin/python scripts/make_word_vectors.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from omniflow.core.lexicon import vocabulary
from omniflow.engines.embedding import WORD_VECTORS, TextEmbedder


def main() -> int:
    words = vocabulary()
    vectors = TextEmbedder().embed_many(words).astype(np.float16)
    np.savez_compressed(WORD_VECTORS, words=np.array(words), vectors=vectors)
    print(f"wrote {WORD_VECTORS}: {len(words)} words, {Path(WORD_VECTORS).stat().st_size} B")
    return 0


if __name__ == "__main__":
    sys.exit(main())
