"""Speech node: speaks the streamed response from its first phrase, stops at once on barge-in."""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass

import numpy as np
from std_srvs.srv import Trigger

from omniflow.core.params import ParamSpec
from omniflow.core.phrases import PhraseChunker
from omniflow.core.resample import StreamResampler, float_to_int16, int16_to_float
from omniflow.core.speech_turns import Speak, SpeechPlanner, Stop, TurnDone, TurnGate
from omniflow.core.stats import DeviceStats
from omniflow.core.timing import NS_PER_MS, SAMPLE_RATE
from omniflow.devices.playback import AudioSink, open_audio_sink
from omniflow.engines.tts import TtsEngine, make_tts_engine
from omniflow.msg import AudioChunk, DialogueState, ResponseChunk, SpeechState
from omniflow.ros import conversions
from omniflow.ros.device_node import DeviceNode
from omniflow.ros.liveliness import LivelinessWatch
from omniflow.ros.qos import LEASED_STATE, RESPONSE, SENSOR_DATA, STATE_CHANGES
from omniflow.ros.run import run_node

PARAMS = (
    ParamSpec(
        "engine",
        "espeak-ng",
        "Text-to-speech engine (piper is GPL-3.0 and optional: "
        "pip install -r requirements/piper.txt)",
        choices=("espeak-ng", "piper"),
    ),
    ParamSpec("voice", "en-us", "espeak-ng voice (espeak-ng --voices lists them)"),
    ParamSpec(
        "words_per_minute",
        175,
        "Speaking rate of espeak-ng",
        unit="words/min",
        minimum=80,
        maximum=450,
    ),
    ParamSpec("piper.model_path", "", "Piper voice model (.onnx) when engine is 'piper'"),
    ParamSpec(
        "sink",
        "device",
        "Where speech goes: a PortAudio output device, a WAV file, "
        "or nowhere (paced in real time, for machines without sound)",
        choices=("device", "wav", "null"),
    ),
    ParamSpec("device", "", "Output device by index or (part of) its name; empty: default"),
    ParamSpec("wav.path", "", "WAV file written when sink is 'wav'"),
    ParamSpec(
        "sample_rate",
        SAMPLE_RATE,
        "Rate of the played (and published) audio; speech is resampled to it",
        unit="Hz",
        minimum=8000,
        maximum=48000,
    ),
    ParamSpec(
        "block_ms",
        20,
        "Output block: the most a stop can take to silence the speaker",
        unit="ms",
        minimum=5,
        maximum=20,
    ),
    ParamSpec(
        "max_queue_ms",
        2000,
        "Speech synthesised ahead of playback at most",
        unit="ms",
        minimum=200,
        maximum=30000,
    ),
    ParamSpec(
        "dialogue_wait_ms",
        500,
        "How long a response chunk waits for the dialogue state that says whether its turn "
        "is still in progress (it comes first, within milliseconds, from a dialogue node); "
        "then the turn is spoken (a publisher without a dialogue node)",
        unit="ms",
        minimum=0,
        maximum=10000,
    ),
    ParamSpec(
        "chunker.first_min_words",
        1,
        'The first phrase may go at a comma once it has this many words (1: "Sure," goes at once)',
        minimum=1,
        maximum=20,
        live=True,
    ),
    ParamSpec(
        "chunker.first_max_words",
        6,
        "The first phrase goes after this many words even without punctuation",
        minimum=1,
        maximum=50,
        live=True,
    ),
    ParamSpec(
        "chunker.first_clause_words",
        3,
        'The first phrase may end before a word that opens a clause ("and", "that", ...) '
        "once it has this many words (chunker.first_max_words or more: never)",
        minimum=1,
        maximum=50,
        live=True,
    ),
    ParamSpec(
        "chunker.first_at_mark",
        True,
        'The first phrase goes as soon as a word of letters ends it with a sentence mark ("cup."), '
        "not with the token after it (false: a word is complete once whitespace or the end "
        "of the answer follows it)",
        live=True,
    ),
    ParamSpec(
        "chunker.first_max_wait_ms",
        350,
        "The first phrase goes this long after the first token with what is there",
        unit="ms",
        minimum=0,
        maximum=5000,
        live=True,
    ),
    ParamSpec(
        "chunker.min_words",
        4,
        "Later phrases split at a comma only when at least this long",
        minimum=1,
        maximum=50,
        live=True,
    ),
    ParamSpec(
        "chunker.max_words",
        25,
        "Longest phrase; longer ones split at a word",
        minimum=2,
        maximum=200,
        live=True,
    ),
)

# How often the worker looks at the time budget when no text arrives.
_POLL_S = 0.02


@dataclass
class SpeechStats(DeviceStats):
    """Counters of the speech node, for diagnostics."""

    phrases: int = 0  # phrases synthesised and queued
    turns: int = 0  # turns spoken to the end
    stops: int = 0  # turns stopped (barge-in, cancel, a newer turn)
    skipped_phrases: int = 0  # phrases with nothing sayable
    ignored_chunks: int = 0  # stale or repeated response chunks
    skipped_chunks: int = 0  # pieces of answers that never arrived (spoken without them)
    ended_chunks: int = 0  # chunks of turns the dialogue node had ended (e.g. heard on restart)
    ended_turns: int = 0  # turns of those chunks, not spoken
    unconfirmed_turns: int = 0  # turns spoken without a dialogue state naming them
    dialogue_lost: int = 0  # times the dialogue node went silent (gone, or cut off by the network)
    first_audio_ms: float = float("nan")  # last turn: first token stamp -> first sample out


class SpeechOutput:
    """The TTS engine and the audio sink, opened and closed together."""

    def __init__(self, engine: TtsEngine, sink: AudioSink) -> None:
        self.engine, self.sink = engine, sink

    def open(self) -> None:
        self.sink.open()

    def close(self) -> None:
        self.sink.close()
        self.engine.close()

    def describe(self) -> str:
        return f"{self.engine.describe()} -> {self.sink.describe()}"


@dataclass
class _Segment:
    """Frames of one phrase handed to the sink and not yet played."""

    turn_id: int
    phrase_index: int
    frames: int


class SpeechNode(DeviceNode):
    """Speaks the streamed response, starting at its first phrase; silent at once when told.

    ROS contract:
        node name: ``speech`` (lifecycle; autostarts unless ``autostart:=false``)
        subscribes:
            ``response`` (omniflow/msg/ResponseChunk, reliable, transient local, keep last
            50): the streamed answer; a newer turn stops the current one. On (re)start the
            publisher's kept chunks arrive too: those of the turn the dialogue state says is
            in progress are spoken from its first piece, those of turns that are over are
            dropped (``ended_chunks``). A publisher must offer transient local to match.
            ``dialogue_state`` (omniflow/msg/DialogueState, latched, liveliness lease 2 s):
            INTERRUPTED stops speaking within one output block; the state's turn and state
            tell which response chunks are current (:class:`TurnGate`); when the dialogue
            node stops
            asserting its liveliness (it died, or the network to its host is cut) a warning
            says so and ``dialogue_lost`` counts it; speaking what it has goes on, and the
            answer it was streaming ends there; the turn ids of a respawned dialogue node are
            not taken for stale ones.
        publishes:
            ``speech_state`` (omniflow/msg/SpeechState, latched, liveliness lease 1 s):
            speaking or idle, the turn and the phrase being played; idle is published the
            moment a stop happens.
            ``played_audio`` (omniflow/msg/AudioChunk, sensor-data QoS): every block sent to
            the speaker, stamped with the time its first sample goes out (the echo
            reference); silence between phrases is not published.
            ``/diagnostics`` (diagnostic_msgs/DiagnosticArray, 1 Hz).
        services:
            ``~/stop`` (std_srvs/Trigger): stop speaking now (cancel).
        parameters: see ``PARAMS``; the ``chunker.*`` ones apply from the next turn.
    """

    default_frame_id = "speaker"

    def __init__(self, **kwargs) -> None:
        self.stats = SpeechStats()
        super().__init__("speech", PARAMS, **kwargs)
        self._inbox: deque[ResponseChunk] = deque()
        # Planned but not yet queued, each with the generation it was planned in.
        self._todo: deque[tuple[int, Speak | TurnDone]] = deque()
        self._inbox_ready = threading.Condition()
        self._lock = threading.Lock()  # planner, segments, generation, speaking state
        self._planner = SpeechPlanner(self._make_chunker)
        self._gate = TurnGate(self.params["dialogue_wait_ms"] / 1000)
        self._generation = 0  # bumped by every stop: synthesis of older phrases is abandoned
        self._segments: deque[_Segment] = deque()
        self._turns_done: set[int] = set()
        self._speaking: tuple[int, int] | None = None  # (turn, phrase) being played
        self._last_turn = 0  # the newest turn heard of, reported with the idle state
        self._first_token_ns: dict[int, int] = {}
        self._played_sequence = 0
        self._state_pub = self._audio_pub = None
        self.create_subscription(ResponseChunk, "response", self._on_response, RESPONSE)
        self.create_subscription(DialogueState, "dialogue_state", self._on_dialogue, STATE_CHANGES)
        self._dialogue = LivelinessWatch(
            self, DialogueState, "dialogue_state", self._on_dialogue_alive
        )
        self.create_service(Trigger, "~/stop", self._on_stop_service)

    # ----------------------------------------------------------------- device
    def _make_chunker(self) -> PhraseChunker:
        p = self.params
        return PhraseChunker(
            first_min_words=p["chunker.first_min_words"],
            first_max_words=p["chunker.first_max_words"],
            first_clause_words=p["chunker.first_clause_words"],
            first_at_mark=p["chunker.first_at_mark"],
            first_max_wait_s=p["chunker.first_max_wait_ms"] / 1000,
            min_words=p["chunker.min_words"],
            max_words=p["chunker.max_words"],
        )

    def open_device(self) -> SpeechOutput:
        p = self.params
        warn = self.get_logger().warning
        engine = make_tts_engine(
            p["engine"],
            voice=p["voice"],
            words_per_minute=p["words_per_minute"],
            model_path=p["piper.model_path"],
            warn=warn,
        )
        location = p["device"] if p["sink"] == "device" else p["wav.path"]
        sink = open_audio_sink(
            p["sink"],
            location,
            sample_rate=p["sample_rate"],
            block_frames=p["sample_rate"] * p["block_ms"] // 1000,
            max_queue_s=p["max_queue_ms"] / 1000,
            on_played=self._on_played,
            warn=warn,
        )
        output = SpeechOutput(engine, sink)
        try:
            output.open()
        except Exception:
            engine.close()
            raise
        return output

    def create_outputs(self) -> None:
        self._state_pub = self.create_lifecycle_publisher(SpeechState, "speech_state", LEASED_STATE)
        self._audio_pub = self.create_lifecycle_publisher(AudioChunk, "played_audio", SENSOR_DATA)

    def destroy_outputs(self) -> None:
        self.destroy_lifecycle_publisher(self._state_pub)
        self.destroy_lifecycle_publisher(self._audio_pub)
        self._state_pub = self._audio_pub = None

    def activate(self) -> None:
        super().activate()
        self._publish_state(None)  # idle, latched for whoever joins later

    def stop_stream(self) -> None:
        self.stop_speaking("node deactivated")
        with self._inbox_ready:
            self._inbox_ready.notify_all()

    # ----------------------------------------------------------------- inputs
    def _on_response(self, msg: ResponseChunk) -> None:
        with self._inbox_ready:
            self._inbox.append(msg)
            self._inbox_ready.notify()

    def _on_dialogue(self, msg: DialogueState) -> None:
        with self._lock:
            known = self._gate.dialogue(msg.state, msg.turn_id)
        if not known:
            self.get_logger().warning(
                f"dialogue_state with unknown state {msg.state} (turn {msg.turn_id}) ignored",
                throttle_duration_sec=5.0,
            )
            return
        with self._inbox_ready:  # the worker decides on the chunks that waited for it
            self._inbox_ready.notify()
        if msg.state == DialogueState.INTERRUPTED:
            self.stop_speaking(f"interrupted: {msg.reason or 'barge-in'}")

    def _on_dialogue_alive(self, alive: bool) -> None:
        """The dialogue node's state publisher came alive, or stopped asserting liveliness."""
        if alive:
            with self._lock:
                self._planner.source_restarted()
                self._gate.source_restarted()
            back = self._dialogue.losses > 0
            self.get_logger().info("the dialogue node is back" if back else "dialogue node found")
            return
        self.stats.dialogue_lost = self._dialogue.losses
        with self._lock:
            self._gate.source_lost()
            actions = self._planner.source_lost()
            self._todo.extend((self._generation, action) for action in actions)
        with self._inbox_ready:
            self._inbox_ready.notify()
        self.get_logger().warning(
            "lost the dialogue node: no sign of it on dialogue_state for 2 s (it stopped, "
            "or the network to its host is down); what was queued is still spoken"
            + (", and the answer it was streaming ends there" if actions else "")
        )

    def _on_stop_service(self, request: Trigger.Request, response: Trigger.Response):
        was_speaking = self.stop_speaking("stop requested")
        response.success = True
        response.message = "stopped" if was_speaking else "was not speaking"
        return response

    def stop_speaking(self, reason: str) -> bool:
        """Silence the speaker now and drop the current turn; True if it was speaking.

        Called from subscription and service callbacks directly, not through the worker: a
        flush only sets a flag the output thread reads at its next block, so this returns at
        once and the speaker is silent within one block.
        """
        with self._lock:
            actions = self._planner.interrupt(reason)
            was_speaking = self._speaking is not None or bool(self._segments) or bool(actions)
            for action in actions:
                self._forget(action.turn_id)
            self._generation += 1
            self._segments.clear()
            self._todo.clear()
            self._speaking = None
        output = self.device
        if output is not None:
            output.sink.flush()
        if was_speaking:
            self.stats.stops += 1
            self.get_logger().info(f"stopped speaking: {reason}")
            self._publish_state(None)
        return was_speaking

    # ----------------------------------------------------------------- worker
    def step(self, stop: threading.Event) -> None:
        with self._lock:
            idle = not self._todo
        self._take_inbox(wait=idle)
        with self._lock:
            if not self._todo or stop.is_set():
                return
            generation, action = self._todo.popleft()
            if generation != self._generation:  # planned before a stop
                return
        if isinstance(action, Speak):
            self._say(action, generation)
        else:
            self._turn_done(action.turn_id)

    def _take_inbox(self, wait: bool) -> None:
        """Plan what arrived (and what the time budget releases). A newer turn stops the
        current one here and now, also while a phrase of it is waiting for room in the
        sink, so the robot never finishes an answer that was replaced."""
        with self._inbox_ready:
            if wait and not self._inbox:
                self._inbox_ready.wait(_POLL_S)
            chunks = list(self._inbox)
            self._inbox.clear()
        now_s = time.monotonic()
        stops = []
        with self._lock:
            ended_turns = self._gate.counts.ended_turns
            skipped = self._planner.counts.skipped_chunks
            passed = [c for chunk in chunks for c in self._gate.offer(chunk.turn_id, chunk, now_s)]
            passed += self._gate.poll(now_s)
            gate = self._gate.counts
            self.stats.ended_chunks = gate.ended_chunks
            self.stats.ended_turns = gate.ended_turns
            self.stats.unconfirmed_turns = gate.unconfirmed_turns
            actions = []
            for chunk in passed:
                self._last_turn = chunk.turn_id
                if chunk.index == 0:
                    self._first_token_ns[chunk.turn_id] = conversions.ns_from_time(
                        chunk.header.stamp
                    )
                actions += self._planner.on_chunk(
                    chunk.turn_id, chunk.index, chunk.text_delta, chunk.is_final, now_s
                )
            actions += self._planner.poll(now_s)
            counts = self._planner.counts
            self.stats.ignored_chunks = counts.stale_chunks + counts.duplicate_chunks
            self.stats.skipped_chunks = counts.skipped_chunks
            turn = self._planner.current_turn
            for action in actions:
                if isinstance(action, Stop):
                    self._forget(action.turn_id)
                    self._generation += 1
                    self._segments.clear()
                    self._todo.clear()
                    self._speaking = None
                    stops.append(action)
                else:
                    self._todo.append((self._generation, action))
        if counts.skipped_chunks > skipped:
            self.get_logger().warning(
                f"turn {turn}: {counts.skipped_chunks - skipped} piece(s) of the answer never "
                "arrived (joined after the pieces the dialogue node keeps, or lost); speaking "
                "on without them"
            )
        if gate.ended_turns > ended_turns:
            self.get_logger().info(
                f"not speaking {gate.ended_turns - ended_turns} turn(s) the dialogue state says "
                f"are over (kept answers heard on joining, or late chunks; {gate.ended_chunks} "
                "chunks dropped so far)"
            )
        for action in stops:
            self.device.sink.flush()
            self.stats.stops += 1
            self.get_logger().info(f"stopped turn {action.turn_id}: {action.reason}")
            self._publish_state(None)

    def _forget(self, turn_id: int) -> None:
        """Drop what is kept about a stopped turn (call with the lock held)."""
        self._turns_done.discard(turn_id)
        self._first_token_ns.pop(turn_id, None)

    def _say(self, action: Speak, generation: int) -> None:
        """Synthesise one phrase and queue it, chunk by chunk as the engine produces audio,
        abandoning it the moment a stop bumps the generation."""
        output = self.device
        sink = output.sink
        resampler = None
        if output.engine.sample_rate != sink.sample_rate:
            resampler = StreamResampler(output.engine.sample_rate, sink.sample_rate, 1)
        queued = 0
        audio = output.engine.synthesize(action.phrase.text)
        try:
            for chunk in audio:
                if resampler is not None:
                    chunk = float_to_int16(resampler.process(int16_to_float(chunk)[:, None]))[:, 0]
                if not self._queue(sink, chunk, action, generation):
                    return
                queued += len(chunk)
            if resampler is not None:
                tail = float_to_int16(resampler.process(np.zeros((0, 1), np.float32), final=True))[
                    :, 0
                ]
                if not self._queue(sink, tail, action, generation):
                    return
                queued += len(tail)
        finally:
            audio.close()  # a stopped phrase ends its synthesis process too
        if queued:
            self.stats.phrases += 1
        else:  # the engine said why
            self.stats.skipped_phrases += 1

    def _queue(self, sink: AudioSink, samples: np.ndarray, action: Speak, generation: int) -> bool:
        """Hand samples to the sink (waiting for room); False when a stop came meanwhile."""
        offset = 0
        while offset < len(samples):
            with self._lock:
                if generation != self._generation:
                    return False
            accepted = sink.write(samples[offset:], timeout=0.05)
            if offset + accepted < len(samples):  # the sink is full: look at what came in
                self._take_inbox(wait=False)
            with self._lock:
                stale = generation != self._generation
                if accepted and not stale:
                    self._account_queued(action, accepted)
            if stale:
                # A stop came between the check and the write: what was just queued
                # belongs to the stopped turn. Only this thread writes, so flushing again
                # cannot drop a newer turn's audio.
                sink.flush()
                return False
            offset += accepted
        return True

    def _account_queued(self, action: Speak, frames: int) -> None:
        last = self._segments[-1] if self._segments else None
        if last and (last.turn_id, last.phrase_index) == (action.turn_id, action.phrase.index):
            last.frames += frames
        else:
            self._segments.append(_Segment(action.turn_id, action.phrase.index, frames))

    def _turn_done(self, turn_id: int) -> None:
        with self._lock:
            self._turns_done.add(turn_id)
            idle = not self._segments and self._speaking is None
        if idle:
            self._finish_turn(turn_id)

    def _finish_turn(self, turn_id: int) -> None:
        with self._lock:
            self._planner.played_out(turn_id)
            self._forget(turn_id)
        self.stats.turns += 1
        self._publish_state(None)

    # ----------------------------------------------------------------- output thread
    def _on_played(self, samples: np.ndarray, out_monotonic: float) -> None:
        """Called by the sink for every block sent out: publish it as the echo reference
        and follow which phrase is playing."""
        stamp_ns = self.stamp_from_monotonic(out_monotonic)
        changed, finished = None, None
        with self._lock:
            remaining = len(samples)
            while remaining and self._segments:
                head = self._segments[0]
                if self._speaking != (head.turn_id, head.phrase_index):
                    self._speaking = (head.turn_id, head.phrase_index)
                    changed = self._speaking
                    first_ns = self._first_token_ns.pop(head.turn_id, None)
                    if first_ns is not None:
                        self.stats.first_audio_ms = (stamp_ns - first_ns) / NS_PER_MS
                used = min(remaining, head.frames)
                head.frames -= used
                remaining -= used
                if head.frames == 0:
                    self._segments.popleft()
            if not self._segments and self._speaking is not None:
                turn = self._speaking[0]
                if turn in self._turns_done:
                    self._speaking = None
                    finished = turn
            sequence = self._played_sequence
            self._played_sequence += 1
        publisher, output = self._audio_pub, self.device
        if publisher is not None and output is not None:
            publisher.publish(
                conversions.audio_chunk(
                    samples,
                    stamp_ns=stamp_ns,
                    frame_id=self.frame_id,
                    sample_rate=output.sink.sample_rate,
                    sequence=sequence,
                )
            )
        if changed is not None:
            self._publish_state(changed)
        if finished is not None:
            self._finish_turn(finished)

    def _publish_state(self, speaking: tuple[int, int] | None) -> None:
        publisher = self._state_pub
        if publisher is None:
            return
        turn_id, phrase_index = speaking if speaking is not None else (self._last_turn, 0)
        publisher.publish(
            SpeechState(
                header=conversions.header(self.now_ns(), self.frame_id),
                speaking=speaking is not None,
                turn_id=turn_id,
                phrase_index=phrase_index,
            )
        )


def main(args: list[str] | None = None) -> int:
    return run_node(SpeechNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
