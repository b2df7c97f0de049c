"""The llama.cpp backend on a tiny random-weight GGUF: load, stream, cancel, reuse, overflow."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
from tiny_gguf import write_tiny_gguf

from omniflow.core.prompt import Prompt, PromptFormat, Turn
from omniflow.engines.llm import (
    LLM_BACKENDS,
    LLM_PARAMS,
    GenerationStats,
    LlamaCppBackend,
    MiniCpmVBackend,
    RemoteBackend,
    Sampling,
    StopFilter,
    chat_messages,
    check_gguf,
    make_backend,
)
from omniflow.engines.llm.llamacpp import probability_of
from omniflow.engines.model_worker import ModelWorker, warm_up
from omniflow.errors import ConfigError, EngineError

pytest.importorskip("llama_cpp")  # the OpenMP wait policy is set first: test/conftest.py

NO_STOP = PromptFormat(stop=())
SYSTEM = "You are a small robot."


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("llm") / "tiny.gguf")


def _backend(
    path: Path,
    *,
    n_ctx: int = 1024,
    max_tokens: int = 24,
    prompt_chunk: int = 16,
    fmt: PromptFormat = NO_STOP,
) -> LlamaCppBackend:
    backend = LlamaCppBackend(
        path,
        n_ctx=n_ctx,
        threads=1,
        seed=7,
        fmt=fmt,
        sampling=Sampling(temperature=0.0, max_tokens=max_tokens, prompt_chunk=prompt_chunk),
    )
    backend.load()
    return backend


@pytest.fixture
def backend(tiny_path: Path) -> LlamaCppBackend:
    b = _backend(tiny_path)
    yield b
    b.close()


def _run(backend: LlamaCppBackend, prompt: Prompt, **kwargs) -> tuple[str, GenerationStats]:
    text = "".join(backend.generate(prompt, cancel=threading.Event(), **kwargs))
    assert backend.last_stats is not None
    return text, backend.last_stats


class CancelAfter(threading.Event):
    """An event that reads as set from its n-th check on: cancellation at a known point."""

    def __init__(self, checks: int) -> None:
        super().__init__()
        self.checks = 0
        self._limit = checks

    def is_set(self) -> bool:
        self.checks += 1
        return self.checks >= self._limit or super().is_set()


def test_load_close_and_load_again(tiny_path: Path) -> None:
    backend = LlamaCppBackend(tiny_path, n_ctx=256, threads=1)
    assert not backend.loaded
    backend.load()
    assert backend.loaded and backend.model_path == tiny_path
    backend.close()
    assert not backend.loaded
    with pytest.raises(EngineError, match="not loaded"):
        backend.generate(Prompt(SYSTEM, user="hi"), cancel=threading.Event())
    backend.load()
    text, _ = _run(backend, Prompt(SYSTEM, user="hi"), max_tokens=3)
    assert text
    backend.close()


def test_streams_deltas_and_fills_stats(backend: LlamaCppBackend) -> None:
    deltas = list(
        backend.generate(
            Prompt(SYSTEM, user="hello robot"), cancel=threading.Event(), max_tokens=20
        )
    )
    stats = backend.last_stats
    assert len(deltas) > 1 and all(deltas)
    assert stats.generated_tokens == 20 and stats.stop_reason == "length"
    assert stats.prompt_tokens == stats.evaluated_tokens + stats.reused_tokens
    assert stats.prompt_tokens == backend.count_tokens(
        NO_STOP.render(Prompt(SYSTEM, user="hello robot"))
    )
    assert 0 < stats.first_token_s <= stats.total_s
    assert not stats.cancelled and stats.turns_dropped == 0


def test_stop_strings_never_appear_in_the_output(tiny_path: Path) -> None:
    prompt = Prompt(SYSTEM, user="what is this red box")
    plain = _backend(tiny_path, max_tokens=40)
    text, _ = _run(plain, prompt)
    plain.close()
    stop = text[10:13]  # a string the greedy answer is known to contain
    stopped = _backend(tiny_path, max_tokens=40, fmt=PromptFormat(stop=(stop, "\x00")))
    cut, stats = _run(stopped, prompt)
    stopped.close()
    assert stop not in cut
    assert cut == text[: text.find(stop)]
    assert stats.stop_reason == "stop"


def test_cancel_mid_generation_stops_within_one_token(backend: LlamaCppBackend) -> None:
    cancel = threading.Event()
    received = []
    for delta in backend.generate(Prompt(SYSTEM, user="hello"), cancel=cancel, max_tokens=500):
        received.append(delta)
        if len(received) == 3:
            cancel.set()
            tokens_at_cancel = backend.last_stats.generated_tokens
    stats = backend.last_stats
    assert len(received) == 3  # nothing after the cancel
    assert stats.cancelled and stats.stop_reason == "cancelled"
    assert stats.generated_tokens <= tokens_at_cancel + 1


def test_cancel_during_a_long_prompt_stops_within_one_chunk(tiny_path: Path) -> None:
    backend = _backend(tiny_path, n_ctx=4096, prompt_chunk=16)
    prompt = Prompt(SYSTEM, user="the red box " * 150)  # char-level vocab: ~1800 tokens
    cancel = CancelAfter(4)  # checks 1-3 pass: 3 chunks evaluated, then cancelled
    deltas = list(backend.generate(prompt, cancel=cancel))
    stats = backend.last_stats
    backend.close()
    assert deltas == []
    assert stats.cancelled and stats.generated_tokens == 0
    assert stats.prompt_tokens > 1000
    assert stats.evaluated_tokens == 3 * 16


def test_second_generate_evaluates_only_the_new_tail(backend: LlamaCppBackend) -> None:
    first = Prompt(SYSTEM, user="hello robot")
    answer, _ = _run(backend, first)
    again, stats = _run(backend, first)
    assert again == answer  # greedy, same prompt: the reused cache gives the same answer
    assert stats.evaluated_tokens == 1 and stats.reused_tokens == stats.prompt_tokens - 1
    # Next turn: the history grows at its end, so system + old turn stay cached.
    second = Prompt(
        SYSTEM, history=(Turn("user", "hello robot"), Turn("robot", answer)), user="what is this"
    )
    _, stats = _run(backend, second)
    warm_part = backend.count_tokens(NO_STOP.render(first, open_turn=False))
    assert stats.reused_tokens >= warm_part
    assert stats.evaluated_tokens == stats.prompt_tokens - stats.reused_tokens
    # A new scene costs only the tokens from the scene on: the history stays warm.
    third = Prompt(
        SYSTEM, history=second.history, scene="a red box on a table", user="what is this"
    )
    _, stats = _run(backend, third)
    assert stats.reused_tokens >= backend.count_tokens(
        NO_STOP.render(Prompt(SYSTEM, history=second.history), open_turn=False)
    )


def test_the_first_token_is_sampled_from_the_prompts_last_decode(tiny_path: Path) -> None:
    prompt = Prompt(SYSTEM, user="what is this")
    fresh = _backend(tiny_path)
    expected, _ = _run(fresh, prompt)
    fresh.close()
    backend = _backend(tiny_path)
    backend.warm(prompt)  # the user's words cached, "Robot:" not
    llm, decoded = backend.llama, []
    evaluate = llm.eval
    llm.eval = lambda tokens: (decoded.append(len(tokens)), evaluate(tokens))[1]
    answer, stats = _run(backend, prompt)
    backend.close()
    assert answer == expected
    decodes = [n for n in decoded if n]
    # The prompt's tail in one decode (it is shorter than prompt_chunk), then one decode per
    # generated token but the last: the prompt's last token is not decoded a second time.
    assert decodes[0] == stats.evaluated_tokens == stats.prompt_tokens - stats.reused_tokens
    assert decodes[1:] == [1] * (stats.generated_tokens - 1)


def test_the_warm_up_leaves_the_system_text_cached_for_the_first_turn(tiny_path: Path) -> None:
    backend = _backend(tiny_path)
    warm_up(backend, SYSTEM)
    _, stats = _run(backend, Prompt(SYSTEM, user="what is this"))
    assert stats.reused_tokens >= backend.count_tokens(NO_STOP.render(Prompt(SYSTEM))) - 1


def test_warm_feeds_the_growing_user_text(backend: LlamaCppBackend) -> None:
    words = ["what", "is", "this", "red", "box"]
    evaluated = []
    for n in range(1, len(words) + 1):
        evaluated.append(backend.warm(Prompt(SYSTEM, user=" ".join(words[:n]))))
    assert evaluated[0] > 0
    # Each later call evaluates about its new word only (char-level vocabulary here).
    for n in range(1, len(words)):
        assert evaluated[n] <= len(words[n]) + 2
    assert backend.warm(Prompt(SYSTEM, user=" ".join(words))) == 0  # nothing new
    final = Prompt(SYSTEM, user=" ".join(words))
    _, stats = _run(backend, final)
    tail = stats.prompt_tokens - backend.count_tokens(NO_STOP.render(final, open_turn=False))
    assert stats.evaluated_tokens == tail  # only "\nRobot:" was left to evaluate


def test_the_end_of_turn_score_reuses_the_warm_and_matches_a_fresh_one(tiny_path: Path) -> None:
    backend = _backend(tiny_path)
    fresh = _backend(tiny_path)
    try:
        text = "what is this"
        expected = fresh.turn_end_probability(Prompt(SYSTEM, user=text))
        assert 0.0 < expected < 1.0
        backend.warm(Prompt(SYSTEM, user="what is"))
        assert backend.turn_end_probability(Prompt(SYSTEM, user=text)) == pytest.approx(
            expected, rel=1e-3
        )
        # Words the warm evaluated last are scored from what it kept: nothing is evaluated.
        backend.warm(Prompt(SYSTEM, user="what is this red"))
        cached = backend.llama.n_tokens
        backend.turn_end_probability(Prompt(SYSTEM, user="what is this red"))
        assert backend.llama.n_tokens == cached
        # A prefix of what the cache holds: its last token is evaluated again for its logits.
        assert backend.turn_end_probability(Prompt(SYSTEM, user=text)) == pytest.approx(
            expected, rel=1e-3
        )
        cancel = threading.Event()
        cancel.set()
        backend.reset()
        assert backend.turn_end_probability(Prompt(SYSTEM, user="and that"), cancel) is None
    finally:
        backend.close()
        fresh.close()


def _scored_and_answered(path: Path, prompt: Prompt) -> tuple[float | None, str]:
    """The end-of-turn score and the answer of ``prompt`` from a backend that saw nothing else."""
    fresh = _backend(path)
    try:
        return fresh.turn_end_probability(prompt), _run(fresh, prompt)[0]
    finally:
        fresh.close()


def test_a_turn_scored_then_answered_samples_its_first_token_at_once(tiny_path: Path) -> None:
    prompt = Prompt(SYSTEM, user="what is this")
    expected_score, expected = _scored_and_answered(tiny_path, prompt)
    backend = _backend(tiny_path)
    try:
        backend.warm(Prompt(SYSTEM, user="what is"))
        llm, decoded, batches = backend.llama, [], []
        evaluate, decode = llm.eval, llm._ctx.decode
        llm.eval = lambda tokens: (decoded.append(len(tokens)), evaluate(tokens))[1]
        llm._ctx.decode = lambda batch: (batches.append(batch.n_tokens()), decode(batch))[1]
        assert backend.turn_end_probability(prompt) == pytest.approx(expected_score, rel=1e-3)
        # The words since the warm and "\nRobot:" in one decode
        count = backend.count_tokens
        new = count(NO_STOP.render(prompt, open_turn=False)) - count(
            NO_STOP.render(Prompt(SYSTEM, user="what is"), open_turn=False)
        )
        tail = count(NO_STOP.render(prompt)) - count(NO_STOP.render(prompt, open_turn=False))
        assert new > 1 and tail > 1 and batches == [new + tail]
        decoded.clear()
        answer, stats = _run(backend, prompt)
        assert answer == expected
        # The score decoded "\nRobot:" with the last word: nothing is decoded before the
        # first token, then one decode per generated token but the last.
        assert stats.reused_tokens == stats.prompt_tokens and stats.evaluated_tokens == 0
        assert [n for n in decoded if n] == [1] * (stats.generated_tokens - 1)
        # Anything decoded between the score and the turn: the prompt's last token again.
        backend.turn_end_probability(prompt)
        backend.warm(Prompt(SYSTEM, user="what is this red"))
        again, stats = _run(backend, prompt)
        assert again == expected and stats.evaluated_tokens >= 1
    finally:
        backend.close()


def test_a_llama_cpp_python_without_its_batch_internals_still_scores(
    tiny_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prompt = Prompt(SYSTEM, user="what is this")
    expected_score, expected = _scored_and_answered(tiny_path, prompt)
    backend = _backend(tiny_path)

    def missing(*_args: object) -> None:
        raise AttributeError("'Llama' object has no attribute '_batch'")

    monkeypatch.setattr(backend, "_decode_scored", missing)
    try:
        assert backend.turn_end_probability(prompt) == pytest.approx(expected_score, rel=1e-3)
        answer, stats = _run(backend, prompt)
        assert answer == expected and stats.evaluated_tokens >= 1  # the opening decoded now
    finally:
        backend.close()


def test_a_long_stretch_of_new_words_is_scored_in_decodes_that_fit_the_batch(
    tiny_path: Path,
) -> None:
    prompt = Prompt(SYSTEM, user="the red box " * 60)  # char-level vocabulary: 720 tokens
    fresh = _backend(tiny_path, n_ctx=2048)
    expected = fresh.turn_end_probability(prompt)
    fresh.close()
    backend = _backend(tiny_path, n_ctx=2048, prompt_chunk=512)  # llm.prompt_chunk's maximum
    try:
        assert backend.turn_end_probability(prompt) == pytest.approx(expected, rel=1e-3)
    finally:
        backend.close()


@pytest.mark.parametrize("takeover", ["whole", "midway"])
def test_an_answer_taken_over_from_ahead_is_the_answer_generated_for_the_turn(
    tiny_path: Path, takeover: str
) -> None:
    """The model worker's answer ahead on a real model: the turn that takes it over gets
    exactly what generating its prompt gives (greedy), while the cache holds the answer."""
    backend = _backend(tiny_path)
    fresh = _backend(tiny_path)
    lock = threading.RLock()
    pieces: list[str] = []
    done = threading.Event()
    worker = ModelWorker(
        lock,
        on_delta=lambda job, index, text: pieces.append(text),
        on_done=lambda job, count, error: done.set(),
        on_warning=pytest.fail,
    )
    worker.attach(backend)
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    thread.start()
    try:
        prompt = Prompt(SYSTEM, scene="a red cup", user="what is this")
        expected, _ = _run(fresh, prompt)
        assert expected
        if takeover == "midway":  # pieces 20 ms apart: the turn starts while they come
            generate = backend.generate

            def slowly(*args, **kwargs):
                for piece in generate(*args, **kwargs):
                    time.sleep(0.02)
                    yield piece

            backend.generate = slowly
        worker.warm(Prompt(SYSTEM, scene="a red cup", user="what is"))
        worker.answer_ahead(prompt)
        deadline = time.monotonic() + 10
        while worker.stats.answers_ahead == 0 and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(0.1)
        worker.submit(1, prompt, 0)
        assert done.wait(30)
        assert "".join(pieces) == expected
        assert worker.stats.answers_taken_over == 1
    finally:
        stop.set()
        worker.wake()
        thread.join(10)
        backend.close()
        fresh.close()


def test_probability_of_token_ids() -> None:
    logits = np.log(np.array([0.7, 0.2, 0.1], dtype=np.float32))
    assert probability_of(logits, [1, 2]) == pytest.approx(0.3)
    assert probability_of(logits, []) == 0.0


def test_warm_does_not_wait_for_a_running_generation(backend: LlamaCppBackend) -> None:
    stream = backend.generate(Prompt(SYSTEM, user="hi"), cancel=threading.Event())
    next(stream)  # the generation holds the model now
    assert backend.warm(Prompt(SYSTEM, user="hello")) == 0
    stream.close()
    assert backend.warm(Prompt(SYSTEM, user="hello")) > 0


def test_a_long_warm_gives_way_to_generate_within_one_chunk(tiny_path: Path) -> None:
    backend = _backend(tiny_path, n_ctx=4096, prompt_chunk=16)

    class GenerateArrives(threading.Event):
        """At the 3rd check between chunks, a generate() call starts waiting for the model."""

        checks = 0

        def is_set(self) -> bool:
            self.checks += 1
            if self.checks == 3:
                backend._generate_waiting.set()
            return False

    evaluated = backend.warm(Prompt(SYSTEM, user="the red box " * 150), cancel=GenerateArrives())
    backend._generate_waiting.clear()
    backend.close()
    assert evaluated == 2 * 16


def test_generate_while_another_thread_warms(tiny_path: Path) -> None:
    backend = _backend(tiny_path, n_ctx=4096, prompt_chunk=8)
    warmed: list[int] = []
    thread = threading.Thread(
        target=lambda: warmed.append(backend.warm(Prompt(SYSTEM, user="the red box " * 150)))
    )
    thread.start()
    text, stats = _run(backend, Prompt(SYSTEM, user="hello"), max_tokens=8)
    thread.join(timeout=60)
    backend.close()
    assert not thread.is_alive() and len(warmed) == 1
    assert text and stats.generated_tokens == 8


def test_a_prompt_longer_than_the_context_drops_the_oldest_turns(tiny_path: Path) -> None:
    backend = _backend(tiny_path, n_ctx=256, max_tokens=16)
    history = tuple(
        Turn("user" if i % 2 == 0 else "robot", f"turn number {i} about a box") for i in range(40)
    )
    prompt = Prompt(SYSTEM, history=history, user="what is this")
    text, stats = _run(backend, prompt)
    assert text and stats.turns_dropped > 0
    assert stats.prompt_tokens + 16 <= 256
    assert prompt.history == history and len(prompt.history) == 40  # not mutated
    # Even a user text that alone is longer than the context: its last words are kept.
    text, stats = _run(backend, Prompt(SYSTEM, user="box " * 400 + "the end"))
    assert text and stats.prompt_tokens + 16 <= 256
    backend.close()


def test_threads_and_sampling_change_without_reload(backend: LlamaCppBackend) -> None:
    assert backend.llama.n_threads == 1
    backend.update({"llm.threads": 2, "llm.max_tokens": 5, "llm.prompt_chunk": 4})
    text, stats = _run(backend, Prompt(SYSTEM, user="hi"))
    assert stats.generated_tokens == 5 and text
    assert backend.llama.n_threads == backend.llama.n_threads_batch == 2  # llama.cpp's context
    with pytest.raises(ConfigError, match="llm.threads"):
        backend.update({"llm.threads": 0})


@pytest.mark.parametrize(
    "content, match",
    [
        (None, "does not exist"),
        (b"", "is empty"),
        (b"hello, this is a text file\n", "is not a GGUF file"),
        (b"GGUF\x03\x00", "truncated"),
    ],
)
def test_bad_model_files_get_a_clear_error(
    tmp_path: Path, content: bytes | None, match: str
) -> None:
    path = tmp_path / "model.gguf"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(EngineError, match=match) as info:
        LlamaCppBackend(path).load()
    assert str(path) in str(info.value)


def test_a_truncated_model_gets_a_clear_error(tiny_path: Path, tmp_path: Path) -> None:
    path = tmp_path / "cut.gguf"
    path.write_bytes(tiny_path.read_bytes()[:200_000])
    with pytest.raises(EngineError, match="truncated") as info:
        LlamaCppBackend(path).load()
    assert str(path) in str(info.value)


def test_a_directory_is_not_a_model(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="not a file"):
        check_gguf(tmp_path)
    with pytest.raises(EngineError, match="no GGUF model configured"):
        check_gguf("")


@pytest.mark.parametrize(
    "stop, deltas, expected, stopped",
    [
        (("\n",), [" Hello", " there", ".\nUser"], "Hello there.", True),
        (("User:",), ["Yes", " Us", "er", ": no"], "Yes ", True),
        (("User:",), ["Yes", " Us", "ually"], "Yes Usually", False),
        (("\n\n", "###"), ["a", "\n", "b", "#", "#", "c"], "a\nb##c", False),
        (("\n",), ["\n", "  ", "Hi", "\n"], "Hi", True),
        ((), ["a", "b"], "ab", False),
    ],
)
def test_stop_filter_holds_back_possible_stop_starts(
    stop: tuple[str, ...], deltas: list[str], expected: str, stopped: bool
) -> None:
    f = StopFilter(stop)
    out = "".join(f.feed(d) for d in deltas) + f.flush()
    assert out == expected and f.stopped == stopped


def test_stop_filter_emits_text_as_soon_as_it_is_safe() -> None:
    f = StopFilter(("User:",))
    assert f.feed("Hello") == "Hello"
    assert f.feed(" U") == " "  # "U" could start "User:"
    assert f.feed("p") == "Up"


def test_make_backend_builds_what_the_parameters_select(tiny_path: Path) -> None:
    assert {spec.name.split(".")[0] for spec in LLM_PARAMS} == {"llm"}
    assert set(LLM_BACKENDS) == {"embedded", "gguf", "minicpmv", "remote"}
    gguf_backend = make_backend(
        {"llm.backend": "gguf", "llm.model_path": str(tiny_path), "llm.n_ctx": 256, "llm.seed": 1}
    )
    assert isinstance(gguf_backend, LlamaCppBackend) and gguf_backend.name == "gguf"
    gguf_backend.load()
    assert (
        "".join(
            gguf_backend.generate(Prompt(SYSTEM, user="hi"), cancel=threading.Event(), max_tokens=4)
        )
        is not None
    )
    gguf_backend.close()
    embedded = make_backend({})
    assert isinstance(embedded, LlamaCppBackend) and embedded.name == "embedded"
    assert isinstance(make_backend({"llm.backend": "minicpmv"}), MiniCpmVBackend)
    assert isinstance(make_backend({"llm.backend": "remote"}), RemoteBackend)
    with pytest.raises(ConfigError, match="allowed values"):
        make_backend({"llm.backend": "gpt"})
    with pytest.raises(EngineError, match="no GGUF model configured"):
        make_backend({"llm.backend": "gguf"}).load()
    with pytest.raises(ConfigError, match="OMNIFLOW_TEST_NO_SUCH_KEY"):
        make_backend(
            {"llm.backend": "remote", "llm.remote.api_key_env": "OMNIFLOW_TEST_NO_SUCH_KEY"}
        )


def test_minicpmv_needs_its_model_and_mmproj(tiny_path: Path, tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="MiniCPM-V model not found"):
        MiniCpmVBackend(tmp_path / "missing.gguf", tmp_path / "mmproj.gguf").load()
    with pytest.raises(EngineError, match="llm.mmproj_path"):
        MiniCpmVBackend(tiny_path, "").load()
    with pytest.raises(EngineError, match="mmproj not found") as info:
        MiniCpmVBackend(tiny_path, tmp_path / "mmproj.gguf").load()
    assert str(tmp_path / "mmproj.gguf") in str(info.value)
    with pytest.raises(EngineError, match="does not load as a vision projector") as info:
        MiniCpmVBackend(tiny_path, tiny_path, n_ctx=256).load()  # a GGUF, but no projector
    assert str(tiny_path) in str(info.value)
    not_gguf = tmp_path / "mmproj.bin"
    not_gguf.write_bytes(b"\x00" * 64)
    with pytest.raises(EngineError, match="not a GGUF file"):
        MiniCpmVBackend(tiny_path, not_gguf).load()


def test_chat_messages_carry_images_as_data_uris_and_the_scene_as_text() -> None:
    import base64

    import numpy as np

    frame = np.zeros((48, 64, 3), dtype=np.uint8)
    frame[:, :, 0] = 255  # red
    prompt = Prompt(
        SYSTEM,
        scene="a red box",
        history=(Turn("user", "hi", "a cup"), Turn("robot", "hello")),
        user="what is this?",
        images=(frame,),
    )
    messages = chat_messages(prompt)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[1]["content"] == "(You see: a cup)\nhi"  # the scene it was asked in
    assert messages[2]["content"] == "hello"
    content = messages[-1]["content"]
    assert [c["type"] for c in content] == ["image_url", "text"]
    uri = content[0]["image_url"]["url"]
    assert uri.startswith("data:image/jpeg;base64,")
    assert base64.b64decode(uri.split(",", 1)[1])[:2] == b"\xff\xd8"  # JPEG
    assert "a red box" in content[1]["text"] and "what is this?" in content[1]["text"]
    text_only = chat_messages(prompt, images=False)
    assert isinstance(text_only[-1]["content"], str) and "a red box" in text_only[-1]["content"]
    with pytest.raises(ConfigError, match="RGB uint8"):
        chat_messages(Prompt(SYSTEM, user="x", images=(np.zeros((4, 4)),)))
