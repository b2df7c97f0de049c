#!/usr/bin/env python3
"""The dialogue node against raw llama-cpp-python, and how long a user waits for an answer.

Measured in one run, with the embedded Gemma 3 270M (``--model`` for another GGUF):

* ``through_node`` vs ``raw``: the same question, the same sampling (greedy) and stop strings.
  *raw* is ``llama_cpp.Llama.create_completion(stream=True)`` in this process; *node* is a
  ``converse`` goal to the dialogue node in its own process (``history.max_turns`` 0, so every
  round sends the identical prompt and both sides reuse the cached prefix). Time to the first
  non-empty piece (raw: from the call; node: from sending the goal to the first feedback
  arriving here) and decode speed (pieces - 1) / (last - first). The two alternate round by
  round so that load on the shared machine hits both alike; ratios are of the medians
  (targets: tokens/s >= 0.95, first-token overhead <= 10 ms).
* ``end_of_speech``: the user's question arrives as the fusion node sends it: a voice-activity
  start, partial transcripts word by word every ``--word-ms``, then the final transcript.
  Latency from publishing the final transcript to the first ``response`` chunk arriving here:
  ``warmed`` (partials fed to the model while the user spoke) against ``final_only`` (no
  partials: the whole question is evaluated at the end). Every round asks a different
  question, so none finds its question already in the cache.

Both processes run llama.cpp with ``--threads`` threads on one host; nothing else of omniflow
runs. A benchmark prints figures; it does not fail on a slow machine. Prints JSON; ``--json
PATH`` also writes it::

    .venv/bin/python benchmarks/dialogue.py --rounds 7 --json build/bench/dialogue.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

from _common import difference, ratio, summary, write_result

# A question the embedded model answers with a whole sentence (about 17 tokens): decode speed.
QUESTION = "Describe a sunny day at the beach."
# Spoken questions, a different one every round, so that no round finds its question cached
# from the one before.
SPOKEN = (
    "What colour is the sky on a clear day?",
    "How do plants make their food?",
    "Where do penguins live?",
    "What can you tell me about Paris?",
    "What is a robot?",
    "Why do cats like boxes?",
    "What is the capital of Spain?",
    "How many legs does a spider have?",
    "What do bees make?",
    "Which planet is the largest?",
)


def rate(times: list[float]) -> float:
    return (
        (len(times) - 1) / (times[-1] - times[0])
        if len(times) > 1 and times[-1] > times[0]
        else float("nan")
    )


class NodeClient:
    """A dialogue node in its own process and this benchmark's view of it."""

    def __init__(self, model: Path, threads: int, max_tokens: int) -> None:
        import rclpy
        from rclpy.action import ActionClient

        from omniflow.action import Converse
        from omniflow.launcher import NodeProcess, NodeSpec
        from omniflow.msg import ResponseChunk, Transcript, VoiceActivity
        from omniflow.ros.monitor import TopicRecorder, spinning
        from omniflow.ros.qos import EVENTS

        self.namespace = f"/bench{uuid.uuid4().hex[:6]}"
        self.process = NodeProcess(
            NodeSpec(
                module="omniflow.nodes.dialogue",
                name="dialogue",
                namespace=self.namespace,
                parameters={
                    "llm.backend": "gguf",
                    "llm.model_path": str(model),
                    "llm.threads": threads,
                    "llm.max_tokens": max_tokens,
                    "llm.temperature": 0.0,
                    "history.max_turns": 0,
                    "proactive.enabled": False,
                    "speech_start_timeout_s": 0.5,
                },
            )
        )
        rclpy.init()
        self.node = rclpy.create_node("dialogue_bench")
        self._spin = spinning(self.node)
        self._spin.__enter__()
        self.Converse = Converse
        self.client = ActionClient(self.node, Converse, f"{self.namespace}/converse")
        if not self.client.wait_for_server(timeout_sec=120):
            raise SystemExit(f"the dialogue node did not start:\n{self.process.output()}")
        self.chunks = TopicRecorder(self.node, ResponseChunk, f"{self.namespace}/response", EVENTS)
        self.voice = self.node.create_publisher(
            VoiceActivity, f"{self.namespace}/voice_activity", EVENTS
        )
        self.transcript = self.node.create_publisher(
            Transcript, f"{self.namespace}/transcript", EVENTS
        )
        self.Transcript, self.VoiceActivity = Transcript, VoiceActivity
        deadline = time.monotonic() + 60
        while (
            self.transcript.get_subscription_count() < 1 or self.voice.get_subscription_count() < 1
        ):
            if time.monotonic() > deadline:
                raise SystemExit("the dialogue node never subscribed")
            time.sleep(0.05)
        self._wait_idle()

    def _wait(self, future, timeout: float = 120.0):
        deadline = time.monotonic() + timeout
        while not future.done():
            if time.monotonic() > deadline:
                raise SystemExit("no answer from the dialogue node")
            time.sleep(0.001)
        return future.result()

    def _wait_idle(self) -> None:
        """Until a goal is accepted again (the previous turn has ended)."""
        time.sleep(0.6)

    def goal_round(self, question: str) -> dict[str, float]:
        arrivals: list[float] = []

        def on_feedback(message) -> None:
            if message.feedback.text_delta:
                arrivals.append(time.perf_counter())

        t0 = time.perf_counter()
        future = self.client.send_goal_async(
            self.Converse.Goal(prompt=question), feedback_callback=on_feedback
        )
        handle = self._wait(future)
        if not handle.accepted:
            raise SystemExit("goal rejected: the node is still busy")
        result = self._wait(handle.get_result_async()).result
        self._wait_idle()
        return {
            "first_token_ms": (arrivals[0] - t0) * 1e3 if arrivals else float("nan"),
            "tokens_per_s": rate(arrivals),
            "pieces": len(arrivals),
            "text": result.response,
        }

    def speech_round(self, question: str, word_s: float, partials: bool) -> float:
        """Speak ``question`` as the fusion node would; ms from the final transcript to the
        first response chunk."""
        from omniflow.ros import conversions

        utterance = int(time.monotonic() * 1000) % 2**31
        start_ns = time.time_ns()
        self.voice.publish(
            self.VoiceActivity(
                header=conversions.header(start_ns, "mic"),
                event=self.VoiceActivity.START,
                utterance_id=utterance,
                start=conversions.time_from_ns(start_ns),
                speech_s=0.1,
                echo_score=float("nan"),
            )
        )
        words = question.split()
        for i in range(1, len(words) + 1):
            time.sleep(word_s)
            if partials and i < len(words):
                self.transcript.publish(
                    self._transcript(utterance, start_ns, " ".join(words[:i]), False)
                )
        time.sleep(0.4)  # the silence that ends the utterance
        seen = len(self.chunks.messages)
        t0 = time.perf_counter()
        self.transcript.publish(self._transcript(utterance, start_ns, question, True))
        deadline = time.monotonic() + 60
        while len(self.chunks.messages) == seen:
            if time.monotonic() > deadline:
                raise SystemExit("no response chunk")
            time.sleep(0.0005)
        latency = (time.perf_counter() - t0) * 1e3
        while not any(c.is_final for c in self.chunks.messages[seen:]):
            time.sleep(0.01)
        self._wait_idle()
        return latency

    def _transcript(self, utterance: int, start_ns: int, text: str, final: bool):
        from omniflow.ros import conversions

        now = time.time_ns()
        return self.Transcript(
            header=conversions.header(now, "mic"),
            utterance_id=utterance,
            start=conversions.time_from_ns(start_ns),
            end=conversions.time_from_ns(now),
            text=text,
            confidence=float("nan"),
            is_final=final,
        )

    def close(self) -> None:
        import rclpy

        self._spin.__exit__(None, None, None)
        self.node.destroy_node()
        rclpy.try_shutdown()
        self.process.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, help="GGUF file (default: the embedded Gemma)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--word-ms", type=float, default=300.0)
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")

    from omniflow.core.prompt import DEFAULT_FORMAT, Prompt
    from omniflow.engines.llm import (
        DEFAULT_SYSTEM_PROMPT,
        LLM_PARAMS,
        embedded_model_path,
        set_openmp_wait_policy,
    )

    model = args.model or embedded_model_path()
    # llama.cpp's OpenMP wait policy as the node sets it (passive unless OMP_WAIT_POLICY is
    # set), before llama_cpp loads libgomp: both sides must run with the same policy.
    set_openmp_wait_policy()
    import llama_cpp

    defaults = {spec.name: spec.default for spec in LLM_PARAMS}
    text = DEFAULT_FORMAT.render(Prompt(DEFAULT_SYSTEM_PROMPT, user=QUESTION))
    raw = llama_cpp.Llama(
        model_path=str(model),
        n_ctx=defaults["llm.n_ctx"],
        n_threads=args.threads,
        n_threads_batch=args.threads,
        seed=1,
        verbose=False,
    )

    def raw_round() -> dict[str, float]:
        arrivals: list[float] = []
        pieces: list[str] = []
        t0 = time.perf_counter()
        for chunk in raw.create_completion(
            text,
            max_tokens=args.max_tokens,
            temperature=0.0,
            top_p=defaults["llm.top_p"],
            top_k=defaults["llm.top_k"],
            repeat_penalty=defaults["llm.repeat_penalty"],
            stop=list(DEFAULT_FORMAT.stop),
            stream=True,
        ):
            piece = chunk["choices"][0]["text"]
            if piece:
                arrivals.append(time.perf_counter())
                pieces.append(piece)
        return {
            "first_token_ms": (arrivals[0] - t0) * 1e3 if arrivals else float("nan"),
            "tokens_per_s": rate(arrivals),
            "pieces": len(arrivals),
            "text": "".join(pieces),
        }

    node = NodeClient(model, args.threads, args.max_tokens)
    try:
        raw_round()  # fill the cache and wake the threads, on both sides
        node.goal_round(QUESTION)
        rounds: dict[str, list[dict[str, float]]] = {"raw": [], "node": []}
        for i in range(args.rounds):
            for name in ("raw", "node") if i % 2 == 0 else ("node", "raw"):
                rounds[name].append(raw_round() if name == "raw" else node.goal_round(QUESTION))
        speech = {"warmed": [], "final_only": []}
        spoken = iter(SPOKEN * (2 * args.rounds // len(SPOKEN) + 1))
        for i in range(args.rounds):
            for name in ("warmed", "final_only") if i % 2 == 0 else ("final_only", "warmed"):
                speech[name].append(
                    node.speech_round(next(spoken), args.word_ms / 1000, partials=name == "warmed")
                )
    finally:
        node.close()

    result: dict[str, object] = {
        "model": model.name,
        "threads": args.threads,
        "max_tokens": args.max_tokens,
        "rounds": args.rounds,
        "question": QUESTION,
    }
    for name, values in rounds.items():
        result[name] = {
            "first_token_ms": summary([r["first_token_ms"] for r in values]),
            "tokens_per_s": summary([r["tokens_per_s"] for r in values]),
            "pieces": int(statistics.median(r["pieces"] for r in values)),
            "answer": values[0]["text"].strip(),
        }
    node_s, raw_s = result["node"], result["raw"]
    result["ratio"] = {
        "tokens_per_s": ratio(node_s["tokens_per_s"]["median"], raw_s["tokens_per_s"]["median"]),
        "first_token_overhead_ms": difference(
            node_s["first_token_ms"]["median"], raw_s["first_token_ms"]["median"]
        ),
    }
    result["end_of_speech_to_first_chunk_ms"] = {k: summary(v) for k, v in speech.items()}
    write_result(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
