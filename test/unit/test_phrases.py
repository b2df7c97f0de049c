"""Tier 1 tests of omniflow.core.phrases.PhraseChunker (pure Python, no ROS)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from omniflow.core.phrases import _GLUED, PHRASE_REASONS, Phrase, PhraseChunker
from omniflow.errors import ConfigError

NO_BUDGET = math.inf


def run(
    deltas: list[str], chunker: PhraseChunker | None = None, finish: bool = True
) -> list[tuple[str, str]]:
    """Feed the deltas (all at t=0, so no time budget fires) and return (text, reason)s."""
    chunker = chunker or PhraseChunker()
    phrases: list[Phrase] = []
    for delta in deltas:
        phrases += chunker.feed(delta, 0.0)
    if finish:
        phrases += chunker.finish()
    return [(p.text, p.reason) for p in phrases]


def tokens(text: str) -> list[str]:
    """Split text the way an LLM streams it: words with their leading space, cut mid-word."""
    pieces = []
    for i, word in enumerate(text.split(" ")):
        word = word if i == 0 else " " + word
        pieces += [word[:3], word[3:]] if len(word) > 3 else [word]
    return [piece for piece in pieces if piece]


# ------------------------------------------------------------------ first phrase


@pytest.mark.parametrize(
    ("text", "expected_first"),
    [
        # a comma once there are first_min_words (2) words
        ("Well, sure thing, I can do that for you", ("Well, sure thing,", "clause")),
        ("Of course, the red box is yours", ("Of course,", "clause")),
        ("Yes; that one", ("Yes; that one", "end")),
        # first_max_words (6) without punctuation
        ("I think the red box is on the table", ("I think the red box is", "first_words")),
        # a sentence end wins at once, even after one word
        ("Yes. The red box is on the table", ("Yes.", "sentence")),
        ("Hi! How are you", ("Hi!", "sentence")),
        ('He said "Stop!" and left', ('He said "Stop!"', "sentence")),
        ("Really? Yes", ("Really?", "sentence")),
        ("Well… maybe not", ("Well…", "sentence")),
        # a line break ends a phrase (lists, headings)
        ("Ingredients\n- two eggs", ("Ingredients", "sentence")),
        # CJK marks end a phrase without whitespace after them
        ("你好。我是机器人", ("你好。", "sentence")),
        ("好的！走吧", ("好的！", "sentence")),
    ],
)
def test_first_phrase_is_released_early(text: str, expected_first: tuple[str, str]) -> None:
    assert run(tokens(text))[0] == expected_first


def test_first_phrase_waits_for_the_whitespace_after_the_last_word() -> None:
    chunker = PhraseChunker(first_max_words=3)
    assert chunker.feed("one two thr", 0.0) == []
    assert chunker.feed("ee", 0.0) == []  # "three" could still go on: "threefold"
    assert chunker.feed(" ", 0.0) == [Phrase("one two three", 0, "first_words")]


@pytest.mark.parametrize(
    ("deltas_at", "poll_at", "expected"),
    [
        # budget expired at a poll: the complete words go, the partial word stays
        ([("Let me th", 0.0)], 0.35, [("Let me", "time_budget")]),
        ([("Let me th", 0.0)], 0.34, []),
        # nothing complete yet: wait even after the budget
        ([("Supercalifragil", 0.0)], 1.0, []),
        # the budget counts from the first token with text, not from whitespace
        ([(" ", 0.0), ("Okay then", 0.5)], 0.84, []),
        ([(" ", 0.0), ("Okay then", 0.5)], 0.9, [("Okay", "time_budget")]),
    ],
)
def test_time_budget_releases_the_first_phrase_through_poll(
    deltas_at: list[tuple[str, float]], poll_at: float, expected: list[tuple[str, str]]
) -> None:
    chunker = PhraseChunker(first_max_wait_s=0.35)
    for delta, at in deltas_at:
        assert chunker.feed(delta, at) == []
    assert [(p.text, p.reason) for p in chunker.poll(poll_at)] == expected


def test_time_budget_also_fires_when_a_late_token_arrives() -> None:
    chunker = PhraseChunker(first_max_wait_s=0.35)
    assert chunker.feed("Let", 0.0) == []
    assert chunker.feed(" me", 0.5) == [Phrase("Let", 0, "time_budget")]


def test_time_budget_only_applies_to_the_first_phrase() -> None:
    chunker = PhraseChunker(first_max_wait_s=0.35)
    assert [p.text for p in chunker.feed("Yes. And then", 0.0)] == ["Yes."]
    assert chunker.poll(10.0) == []
    assert chunker.finish() == [Phrase("And then", 1, "end")]


# ------------------------------------------------------------------ where not to split


@pytest.mark.parametrize(
    "text",
    [
        "It costs 3.5 dollars and weighs 2.25 kilos",
        "Bring fruit, e.g. apples and pears",
        "Bring fruit, i.e. apples",
        "Ask Dr. Smith or Mr. Jones now",
        "Mrs. Brown and Prof. Green came",
        "apples, pears, etc. and more",
        "The U.S. team won at 5 p.m. today",
        "Written by J. R. R. Tolkien long ago",
        "Visit example.com today please",
        "Version 1.2.3 is out",
    ],
)
def test_abbreviations_and_numbers_do_not_end_a_sentence(text: str) -> None:
    chunker = PhraseChunker(
        first_min_words=25, first_max_words=25, min_words=25, max_words=25, first_clause_words=25
    )
    assert run(tokens(text), chunker) == [(text, "end")]


@pytest.mark.parametrize(
    ("text", "first"),
    [
        ("It is a red cup that holds coffee.", ("It is a red cup", "clause_opener")),
        ("I can see a cat and a dog.", ("I can see a cat", "clause_opener")),
        ("Yes and no.", ("Yes and no.", "sentence")),  # too short to split
        ("The cup is red.", ("The cup is red.", "sentence")),
        ("Cats and dogs are friends.", ("Cats and dogs are friends.", "sentence")),
    ],
)
def test_the_first_phrase_may_end_before_a_clause_opener(text: str, first) -> None:
    assert run(tokens(text))[0] == first


def test_only_the_first_phrase_ends_before_a_clause_opener() -> None:
    text = "It is a red cup. It holds hot coffee and tea for you."
    assert [reason for _, reason in run(tokens(text))] == ["sentence", "sentence"]


def test_a_number_opening_a_list_item_is_not_a_sentence() -> None:
    text = "Steps:\n1. Buy milk\n2. Drink it."
    assert run(tokens(text)) == [
        ("Steps:", "sentence"),
        ("1. Buy milk", "sentence"),
        ("2. Drink it.", "sentence"),
    ]


def test_a_number_ending_a_sentence_still_ends_it() -> None:
    assert run(tokens("I was born in 1990. Then I grew")) == [
        ("I was born in 1990.", "sentence"),
        ("Then I grew", "end"),
    ]


def test_a_decimal_split_across_tokens_stays_whole() -> None:
    assert run(["It is 3", ".", "5", " metres", " long"]) == [("It is 3.5 metres long", "end")]


@pytest.mark.parametrize(
    "deltas", [["hel", "lo", " wor", "ld."], ["h", "e", "l", "l", "o", " ", "world", "."]]
)
def test_tokens_cut_mid_word_are_joined(deltas: list[str]) -> None:
    assert run(deltas) == [("hello world.", "sentence")]


def test_a_later_sentence_mark_needs_whitespace_or_the_end_of_the_turn() -> None:
    chunker = PhraseChunker()
    assert chunker.feed("Hi there. Bye.", 0.0) == [Phrase("Hi there.", 0, "sentence")]
    assert chunker.feed(" Now", 0.0) == [Phrase("Bye.", 1, "sentence")]
    assert chunker.feed(" go.", 0.0) == []
    assert chunker.finish() == [Phrase("Now go.", 2, "sentence")]


@pytest.mark.parametrize("deltas", [["This", " is", " a", " cup", "."], ["No", "."], ["Yes!"]])
def test_the_first_sentence_goes_out_with_its_mark(deltas: list[str]) -> None:
    """The first phrase does not wait for the token after its full stop (the line break
    that ends the answer): the robot starts speaking one token sooner."""
    chunker = PhraseChunker()
    released = [chunker.feed(delta, 0.0) for delta in deltas]
    assert released[-1] == [Phrase("".join(deltas), 0, "sentence")]
    assert not any(released[:-1])
    assert chunker.finish() == []


def test_without_first_at_mark_the_first_sentence_waits_for_what_follows() -> None:
    chunker = PhraseChunker(first_at_mark=False)
    assert [chunker.feed(delta, 0.0) for delta in ["This", " is", " a", " cup", "."]] == [[]] * 5
    assert chunker.finish() == [Phrase("This is a cup.", 0, "sentence")]


@pytest.mark.parametrize(
    ("deltas", "expected"),
    [
        # what is glued to the mark by the next tokens is dropped, the words go on
        (
            ['He said "Stop!', '"', " and left"],
            [('He said "Stop!', "sentence"), ("and left", "end")],
        ),
        (["It is red.", ")", " Then"], [("It is red.", "sentence"), ("Then", "end")]),
        (["Well.", "..", " maybe"], [("Well.", "sentence"), ("maybe", "end")]),
        # a letter after the mark is the next phrase's word, never lost
        (["Go to example.", "com", " now"], [("Go to example.", "sentence"), ("com now", "end")]),
        # not at once: a number, an abbreviation, an initial
        (["It is 3.", "5 metres"], [("It is 3.5 metres", "end")]),
        (["Ask Dr.", " Smith."], [("Ask Dr. Smith.", "sentence")]),
        (["J.", " R. R. Tolkien"], [("J. R. R. Tolkien", "end")]),
    ],
)
def test_a_first_sentence_mark_at_the_end_of_a_token(
    deltas: list[str], expected: list[tuple[str, str]]
) -> None:
    assert run(deltas) == expected


# ------------------------------------------------------------------ later phrases


def test_later_phrases_end_at_sentences_and_long_clauses_only() -> None:
    text = "Sure. The box, so, is red and it sits on the table, right next to the lamp. Okay, bye"
    assert run(tokens(text)) == [
        ("Sure.", "sentence"),
        # "The box," and "The box, so," are shorter than min_words (4): no cut there
        ("The box, so, is red and it sits on the table,", "clause"),
        ("right next to the lamp.", "sentence"),
        ("Okay, bye", "end"),
    ]


@pytest.mark.parametrize("mark", [",", ";", ":", " —", " -", "，"])
def test_clause_marks(mark: str) -> None:
    text = f"Yes. one two three four{mark} five six"
    first, second, third = run([text])
    assert second == (f"one two three four{mark}", "clause")
    assert third == ("five six", "end")


def test_max_words_caps_a_phrase_at_a_word_boundary() -> None:
    chunker = PhraseChunker(first_max_words=3, max_words=5)
    words = [f"w{i}" for i in range(14)]
    assert run(tokens(" ".join(words)), chunker) == [
        ("w0 w1 w2", "first_words"),
        ("w3 w4 w5 w6 w7", "max_words"),
        ("w8 w9 w10 w11 w12", "max_words"),
        ("w13", "end"),
    ]


def test_whitespace_is_normalised_and_indices_count_up() -> None:
    chunker = PhraseChunker()
    phrases = chunker.feed("  Hello,\t\tdear   friend!\n\nHow  are\nyou", 0.0) + chunker.finish()
    assert [(p.text, p.index) for p in phrases] == [
        ("Hello, dear friend!", 0),
        ("How are", 1),
        ("you", 2),
    ]


# ------------------------------------------------------------------ finish, reset


def test_finish_flushes_and_starts_a_new_turn() -> None:
    chunker = PhraseChunker()
    assert chunker.feed("The red bo", 0.0) == []
    assert chunker.pending_text == "The red bo"
    assert chunker.finish() == [Phrase("The red bo", 0, "end")]
    assert chunker.pending_text == ""
    assert chunker.finish() == []
    assert chunker.feed("Next. ", 5.0) == [Phrase("Next.", 0, "sentence")]


def test_finish_still_applies_the_cap_to_the_rest() -> None:
    chunker = PhraseChunker(first_min_words=1, first_max_words=2, min_words=2, max_words=3)
    assert [p.text for p in chunker.feed("a b c d e f g", 0.0) + chunker.finish()] == [
        "a b",
        "c d e",
        "f g",
    ]


def test_finish_with_only_whitespace_returns_nothing() -> None:
    chunker = PhraseChunker()
    assert chunker.feed(" \n ", 0.0) == []
    assert chunker.finish() == []


def test_reset_drops_pending_text_and_restarts_indices_and_budget() -> None:
    chunker = PhraseChunker(first_max_wait_s=0.35)
    assert [p.index for p in chunker.feed("One. Two three", 0.0)] == [0]
    chunker.reset()
    assert chunker.pending_text == ""
    assert chunker.phrases_released == 0
    assert chunker.poll(100.0) == []  # no first token in the new turn yet
    assert chunker.feed("Again now", 200.0) == []
    assert chunker.poll(200.5) == [Phrase("Again", 0, "time_budget")]


# ------------------------------------------------------------------ configuration


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"first_min_words": 0}, "first_min_words must be an integer >= 1"),
        ({"min_words": 2.5}, "min_words must be an integer >= 1"),
        ({"max_words": True}, "max_words must be an integer >= 1"),
        ({"first_min_words": 7, "first_max_words": 6}, "first_max_words"),
        ({"min_words": 30}, "max_words"),
        ({"first_max_words": 30}, "max_words"),
        ({"first_max_wait_s": -0.1}, "first_max_wait_s"),
        ({"first_max_wait_s": math.nan}, "first_max_wait_s"),
        ({"first_max_wait_s": "fast"}, "first_max_wait_s"),
        ({"first_at_mark": 1}, "first_at_mark must be true or false"),
    ],
)
def test_invalid_configuration_is_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        PhraseChunker(**kwargs)  # type: ignore[arg-type]


def test_zero_wait_releases_the_first_complete_word() -> None:
    chunker = PhraseChunker(first_max_wait_s=0.0)
    assert chunker.feed("Hmm let", 0.0) == [Phrase("Hmm", 0, "time_budget")]


# ------------------------------------------------------------------ properties

_WORDS = st.sampled_from(
    [
        "the",
        "red",
        "box",
        "Hello",
        "world",
        "3.5",
        "e.g.",
        "Dr.",
        "etc.",
        "U.S.",
        "1.",
        "yes.",
        "no!",
        "why?",
        "well…",
        "ok,",
        "and;",
        "so:",
        "—",
        "-",
        '"Stop!"',
        "(see",
        "it.)",
        "a",
        "I",
        "x,y",
        "...",
        "🙂",
        "naïve",
        "über.",
    ]
)
_SPACES = st.sampled_from([" ", " ", " ", "  ", "\n", "\t", " \n\n "])


@st.composite
def streamed_text(
    draw: st.DrawFn,
    words: st.SearchStrategy[str] = _WORDS,
    spaces: st.SearchStrategy[str] = _SPACES,
) -> tuple[str, list[str]]:
    """A text made of words and separators, and a random split of it into deltas."""
    parts = draw(st.lists(st.tuples(spaces, words), max_size=60))
    text = draw(_SPACES | st.just("")) + "".join(space + word for space, word in parts)
    text += draw(_SPACES | st.just(""))
    cuts = sorted(draw(st.sets(st.integers(0, len(text)), max_size=30)))
    deltas = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    return text, deltas


def unglued(words: list[str]) -> list[str]:
    """The words without the closers and marks that may follow a sentence mark: a first
    phrase released at its mark drops what the next tokens glue to it."""
    return [core for word in words if (core := word.rstrip(_GLUED))]


def chunker_settings() -> st.SearchStrategy[PhraseChunker]:
    return st.builds(
        lambda fmin, fextra, wait, mn, extra: PhraseChunker(
            first_min_words=fmin,
            first_max_words=fmin + fextra,
            first_max_wait_s=wait,
            min_words=mn,
            max_words=max(mn, fmin + fextra) + extra,
        ),
        st.integers(1, 4),
        st.integers(0, 6),
        st.sampled_from([0.0, 0.1, 0.35, math.inf]),
        st.integers(1, 8),
        st.integers(0, 20),
    )


def stream(chunker: PhraseChunker, deltas: list[str], times: list[float]) -> list[Phrase]:
    phrases: list[Phrase] = []
    for delta, now in zip(deltas, times, strict=False):
        phrases += chunker.feed(delta, now)
        phrases += chunker.poll(now + 0.05)
    return phrases + chunker.finish()


@settings(max_examples=300, deadline=None)
@given(streamed_text(), chunker_settings(), st.lists(st.floats(0, 0.3), min_size=100, max_size=100))
def test_phrases_keep_every_word_in_order(
    sample: tuple[str, list[str]], chunker: PhraseChunker, gaps: list[float]
) -> None:
    text, deltas = sample
    times = [sum(gaps[:i]) for i in range(len(deltas))]
    phrases = stream(chunker, deltas, times)
    assert unglued([word for p in phrases for word in p.text.split()]) == unglued(text.split())
    assert all(p.text and p.text == " ".join(p.text.split()) for p in phrases)
    assert [p.index for p in phrases] == list(range(len(phrases)))
    assert all(p.reason in PHRASE_REASONS for p in phrases)
    assert all(len(p.text.split()) <= chunker.max_words for p in phrases)


@settings(max_examples=200, deadline=None)
@given(streamed_text())
def test_without_time_budget_the_split_into_deltas_does_not_matter(
    sample: tuple[str, list[str]],
) -> None:
    text, deltas = sample
    assert [unglued(p.split()) for p, _ in run(deltas)] == [
        unglued(p.split()) for p, _ in run([text])
    ]


_CJK_WORDS = st.sampled_from(["你好。", "我是", "机器人，", "好的！」", "吗？", "、", "abc", "1.5"])


@settings(max_examples=200, deadline=None)
@given(streamed_text(_CJK_WORDS | _WORDS, spaces=_SPACES | st.just("")))  # CJK: no spaces
def test_cjk_marks_may_split_a_run_but_never_lose_or_repeat_a_character(
    sample: tuple[str, list[str]],
) -> None:
    text, deltas = sample
    phrases = [("".join(t.split()), reason) for t, reason in run(deltas)]
    said, written = "".join(t for t, _ in phrases), "".join(text.split())
    if said != written:  # only what was glued to a first phrase's mark may be missing
        first = phrases[0][0]
        dropped = written[len(first) : len(written) - len(said) + len(first)]
        assert said.startswith(first) and written.startswith(first)
        assert written.endswith(said[len(first) :]) and dropped.strip(_GLUED) == ""
    assert all(t for t, _ in phrases)
