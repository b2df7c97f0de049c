"""Dialogue node: turn-taking, the language model, barge-in, proactive turns, converse goals."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup

from omniflow.core.dialogue import (
    DIALOGUE_PARAMS,
    Action,
    CancelReason,
    DialogueManager,
    State,
    StateChanged,
)
from omniflow.core.stats import OK, WARN
from omniflow.core.timing import NS_PER_S
from omniflow.core.turn_context import TURN_PARAMS, TurnContext
from omniflow.engines.llm import LLM_PARAMS
from omniflow.engines.model_worker import sees_images
from omniflow.msg import SpeechState, Transcript, VoiceActivity
from omniflow.ros import conversions
from omniflow.ros.converse_server import CONVERSE_PARAMS, ConverseServer
from omniflow.ros.dialogue_io import SPEECH_NODE, ContextInputs, DialogueOutputs
from omniflow.ros.dialogue_turns import TurnActions
from omniflow.ros.executors import QueuedOnceExecutor
from omniflow.ros.lifecycle import AUTOSTART, CONFIGURE_ERRORS, Diagnosis, LifecycleBase
from omniflow.ros.liveliness import LivelinessWatch
from omniflow.ros.qos import EVENTS, STATE_CHANGES
from omniflow.ros.run import run_node

PARAMS = (
    *LLM_PARAMS,
    *DIALOGUE_PARAMS,
    *TURN_PARAMS,
    *CONVERSE_PARAMS,
    SPEECH_NODE,
    AUTOSTART,
)

_TICK_S = 0.05
_THROTTLE_S = 5.0


class DialogueNode(LifecycleBase):
    """Runs the conversation: listens to the fusion node, asks the model, streams the answer.

    ROS contract:
        node name: ``dialogue`` (lifecycle; autostarts unless ``autostart:=false``). The model
        is loaded on configure and freed on cleanup (the power manager sleeps it that way);
        turns are taken only while active.
        subscribes:
            ``voice_activity`` (omniflow/msg/VoiceActivity, reliable): the user's speech,
            echo removed; START/ONGOING long enough while speaking is a barge-in; the
            stamps of every event say how far the stream is heard.
            ``transcript`` (omniflow/msg/Transcript, reliable): partials are fed to the model
            ahead; the final one ends the user's turn once the pause after it has lasted as
            long as the model's end-of-turn probability of its words asks
            (``end_of_turn.*``), counted in stream time (the node clock when the stream
            has said nothing for a second).
            ``associations`` (omniflow/msg/Association) and ``scene`` (omniflow/msg/Scene):
            what the camera saw, described to the model.
            ``speech_state`` (omniflow/msg/SpeechState, latched): when playback ends; its
            liveliness is watched: a turn being played when the speech node goes away ends
            (``speech_lost`` counts it).
            ``image_raw`` (sensor_msgs/Image, sensor-data QoS), only with a model that sees
            images (``minicpmv``, or ``remote`` with ``llm.remote.images``): the frames the
            association chose go to the model.
            ``power_state`` (omniflow/msg/PowerState, latched): facts for proactive rules.
        publishes:
            ``response`` (omniflow/msg/ResponseChunk, reliable, transient local, keep last 50):
            the answer as it decodes, one chunk per piece, then an empty ``is_final`` chunk
            (not for a cancelled turn); kept for a speech node that joins late.
            ``dialogue_state`` (omniflow/msg/DialogueState, latched): every state change with
            its reason; INTERRUPTED stops the speech node.
            ``user_said`` (omniflow/msg/Transcript, reliable): each utterance that starts a
            turn or asks the robot to stop (``stop.words``), for behaviour trees that react
            to speech.
            ``~/status`` (std_msgs/String, latched JSON) and ``/diagnostics`` (1 Hz).
        actions:
            ``converse`` (omniflow/action/Converse): answer a prompt, or the next utterance;
            feedback streams the answer; cancel stops generation and speech; a goal while busy
            is rejected unless ``preempt`` is set.
        calls: ``<speech_node>/stop`` (std_srvs/Trigger) when a turn is cancelled.
        parameters: see ``PARAMS`` (the ``llm.*`` ones apply on configure).

    Threads: subscriptions and timers share one mutually exclusive group; goals run in a
    reentrant group and wait on events (:mod:`omniflow.ros.converse_server`); the model
    decodes on its own worker thread (:mod:`omniflow.engines.model_worker`), so a barge-in
    is handled while a token is being decoded and cancels it between tokens (or between
    prompt chunks). What goes into each prompt comes from :mod:`omniflow.core.turn_context`;
    the manager's actions are carried out by :mod:`omniflow.ros.dialogue_turns`.
    """

    def __init__(self, **kwargs) -> None:
        inputs = MutuallyExclusiveCallbackGroup()
        super().__init__("dialogue", PARAMS, callback_group=inputs, **kwargs)
        self._lock = threading.RLock()  # the manager, the turns, the goals, the worker
        self._manager = DialogueManager.from_params(self.params)
        self._turns = TurnContext.from_params(self.params, self.now_ns())
        self._active = False
        self._out = DialogueOutputs(self, self.params["speech_node"], inputs)
        self._context_in = ContextInputs(self, self._turns, self._lock, inputs)
        self._do = TurnActions(
            self,
            self._lock,
            self._turns,
            self._out,
            self._context_in,
            manager=lambda: self._manager,
            feed=self._feed,
            warn=self._warn,
        )
        self.stats, self._worker = self._do.stats, self._do.worker
        # Ready messages are taken in the order of subscription: an utterance's association
        # (fusion publishes the one decided by the words just before the final) and the
        # scenes come before the final transcript that starts the turn.
        self._context_in.subscribe_camera()
        for msg_type, topic, callback, qos in (
            (VoiceActivity, "voice_activity", self._on_voice, EVENTS),
            (Transcript, "transcript", self._on_transcript, EVENTS),
            (SpeechState, "speech_state", self._on_speech, STATE_CHANGES),
        ):
            self.create_subscription(msg_type, topic, callback, qos, callback_group=inputs)
        self._context_in.subscribe_power()
        self._speech_watch = LivelinessWatch(
            self, SpeechState, "speech_state", self._on_speech_alive, callback_group=inputs
        )
        self.create_timer(
            _TICK_S, lambda: self._feed(lambda m, now: m.tick(now)), callback_group=inputs
        )
        self.create_timer(
            1.0 / self.params["proactive.rate_hz"], self._on_proactive, callback_group=inputs
        )
        self._converse = ConverseServer(
            self,
            self._lock,
            manager=lambda: self._manager,
            apply=self._do.apply,
            active=lambda: self._active,
        )
        self._do.converse = self._converse
        self._out.state(StateChanged(State.LISTENING, 0, "not active yet"))
        self.publish_status()

    def _warn(self, text: str) -> None:
        self.get_logger().warning(text, throttle_duration_sec=_THROTTLE_S)

    # ----------------------------------------------------------------- lifecycle
    def configure(self) -> str:
        try:
            loaded = self._worker.load(self.params)
        except CONFIGURE_ERRORS as err:
            self.stats.last_error = str(err)
            raise
        for warning in self._worker.backend.security_warnings:
            self.get_logger().warning(warning)
        self._context_in.take_frames(sees_images(self.params))
        return loaded

    def activate(self) -> None:
        self.start_worker(lambda: self._worker.run(self.stopping), "model", wake=self._worker.wake)
        with self._lock:
            self._active = True
            self._manager = DialogueManager.from_params(self.params)
            self._out.state(StateChanged(State.LISTENING, self._manager.turn_id, "listening"))

    def deactivate(self) -> None:
        reason = "the dialogue node was deactivated"
        with self._lock:
            self._do.apply(
                self._manager.cancel(reason, self._now(), cause=CancelReason.DEACTIVATED)
            )
            self._active = False
            self._converse.end_all(reason)
        self.stop_workers()

    def release_resources(self) -> None:
        """Free the model and the frames; the history is kept."""
        with self._lock:
            self._active = False
            self._turns.clear_frames()
        self._worker.unload()
        self._context_in.take_frames(False)

    def apply_live(self, changes: dict[str, object]) -> str | None:
        try:
            self._worker.update(changes)  # threads, sampling: from the next token
        except CONFIGURE_ERRORS as err:
            return str(err)
        with self._lock:
            self._manager.set_params(self.params)
        return None

    # ----------------------------------------------------------------- inputs
    def _now(self) -> float:
        return self.now_ns() / NS_PER_S

    def _feed(self, step: Callable[[DialogueManager, float], list[Action]]) -> None:
        """While active, give the manager one input and carry out its actions."""
        with self._lock:
            if self._active:
                self._do.apply(step(self._manager, self._now()))

    def _on_voice(self, msg: VoiceActivity) -> None:
        uid, speech_s = msg.utterance_id, msg.speech_s
        stream_s = conversions.ns_from_time(msg.header.stamp) / NS_PER_S
        if msg.event == VoiceActivity.START:
            onset_ns = conversions.ns_from_time(msg.start)
            with self._lock:
                self._turns.utterance_started(uid, onset_ns)
            self._feed(
                lambda m, now: (
                    m.heard(stream_s, now) + m.voice_start(uid, speech_s, now, onset_ns / NS_PER_S)
                )
            )
        elif msg.event == VoiceActivity.ONGOING:
            self._feed(lambda m, now: m.heard(stream_s, now) + m.voice_ongoing(uid, speech_s, now))
        elif msg.event == VoiceActivity.END:
            self._feed(lambda m, now: m.heard(stream_s, now) + m.voice_end(uid, now))
        elif msg.event == VoiceActivity.SILENCE:
            self._feed(lambda m, now: m.heard(stream_s, now))
        else:
            self._warn(
                f"voice_activity with unknown event {msg.event} (stamp "
                f"{conversions.ns_from_time(msg.header.stamp)}) ignored"
            )

    def _on_transcript(self, msg: Transcript) -> None:
        if msg.is_final:
            with self._lock:
                self._do.final(msg)
        end = conversions.ns_from_time(msg.end) / NS_PER_S if msg.is_final else None
        sure = float(msg.words[-1].confidence) if msg.words else math.nan
        self._feed(
            lambda m, now: m.transcript(
                msg.utterance_id, msg.text, msg.is_final, now, end, sure, float(msg.confidence)
            )
        )

    def _on_speech(self, msg: SpeechState) -> None:
        self._feed(lambda m, now: m.speech(msg.speaking, msg.turn_id, now))

    def _on_speech_alive(self, alive: bool) -> None:
        if alive:
            back = self._speech_watch.losses > 0
            self.get_logger().info("the speech node is back" if back else "speech node found")
            return
        self.get_logger().warning(
            "lost the speech node: no sign of it on speech_state for 2 s; a turn it was "
            "playing ends"
        )
        self._feed(lambda m, now: m.speech_lost(now))

    def _on_proactive(self) -> None:
        with self._lock:
            if not self._active or not self.params["proactive.enabled"]:
                return
            rule = self._turns.proactive(
                self.now_ns(), listening=not (self._manager.busy or self._converse.busy)
            )
            if rule is not None:
                self.get_logger().info(f"proactive rule fired: {rule.text}")
                self._do.apply(
                    self._manager.prompt(f"({rule.instruction})", "proactive", self._now())
                )

    def summary(self) -> dict[str, object]:
        with self._lock:
            backend = self._worker.backend
            return {
                "state": self.state_text,
                "dialogue": self._manager.state.name,
                "turn_id": self._manager.turn_id,
                "backend": backend.name if backend else "",
                "security_warnings": list(backend.security_warnings) if backend else [],
                "history_turns": len(self._turns.history),
                "frames_kept": self._turns.frames_kept,
                "last_end_of_turn_probability": self._do.end_of_turn_p,
                "proactive_rules": len(self._turns.policy.rules),
                "chunks": self._out.chunks,
                "speech_lost": self._speech_watch.losses,
                **vars(self.stats),
                **vars(self._worker.stats),
                **vars(self._converse.stats),
            }

    def diagnosis(self) -> Diagnosis:
        values = self.summary()
        level = (
            OK
            if self.state_text == "active"
            and not values["failed"]
            and not values["security_warnings"]
            else WARN
        )
        message = "; ".join([self.state_text, *values["security_warnings"]])
        return Diagnosis(level, message, values["backend"] or "dialogue", values)


def main(args: list[str] | None = None) -> int:
    """Run the dialogue node until shutdown (2: bad parameter)."""
    return run_node(DialogueNode, args, executor_factory=lambda: QueuedOnceExecutor(4))


if __name__ == "__main__":
    raise SystemExit(main())
