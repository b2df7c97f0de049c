"""Which phrases to speak and when to stop: the speech node's decisions, without ROS.

A :class:`SpeechPlanner` receives the streamed response (turn id, index, text delta, final
flag) and interruptions, and answers with actions: :class:`Speak` a phrase, :class:`Stop`
the current turn, :class:`TurnDone` when every phrase of a turn was handed out. Phrasing is
a :class:`omniflow.core.phrases.PhraseChunker`'s, one per turn.

A turn is *open* while its chunks arrive and *audible* until the node reports that its last
phrase was played (:meth:`SpeechPlanner.played_out`): the text of an answer usually arrives
much faster than it is spoken.

Ordering rules, for a robot whose dialogue manager may restart or resend:
- a chunk of a newer turn stops the current one, open or still audible (the robot never
  talks over itself, and never finishes an answer that was replaced);
- chunks of a turn that was stopped, or of an older turn, are ignored and counted;
- within a turn, a repeated index is ignored; an index that arrives early waits for the
  missing ones up to ``gap_timeout_s``, after which the missing ones are skipped (counted);
- a chunk with index 0 of an unknown turn id lower than the current one is a restarted
  dialogue manager, not a stale chunk: it starts a new turn;
- when the dialogue node goes away in the middle of a turn (:meth:`SpeechPlanner.source_lost`)
  what the turn holds is spoken and the turn ends; when a new one is back
  (:meth:`SpeechPlanner.source_restarted`) the turn ids it reuses are no longer stale.

Before the planner, a :class:`TurnGate` keeps out the answers of turns that are over. The
``response`` topic keeps its recent chunks for late joiners (transient local), so a speech node
that starts after an answer began, or restarts in the middle of one, still hears it from its
first piece; the same history also holds answers that already ended, which must not be spoken
again. The dialogue node's latched state says which turn is in progress (THINKING or SPEAKING
turn N): chunks of that turn, or of a newer one, pass; chunks of older or ended turns are
dropped and counted.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from omniflow.core.dialogue import State
from omniflow.core.phrases import Phrase, PhraseChunker

# How many stopped or finished turn ids are remembered to recognise late chunks.
_REMEMBERED_TURNS = 64


@dataclass(frozen=True)
class Speak:
    """Synthesise and play this phrase of this turn."""

    turn_id: int
    phrase: Phrase


@dataclass(frozen=True)
class Stop:
    """Stop the turn now: drop what is queued, silence the speaker."""

    turn_id: int
    reason: str


@dataclass(frozen=True)
class TurnDone:
    """Every phrase of the turn was handed out; the speaker goes idle when they are played."""

    turn_id: int


Action = Speak | Stop | TurnDone

# The dialogue states in which the state's turn is being generated or spoken.
_IN_PROGRESS = (State.THINKING, State.SPEAKING)


@dataclass
class PlannerCounts:
    """What the planner ignored or skipped, for diagnostics."""

    stale_chunks: int = 0
    duplicate_chunks: int = 0
    skipped_chunks: int = 0


class SpeechPlanner:
    """Turns response chunks and interruptions into speech actions (see the module doc)."""

    def __init__(
        self, chunker_factory: Callable[[], PhraseChunker], gap_timeout_s: float = 0.5
    ) -> None:
        self._new_chunker = chunker_factory
        self._gap_timeout_s = gap_timeout_s
        self._turn: int | None = None
        self._chunker: PhraseChunker | None = None
        self._next_index = 0
        self._early: dict[int, tuple[str, bool, float]] = {}
        self._closed: deque[int] = deque(maxlen=_REMEMBERED_TURNS)
        self._audible: int | None = None  # the last turn with phrases, until played out
        self.counts = PlannerCounts()

    @property
    def current_turn(self) -> int | None:
        """The turn being spoken (None when idle)."""
        return self._turn

    def on_chunk(
        self, turn_id: int, index: int, text_delta: str, is_final: bool, now_s: float
    ) -> list[Action]:
        """Account for one response chunk."""
        actions: list[Action] = []
        if turn_id in self._closed:
            self.counts.stale_chunks += 1
            return actions
        if turn_id != self._turn:
            if self._turn is not None and turn_id < self._turn and index != 0:
                self.counts.stale_chunks += 1
                return actions
            if self._turn is not None:
                actions.append(self._close(f"turn {turn_id} started"))
            elif self._audible is not None:
                actions.append(Stop(self._audible, f"turn {turn_id} started"))
            self._open(turn_id)
        if index < self._next_index or index in self._early:
            self.counts.duplicate_chunks += 1
            return actions
        self._early[index] = (text_delta, is_final, now_s)
        actions += self._drain(now_s)
        return actions

    def interrupt(self, reason: str) -> list[Action]:
        """Stop the current turn (barge-in, cancel), open or still audible; nothing to do
        when silent."""
        if self._turn is not None:
            return [self._close(reason)]
        if self._audible is not None:
            stopped, self._audible = self._audible, None
            return [Stop(stopped, reason)]
        return []

    def played_out(self, turn_id: int) -> None:
        """The node played the turn's last phrase: a new turn no longer needs to stop it."""
        if self._audible == turn_id:
            self._audible = None

    def poll(self, now_s: float) -> list[Action]:
        """Time-driven decisions: the chunker's time budget, and giving up on missing chunks."""
        if self._turn is None:
            return []
        actions: list[Action] = []
        if self._early:
            oldest = min(arrived for _, _, arrived in self._early.values())
            if now_s - oldest >= self._gap_timeout_s:
                first = min(self._early)
                self.counts.skipped_chunks += first - self._next_index
                self._next_index = first
                actions += self._drain(now_s)
        if self._chunker is not None:
            actions += self._speak(self._chunker.poll(now_s))
        return actions

    def _open(self, turn_id: int) -> None:
        self._turn = self._audible = turn_id
        self._chunker = self._new_chunker()
        self._next_index = 0
        self._early.clear()

    def _close(self, reason: str) -> Stop:
        stopped = Stop(self._turn, reason)
        self._closed.append(self._turn)
        self._turn, self._chunker, self._audible = None, None, None
        self._early.clear()
        return stopped

    def _drain(self, now_s: float) -> list[Action]:
        actions: list[Action] = []
        while self._next_index in self._early:
            text, is_final, _ = self._early.pop(self._next_index)
            self._next_index += 1
            actions += self._speak(self._chunker.feed(text, now_s))
            if is_final:
                actions += self._finish()
                break
        return actions

    def source_lost(self) -> list[Action]:
        """The answers' source went away in the middle of a turn (the dialogue node died or
        was cut off): what the open turn holds is spoken and the turn ends, as if its final
        chunk had come, so the robot is not left speaking a turn that never ends."""
        return self._finish() if self._turn is not None else []

    def source_restarted(self) -> None:
        """A new source (a respawned dialogue node) numbers its turns from 1 again: forget
        the turns closed so far, or its first answers would be ignored as stale."""
        self._closed.clear()

    def _finish(self) -> list[Action]:
        actions = self._speak(self._chunker.finish())
        actions.append(TurnDone(self._turn))
        self._closed.append(self._turn)
        self._turn, self._chunker = None, None
        self._early.clear()
        return actions

    def _speak(self, phrases: list[Phrase]) -> list[Action]:
        return [Speak(self._turn, phrase) for phrase in phrases]


@dataclass
class GateCounts:
    """What the gate dropped or let through without the dialogue's word, for diagnostics."""

    ended_chunks: int = 0  # chunks of turns the dialogue node had ended (history, stragglers)
    ended_turns: int = 0  # turns of those chunks
    unconfirmed_turns: int = 0  # turns let through after waiting for the dialogue state


class TurnGate:
    """Passes the response chunks of the turn in progress, drops those of turns that are over.

    :meth:`dialogue` takes each dialogue state (state, turn id); :meth:`offer` each chunk
    (its turn id and the chunk itself) and returns the chunks that may go on, in the order
    they came. A chunk of the state's turn while it is THINKING or SPEAKING passes; a chunk
    of an older turn, or of the state's turn once it is over (listening, interrupted, the
    user speaking), is dropped. A chunk of a newer turn than the state's, or any chunk before
    a state is known, waits: the state that names its turn usually comes within milliseconds
    (it is published before the turn's first chunk, on another topic). After ``wait_s``
    without it (a publisher without a dialogue node, such as ``ros2 topic pub``) the turn
    is let through, and the rest of its chunks pass at once. :meth:`poll` releases what
    waited long enough, or what a new state decided.
    """

    def __init__(self, wait_s: float) -> None:
        if wait_s < 0:
            raise ValueError("wait_s must be >= 0")
        self._wait_s = wait_s
        self._state: tuple[State, int] | None = None
        self._waiting: deque[tuple[int, object, float]] = deque()  # (turn, chunk, arrived)
        self._let_through: int | None = None  # the newest turn let through
        self._ended: deque[int] = deque(maxlen=_REMEMBERED_TURNS)  # turns dropped
        self._state_of_lost_source = False  # the state known came from a node since lost
        self.counts = GateCounts()

    def dialogue(self, state: int, turn_id: int) -> bool:
        """The dialogue node's latest state (call :meth:`poll` to release what it decides);
        False, and nothing changes, for a state value that does not exist."""
        try:
            self._state = (State(state), turn_id)
        except ValueError:
            return False
        self._state_of_lost_source = False
        return True

    def offer(self, turn_id: int, chunk: object, now_s: float) -> list[object]:
        """One chunk as it arrived; the chunks that may go on now."""
        self._waiting.append((turn_id, chunk, now_s))
        return self.poll(now_s)

    def poll(self, now_s: float) -> list[object]:
        """The waiting chunks that may go on now (each turn's chunks keep their order)."""
        ready: list[object] = []
        kept: deque[tuple[int, object, float]] = deque()
        for turn_id, chunk, arrived in self._waiting:
            verdict = self._verdict(turn_id, now_s - arrived)
            if verdict is True:
                ready.append(chunk)
            elif verdict is False:
                self.counts.ended_chunks += 1
                if turn_id not in self._ended:
                    self._ended.append(turn_id)
                    self.counts.ended_turns += 1
            else:
                kept.append((turn_id, chunk, arrived))
        self._waiting = kept
        return ready

    def source_lost(self) -> None:
        """The dialogue node went away: the state known is its last one."""
        self._state_of_lost_source = True

    def source_restarted(self) -> None:
        """A dialogue node appeared (a respawned one numbers its turns from 1 again): forget
        the turns of the one lost, and its state unless the new node's latched state came
        first (the two arrive in either order). A node found for the first time replaces
        none: the state it sent stays (forgetting it let the answers it kept, of turns it
        had ended, be spoken after ``wait_s``)."""
        if self._state_of_lost_source:
            self._state = None
        self._let_through = None
        self._ended.clear()

    @property
    def waiting(self) -> int:
        """Chunks waiting for the dialogue state."""
        return len(self._waiting)

    def _verdict(self, turn_id: int, waited_s: float) -> bool | None:
        """True: pass; False: drop (the turn is over); None: wait for the state."""
        if turn_id == self._let_through:
            return True
        if self._state is not None:
            state, current = self._state
            if turn_id < current or (turn_id == current and state not in _IN_PROGRESS):
                return False
            if turn_id == current:
                self._let_through = turn_id
                return True
        if waited_s >= self._wait_s:
            self.counts.unconfirmed_turns += 1
            self._let_through = turn_id
            return True
        return None
