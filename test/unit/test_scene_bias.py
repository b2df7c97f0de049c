"""Tier 1: which words the scene offers the recogniser, and how they are phrased."""

from __future__ import annotations

import pytest

from omniflow.core.params import defaults
from omniflow.core.scene_bias import (
    BIAS_PARAMS,
    MAX_PROMPT_CHARS,
    SceneBias,
    bias_prompt,
    parse_words,
)
from omniflow.core.timing import NS_PER_MS
from omniflow.errors import ConfigError


def test_newest_frame_first_then_older_frames_then_names():
    bias = SceneBias(names=("Ada", "kitchen"))
    words = bias.words([("cup", "dining table"), ("bottle", "cup")])
    assert words == ("cup", "dining table", "bottle", "Ada", "kitchen")


def test_each_word_once_whatever_its_case_and_spacing():
    bias = SceneBias(names=("Cup", "ada", "Ada"))
    assert bias.words([("cup", "dining  table"), ("dining table",)]) == (
        "cup",
        "dining table",
        "ada",
    )


def test_skipped_labels_never_offered_but_a_name_may_be_anything():
    bias = SceneBias(skip=("person", "TV"))
    assert bias.words([("person", "tv", "laptop")]) == ("laptop",)
    assert SceneBias(skip=()).words([("person",)]) == ("person",)


def test_at_most_max_words_the_newest_scene_first():
    bias = SceneBias(names=("Ada",), max_words=2)
    assert bias.words([("cup", "bottle", "cat")]) == ("cup", "bottle")
    assert bias.words([]) == ("Ada",)


@pytest.mark.parametrize("label", ["", "  ", "cup_2", "r2d2", "cup;", "<|endoftext|>"])
def test_labels_that_are_not_words_never_reach_the_prompt(label):
    assert SceneBias().words([(label, "cup")]) == ("cup",)


@pytest.mark.parametrize(
    ("max_words", "look_back_ns"), [(0, 0), (-1, 0), (1, -1)], ids=["zero", "negative", "back"]
)
def test_impossible_settings_are_refused(max_words, look_back_ns):
    with pytest.raises(ConfigError, match="max_words"):
        SceneBias(max_words=max_words, look_back_ns=look_back_ns)


def test_prompt_lists_the_words_or_is_none():
    assert bias_prompt(("cup", "dining table", "Ada")) == "cup, dining table, Ada"
    assert bias_prompt(()) is None


def test_prompt_keeps_whole_words_within_its_length():
    words = tuple(f"{chr(97 + i % 26)}word" for i in range(80))
    prompt = bias_prompt(words)
    assert len(prompt) <= MAX_PROMPT_CHARS
    assert all(part in words for part in prompt.split(", "))
    assert bias_prompt(("cup", "bottle"), max_chars=8) == "cup"
    assert bias_prompt(("refrigerator",), max_chars=5) is None


def test_word_lists_from_parameters():
    assert parse_words(" Ada ,, kitchen  table,", "asr.bias.words") == ("Ada", "kitchen table")
    assert parse_words("", "asr.bias.words") == ()
    assert parse_words("O'Brien, Jean-Luc, Zoë", "asr.bias.words") == ("O'Brien", "Jean-Luc", "Zoë")


@pytest.mark.parametrize("text", ["Ada; Bob", "R2-D2", "cup/bottle", "<|en|>"])
def test_a_word_list_with_a_non_word_names_it_and_the_fix(text):
    with pytest.raises(ConfigError, match=r"asr\.bias\.words: .* is not a word .*commas"):
        parse_words(text, "asr.bias.words")


def test_from_params_defaults_and_off():
    params = defaults(BIAS_PARAMS)
    assert SceneBias.from_params(params) is None  # off by default
    params["asr.bias.enabled"] = True
    bias = SceneBias.from_params(params)
    assert bias == SceneBias(names=(), skip=("person",), look_back_ns=1000 * NS_PER_MS)
    params.update({"asr.bias.words": "Ada", "asr.bias.max_words": 3})
    assert SceneBias.from_params(params).names == ("Ada",)
    assert SceneBias.from_params(params).max_words == 3
    params["asr.bias.enabled"] = False
    assert SceneBias.from_params(params) is None


def test_from_params_names_the_bad_parameter():
    params = defaults(BIAS_PARAMS) | {"asr.bias.skip_labels": "person; tv"}
    with pytest.raises(ConfigError, match=r"asr\.bias\.skip_labels"):
        SceneBias.from_params(params)
