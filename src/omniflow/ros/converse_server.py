"""The ``converse`` action (omniflow/action/Converse): one turn of the conversation per goal.

A goal either prompts the dialogue (MODE_PROMPT: a turn from the goal's text) or waits for
the user's next utterance and its answer (MODE_LISTEN). Rules:

- a goal is rejected while the dialogue is busy (a turn in progress, the user speaking, or
  another goal waiting) unless it sets ``preempt``, which cancels what is in progress;
- feedback streams the answer, one message per piece, with the answer so far;
- the result carries the whole answer and what the user said (for MODE_PROMPT, the prompt as
  a final transcript); it fails with a reason when the turn was interrupted, cancelled, failed
  or timed out (``timeout_s``, or the node's ``converse.timeout_s`` when 0);
- cancelling the goal cancels its turn (generation and speech) and ends it as canceled.

:class:`ConverseServer` holds the goals and leaves the turns to the dialogue node: it starts
and cancels them through the node's :class:`~omniflow.core.dialogue.DialogueManager` and
hands the resulting actions back to the node, which tells the server when a turn starts,
streams and ends.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import ReentrantCallbackGroup

from omniflow.action import Converse
from omniflow.core.dialogue import (
    Action,
    Busy,
    CancelReason,
    DialogueManager,
    StartTurn,
    TurnEnded,
)
from omniflow.core.params import ParamSpec
from omniflow.core.timing import NS_PER_S
from omniflow.msg import Transcript
from omniflow.ros.dialogue_io import transcript_of
from omniflow.ros.lifecycle import LifecycleBase

__all__ = ["CONVERSE_PARAMS", "ConverseServer", "ConverseStats"]

CONVERSE_PARAMS = (
    ParamSpec(
        "converse.timeout_s",
        60.0,
        "Converse goals with timeout_s 0 fail after this long",
        unit="s",
        minimum=1.0,
        maximum=3600.0,
        live=True,
    ),
)

# How often a waiting goal looks for its cancel request and its deadline.
_POLL_S = 0.02
# How long a cancelled or timed-out goal waits for its turn to end before it answers.
_END_WAIT_S = 1.0


@dataclass
class ConverseStats:
    """Goals accepted and rejected, for diagnostics."""

    goals_accepted: int = 0
    goals_rejected: int = 0


@dataclass
class _GoalWait:
    """A converse goal waiting for its turn to end."""

    goal_handle: object
    done: threading.Event = field(default_factory=threading.Event)
    turn_id: int = 0
    outcome: str = ""
    reason: str = ""
    response: str = ""
    transcript: Transcript | None = None

    def resolve(self, outcome: str, reason: str) -> None:
        self.outcome, self.reason = outcome, reason
        self.done.set()


class ConverseServer:
    """The ``converse`` action server of a dialogue node (see the module docstring).

    Args:
        node: the node that serves the action (its clock, and the parameters
            ``CONVERSE_PARAMS`` declared among its own).
        lock: the node's lock over its dialogue; every call into the server other than
            the action's own callbacks is made with it held.
        manager: returns the node's current dialogue manager.
        apply: carries out the manager's actions (the node's dispatcher).
        active: whether the node takes turns now.
    """

    def __init__(
        self,
        node: LifecycleBase,
        lock: threading.RLock,
        *,
        manager: Callable[[], DialogueManager],
        apply: Callable[[list[Action]], None],
        active: Callable[[], bool],
        name: str = "converse",
    ) -> None:
        self._node = node
        self._lock = lock
        self._manager = manager
        self._apply = apply
        self._active = active
        self.stats = ConverseStats()
        self._goals: dict[int, _GoalWait] = {}  # turn id -> goal
        self._listeners: list[_GoalWait] = []  # MODE_LISTEN goals waiting for a turn
        self._starting: _GoalWait | None = None  # the MODE_PROMPT goal whose turn starts
        self._server = ActionServer(
            node,
            Converse,
            name,
            execute_callback=self._execute,
            goal_callback=self._on_goal,
            cancel_callback=lambda _: CancelResponse.ACCEPT,
            callback_group=ReentrantCallbackGroup(),
        )

    # ----------------------------------------------------------------- the node's side
    @property
    def busy(self) -> bool:
        """A goal is waiting for its turn (to start or to end)."""
        return bool(self._goals) or bool(self._listeners)

    def turn_started(self, start: StartTurn, transcript: Transcript) -> None:
        """A turn started: a spoken one answers the listen goals; a goal turn is the
        prompting goal's. ``transcript`` is what the user said."""
        if start.source == "speech":
            for waiter in self._listeners:
                waiter.turn_id, waiter.transcript = start.turn_id, transcript
                self._goals[start.turn_id] = waiter
            self._listeners.clear()
        elif start.source == "goal" and self._starting is not None:
            self._starting.turn_id = start.turn_id
            self._goals[start.turn_id] = self._starting

    def use_vision(self, turn_id: int, default: bool) -> bool:
        """Whether the turn's goal asked for the camera (``default`` without a goal)."""
        goal = self._goals.get(turn_id)
        return goal.goal_handle.request.use_vision if goal is not None else default

    def feedback(self, turn_id: int, delta: str) -> None:
        """A piece of the turn's answer."""
        goal = self._goals.get(turn_id)
        if goal is None:
            return
        goal.response += delta
        goal.goal_handle.publish_feedback(
            Converse.Feedback(turn_id=turn_id, text_delta=delta, partial_response=goal.response)
        )

    def turn_ended(self, ended: TurnEnded) -> None:
        goal = self._goals.pop(ended.turn_id, None)
        if goal is not None:
            goal.response = ended.response
            goal.resolve(ended.outcome, ended.reason)

    def end_all(self, reason: str) -> None:
        """Cancel every waiting goal (the node stops taking turns)."""
        for goal in [*self._goals.values(), *self._listeners]:
            goal.resolve("cancelled", reason)
        self._goals.clear()
        self._listeners.clear()

    # ----------------------------------------------------------------- the action
    def _now(self) -> float:
        return self._node.now_ns() / NS_PER_S

    def _on_goal(self, request: Converse.Goal) -> GoalResponse:
        with self._lock:
            manager = self._manager()
            if (manager.busy or self.busy) and not request.preempt:
                self.stats.goals_rejected += 1
                self._node.get_logger().warning(
                    f"converse goal rejected: busy ({manager.state.name.lower()}); set "
                    "preempt to interrupt the current turn"
                )
                return GoalResponse.REJECT
            self.stats.goals_accepted += 1
            return GoalResponse.ACCEPT

    def _execute(self, goal_handle) -> Converse.Result:
        request = goal_handle.request
        wait = _GoalWait(goal_handle)
        timeout_s = (
            request.timeout_s if request.timeout_s > 0 else self._node.params["converse.timeout_s"]
        )
        error = self._begin(request, wait)
        if error:
            return self._finish(wait, error)
        deadline = time.monotonic() + timeout_s
        while not wait.done.wait(_POLL_S):
            if goal_handle.is_cancel_requested:
                self._end(wait, CancelReason.REQUESTED, "the goal was cancelled")
                wait.done.wait(_END_WAIT_S)
                return self._finish(wait, "cancelled", canceled=True)
            if time.monotonic() > deadline:
                reason = f"timed out after {timeout_s:g} s"
                self._end(wait, CancelReason.TIMED_OUT, reason)
                wait.done.wait(_END_WAIT_S)
                return self._finish(wait, reason)
        if wait.outcome in ("done", "unplayed"):  # the answer is there; its loss is logged
            return self._finish(wait, "")
        return self._finish(wait, f"{wait.outcome}: {wait.reason}")

    def _begin(self, request: Converse.Goal, wait: _GoalWait) -> str:
        """Start the goal's turn (or wait for the next utterance); an error text or ''."""
        with self._lock:
            if not self._active():
                return "the dialogue node is not active (model not loaded?)"
            manager = self._manager()
            if request.mode == Converse.Goal.MODE_LISTEN:
                if request.preempt:
                    self._apply(
                        manager.cancel(
                            "preempted by a listen goal", self._now(), cause=CancelReason.PREEMPTED
                        )
                    )
                self._listeners.append(wait)
                return ""
            if request.mode != Converse.Goal.MODE_PROMPT:
                return (
                    f"unknown mode {request.mode}; use MODE_PROMPT "
                    f"({Converse.Goal.MODE_PROMPT}) or MODE_LISTEN "
                    f"({Converse.Goal.MODE_LISTEN})"
                )
            try:
                actions = manager.prompt(
                    request.prompt, "goal", self._now(), preempt=request.preempt
                )
            except ValueError:
                return "the goal's prompt is empty: give a prompt, or use MODE_LISTEN"
            except Busy as err:
                return f"{err}; set preempt to interrupt it"
            wait.transcript = transcript_of(request.prompt, self._node.now_ns())
            self._starting = wait
            try:
                self._apply(actions)
            finally:
                self._starting = None
            return ""

    def _end(self, wait: _GoalWait, cause: CancelReason, reason: str) -> None:
        with self._lock:
            if wait in self._listeners:
                self._listeners.remove(wait)
                wait.resolve("cancelled", reason)
            elif wait.turn_id and self._manager().active_turn == wait.turn_id:
                self._apply(self._manager().cancel(reason, self._now(), cause=cause))
            else:
                self._goals.pop(wait.turn_id, None)
                wait.resolve("cancelled", reason)

    @staticmethod
    def _finish(wait: _GoalWait, error: str, *, canceled: bool = False) -> Converse.Result:
        result = Converse.Result(
            success=not error, error=error, response=wait.response, turn_id=wait.turn_id
        )
        if wait.transcript is not None:
            result.transcript = wait.transcript
        if canceled:
            wait.goal_handle.canceled()
        elif error:
            wait.goal_handle.abort()
        else:
            wait.goal_handle.succeed()
        return result
