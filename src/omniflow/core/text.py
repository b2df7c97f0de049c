"""Comparing what was said with what was recognised, word by word. No ROS imports.

The speech benchmarks and the recogniser tests score a transcript by its word errors: the
words of both texts after :func:`words` (lower case, punctuation removed, apostrophes kept),
and the fewest substitutions, deletions and insertions that turn one into the other
(:func:`edit_distance`); the word error rate is that count over the reference's words.

A recogniser's decoder can fall into a loop at the end of an utterance, repeating a phrase
until its token budget runs out (Whisper does it on short noisy audio, most often with the
words it was primed with: "cup on the table dining table, dining table, dining table");
:func:`loop_cut` finds where such a loop starts.
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


#: Repeats of a phrase at the end of a hypothesis that make it a decoder loop: four (speech
#: repeats a word three times, "no, no, no", rarely four), three when the phrase is made only
#: of the words the recogniser was primed with (an echo of the prompt, not something heard).
LOOP_REPEATS = 4
PROMPT_LOOP_REPEATS = 3
#: The longest phrase, in words, looked for as the unit of a loop.
LOOP_UNIT_WORDS = 4


def loop_cut(tokens: Sequence[str], prompt: str | None = None) -> int:
    """How many of ``tokens`` (a hypothesis split on white space) to keep: all of them, or
    those before a decoder loop at the end (see the module). A loop is a phrase of 1 to
    :data:`LOOP_UNIT_WORDS` words repeated to the end (a last, unfinished repeat included), at
    least :data:`LOOP_REPEATS` times, or :data:`PROMPT_LOOP_REPEATS` times when each of its
    words is in ``prompt`` (the priming text: phrases separated by commas, "cup, dining
    table"). The first instance of a loop of other words is kept (it may have been said); a
    loop of prompt words goes whole, from where its phrase begins as the prompt has it ("the
    table dining table, dining table" keeps "the table"). Tokens compare by their
    :func:`words`, so "table," repeats "table"."""
    norm = [" ".join(words(t)) for t in tokens]
    phrases = [tuple(words(p)) for p in (prompt or "").split(",")]
    primed = {w for p in phrases for w in p}
    n = len(norm)
    best = n
    for unit in range(1, LOOP_UNIT_WORDS + 1):
        # The periodic tail: the earliest start from which every token repeats the one
        # ``unit`` before it, to the end.
        start = n - unit
        while start >= 1 and norm[start - 1] == norm[start - 1 + unit]:
            start -= 1
        if start < 0:
            continue
        phrase = norm[start : start + unit]
        if not all(phrase):
            continue
        if primed and all(w in primed for p in phrase for w in p.split()):
            # The phrase in the prompt's order: the loop starts at that rotation.
            shift = next((r for r in range(unit) if tuple(phrase[r:] + phrase[:r]) in phrases), 0)
            if (n - start - shift) // unit >= PROMPT_LOOP_REPEATS:
                best = min(best, start + shift)
        elif (n - start) // unit >= LOOP_REPEATS:
            best = min(best, start + unit)
    return best
