"""Comparing what was said with what was recognised, word by word. No ROS imports.

The speech benchmarks and the recogniser tests score a transcript by its word errors: the
words of both texts after :func:`words` (lower case, punctuation removed, apostrophes kept),
and the fewest substitutions, deletions and insertions that turn one into the other
(:func:`edit_distance`); the word error rate is that count over the reference's words.

A recogniser's decoder can fall into a loop at the end of an utterance, repeating a phrase
until its token budget runs out (Whisper does it on short noisy audio, most often with the
words it was primed with: "cup on the table dining table, dining table, dining table"), or
read the prompt's list back after the words heard ("... on the table dining table, dining
hall,"); :func:`loop_cut` finds where either starts.
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
    table dining table, dining table" keeps "the table"). An unfinished listing of the prompt
    at the end goes too (:func:`_prompt_list_start`). Tokens compare by their
    :func:`words`, so "table," repeats "table". A hypothesis that is only prompt words before
    its loop of prompt words goes whole: primed with "cat, dog, chair", babble came back as
    "cat, dog, dog, dog, dog." (``benchmarks/scene_bias.py``), the prompt's echo from its
    first word."""
    norm = [" ".join(words(t)) for t in tokens]
    phrases = [tuple(words(p)) for p in (prompt or "").split(",")]
    primed = {w for p in phrases for w in p}
    n = len(norm)
    best = n
    prompt_loop = False
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
                prompt_loop = True
        elif (n - start) // unit >= LOOP_REPEATS:
            best = min(best, start + unit)
    cut = min(best, _prompt_list_start(tokens, norm, phrases, primed))
    if prompt_loop and all(w in primed for t in norm[:cut] for w in t.split()):
        return 0
    return cut


def _prompt_list_start(
    tokens: Sequence[str],
    norm: Sequence[str],
    phrases: Sequence[tuple[str, ...]],
    primed: set[str],
) -> int:
    """Where an unfinished listing of the prompt at the end begins, else ``len(tokens)``: a
    phrase of the prompt, then comma-ended items of at most :data:`LOOP_UNIT_WORDS` words,
    each opening with a prompt word, to the end ("is the cup on the table dining table,
    dining hall," primed with "cup, dining table" begins at "dining table,"). That is
    the prompt's list read back, not words heard; a decode that does not end on a comma, or
    a single phrase of the prompt ("bring me the cup,"), is kept."""
    n = len(tokens)
    if not primed or not tokens or not tokens[-1].endswith(","):
        return n
    ends = [i + 1 for i, t in enumerate(tokens) if t.endswith(",")]
    starts = [0, *ends[:-1]]
    # The trailing items that open with a prompt word, back to the first that does not.
    start, items = n, 0
    for a, b in zip(reversed(starts), reversed(ends), strict=True):
        if b - a > LOOP_UNIT_WORDS or norm[a] not in primed:
            break
        start, items = a, items + 1
    if not items:
        return n
    listed = [p for p in phrases if p]
    # The first of those items is a phrase of the prompt, with more items after it...
    if items >= 2 and any(tuple(norm[start : start + len(p)]) == p for p in listed):
        return start
    # ... or a phrase of the prompt closes the item before them ("table dining table,").
    before = [
        len(p) for p in listed if len(p) <= start and tuple(norm[start - len(p) : start]) == p
    ]
    return start - max(before) if before else n
