"""Comparing what was said with what was recognised, word by word. No ROS imports.

The speech benchmarks and the recogniser tests score a transcript by its word errors: the
words of both texts after :func:`words` (lower case, punctuation removed, apostrophes kept),
and the fewest substitutions, deletions and insertions that turn one into the other
(:func:`edit_distance`); the word error rate is that count over the reference's words.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_NOT_A_WORD = re.compile(r"[^a-z' ]+")


def words(text: str) -> list[str]:
    """The words of ``text``, lower case, without punctuation ("Hello, robot." -> hello robot;
    "where's" stays one word)."""
    return _NOT_A_WORD.sub(" ", text.lower()).split()


def edit_distance(ref: Sequence[str], hyp: Sequence[str]) -> int:
    """Word-level Levenshtein distance: the fewest substitutions, deletions and insertions
    that turn ``ref`` into ``hyp`` (one row of the table at a time: O(len(hyp)) memory)."""
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1]
