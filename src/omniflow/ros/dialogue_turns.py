"""The dialogue manager's actions carried out, and the model worker's output fed back.

:class:`TurnActions` is what the dialogue node does with each action of
:class:`~omniflow.core.dialogue.DialogueManager` (with the node's lock held): publish a state
or what the user said, start a turn on the model worker with its context (the scene, the
chosen frames, the history: :class:`~omniflow.core.turn_context.TurnContext`), cancel one,
evaluate or score the user's words ahead, answer a turn likely to start ahead (a model that
sees images excepted: the turn's frames are chosen when it starts), end a turn (the
history, the converse goal). The worker's pieces, the end of a generation and end-of-turn
scores go back to the manager.
"""

from __future__ import annotations

from collections.abc import Callable

from omniflow.core.dialogue import (
    Action,
    AnswerAhead,
    AwaitTurnEnd,
    Cancel,
    DialogueManager,
    DialogueStats,
    ScoreTurn,
    StartTurn,
    StateChanged,
    TurnEnded,
    UserSaid,
    Warm,
)
from omniflow.core.timing import NS_PER_MS, NS_PER_S
from omniflow.core.turn_context import TurnContext, trim_oldest
from omniflow.engines.model_worker import Job, ModelWorker
from omniflow.msg import Transcript
from omniflow.ros import conversions
from omniflow.ros.dialogue_io import ContextInputs, DialogueOutputs, frame_rgb, transcript_of

__all__ = ["TurnActions"]


class TurnActions:
    """Carries out the manager's actions; owns the model worker and the final transcripts.

    ``manager`` gives the node's current manager (a new one on each activation), ``feed``
    gives it an input while the node is active; ``converse`` is set once the action server
    exists (it needs :meth:`apply`).
    """

    def __init__(
        self,
        node,
        lock,
        turns: TurnContext,
        out: DialogueOutputs,
        context_in: ContextInputs,
        *,
        manager: Callable[[], DialogueManager],
        feed: Callable,
        warn: Callable[[str], None],
    ) -> None:
        self._node = node
        self._turns = turns
        self._out = out
        self._context_in = context_in
        self._manager = manager
        self._feed = feed
        self._warn = warn
        self.stats = DialogueStats()
        self.converse = None
        self.end_of_turn_p = float("nan")  # the last end-of-turn probability, for diagnostics
        self._finals: dict[int, Transcript] = {}  # utterance id -> final transcript
        self.worker = ModelWorker(
            lock,
            on_delta=self._on_delta,
            on_done=self._on_done,
            on_warning=warn,
            on_score=self._on_score,
        )

    def final(self, msg: Transcript) -> None:
        """Keep a final transcript: its times and words go with the turn it starts."""
        self._finals[msg.utterance_id] = msg
        trim_oldest(self._finals)

    def apply(self, actions: list[Action]) -> None:
        """Carry out the manager's actions in order (the lock is held)."""
        logger = self._node.get_logger()
        for action in actions:
            self.stats.record(action)
            match action:
                case StateChanged():
                    self._out.state(action)
                case StartTurn():
                    self._start_turn(action)
                case Cancel():
                    self.worker.cancel(action.turn_id)
                    if action.stop_speech:
                        self._out.stop_speech()
                case Warm():
                    utterance_id = self._manager().utterance
                    self.worker.warm(self._user_prompt(utterance_id, action.user_text))
                case ScoreTurn():
                    self.worker.score(
                        action.utterance_id,
                        self._user_prompt(action.utterance_id, action.user_text),
                    )
                case AnswerAhead():
                    self._answer_ahead(action)
                case AwaitTurnEnd():
                    logger.debug(
                        f"utterance {action.utterance_id}: end-of-turn probability "
                        f"{action.probability}, waiting up to {action.wait_s * 1000:.0f} ms "
                        "after the speech for more"
                    )
                case UserSaid():
                    self._out.user_said(action, self._finals.get(action.utterance_id))
                case TurnEnded():
                    self.worker.forget(action.turn_id)
                    max_turns = self._node.params["history.max_turns"]
                    self._turns.end_turn(action, self._node.now_ns(), max_turns)
                    if action.outcome == "failed":
                        logger.error(f"turn {action.turn_id} failed: {action.reason}")
                    elif action.outcome == "unplayed":
                        logger.warning(f"turn {action.turn_id}: {action.reason}")
                    self.converse.turn_ended(action)

    def _user_prompt(self, utterance_id: int, user_text: str):
        """The prompt the user's words so far will end up in (to evaluate or score ahead),
        with the scene a speech turn of this utterance would be given now (the turn's prompt
        carries it before the user's line: without it there, the turn evaluated the scene,
        the user's words and all after them again before its first token: 25 of the
        embedded model's 68 prompt tokens, 139-151 ms to the first token against 103-113)."""
        params = self._node.params
        return self._turns.warm_prompt(
            params["llm.system_prompt"],
            user_text,
            utterance_id,
            self._node.now_ns(),
            vision=params["vision.enabled"],
            max_age_ns=params["vision.max_age_ms"] * NS_PER_MS,
        )

    def _answer_ahead(self, action: AnswerAhead) -> None:
        """Start the answer the turn will take over if it starts with these words (not for
        a model that sees images: a turn's frames are chosen when it starts)."""
        if not action.user_text or self._context_in.frames:
            self.worker.answer_ahead(None)
        else:
            self.worker.answer_ahead(self._user_prompt(action.utterance_id, action.user_text))

    def _start_turn(self, start: StartTurn) -> None:
        params = self._node.params
        now_ns = self._node.now_ns()
        final = self._finals.get(start.utterance_id)
        self.converse.turn_started(start, final or transcript_of(start.user_text, now_ns))
        prompt = self._turns.begin_turn(
            start,
            params["llm.system_prompt"],
            now_ns,
            vision=self.converse.use_vision(start.turn_id, params["vision.enabled"]),
            max_age_ns=params["vision.max_age_ms"] * NS_PER_MS,
            decode=(lambda msg: frame_rgb(msg, self._warn)) if self._context_in.frames else None,
        )
        self.worker.submit(
            start.turn_id,
            prompt,
            conversions.ns_from_time(final.end) if final else now_ns,
            reply=start.reply,
        )

    # ----------------------------------------------------------------- the worker's output
    def _now(self) -> float:
        return self._node.now_ns() / NS_PER_S

    def _on_delta(self, job: Job, index: int, text: str) -> None:
        self._out.chunk(job.turn_id, index, text, False, turn_start_ns=job.turn_start_ns)
        self.apply(self._manager().token(job.turn_id, text, self._now()))
        self.converse.feedback(job.turn_id, text)

    def _on_score(self, utterance_id: int, probability: float | None) -> None:
        self.end_of_turn_p = float("nan") if probability is None else probability
        self._feed(lambda m, now: m.turn_score(utterance_id, probability, now))

    def _on_done(self, job: Job, pieces: int, error: str) -> None:
        if not error:
            self._out.chunk(job.turn_id, pieces, "", True, turn_start_ns=job.turn_start_ns)
        self.apply(self._manager().generated(job.turn_id, self._now(), error))
