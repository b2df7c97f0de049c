"""Turn-taking for full-duplex conversation: the dialogue state machine, without ROS.

The dialogue node feeds this machine what the graph reports — the user's voice activity
(echo already removed by the fusion node), transcripts, the model's progress, the speech
node's playback state, goals from behaviour trees — and carries out the actions it returns.
Every method returns the actions in the order they must happen; the machine never blocks,
never reads a clock (times are passed in, in seconds of the node clock) and never raises for
an input that arrives in an unexpected state: such inputs are ignored or folded into the
current turn, so a lost or reordered message cannot wedge the conversation.

States (the values of ``omniflow/msg/DialogueState``)::

    LISTENING ──voice start──▶ USER_SPEAKING ──final transcript──▶ THINKING
        ▲                          ▲    │ (empty: back to LISTENING)   │ first token
        │                          │    └──────────────────────────────┼──────────┐
        │          final transcript│                                   ▼          │
        │                     INTERRUPTED ◀──barge-in (voice ≥ N ms)── SPEAKING   │
        └──────────── speech finished (or never started) ──────────────┘          │
                                  voice start while THINKING: cancel, keep listening

- End of turn: the final transcript of the utterance (the fusion node sends it when the VAD
  has heard ``vad.min_silence_ms`` of silence) is tentative. The machine asks how likely its
  words end the turn (:class:`ScoreTurn`; the node's language model answers through
  :meth:`DialogueManager.turn_score`) and waits, from the end of the speech, as long as
  :class:`~omniflow.core.end_of_turn.EndOfTurnPolicy` says: briefly after "What is this?",
  up to a second after "I would like the". The user speaking again before the wait is over
  continues the same turn (the words so far are prefixed to the next utterance's); no
  answer starts inside the pause. :meth:`DialogueManager.tick` ends the wait.
  The pause is counted in stream time, as far as the fusion node has heard
  (:meth:`DialogueManager.heard`, from the stamps of its voice-activity events, SILENCE
  among them): a fusion node running seconds behind on a loaded machine has not yet heard
  the user go on, and a wait counted on the node clock would end the turn inside the pause.
  Without word from the stream for ``STREAM_FRESH_S`` (no fusion node, a stopped
  microphone), the node clock counts instead.
- Barge-in: while SPEAKING, user speech lasting at least ``barge_in_min_speech_s`` cancels
  generation and playback at once (:class:`Cancel` and the INTERRUPTED state, which the
  speech node obeys within one output block). INTERRUPTED then behaves as USER_SPEAKING: the
  interrupting utterance becomes the next turn.
- The user going on after a pause while the model is still THINKING cancels that generation;
  the words already said are kept and prefixed to the next utterance's text, the newest
  ``MAX_CARRY_WORDS`` of them: speech that keeps coming (a television, a talkative room, the
  recogniser hearing words in noise) made the carried words, and the prompt with them, grow
  turn after turn (238 characters in a 2-minute soak) until no answer started before the next
  speech cancelled it.
- A turn also comes from a goal (a behaviour tree's prompt) or from the proactive policy;
  :meth:`DialogueManager.prompt` refuses while busy unless asked to preempt.
- Stop requests (:class:`StopPhrases`): a final transcript made only of stop phrases ("stop",
  "wait", "hold on", ...) and fillers ("okay", "please", ...) gets no content answer: it
  ends the turn in progress (if a barge-in has not already) and the robot listens again, or
  says the configured one-word acknowledgement (``stop.reply``). When stop clauses only lead
  the utterance ("Stop. What is that animal?"), the stop part ends the turn in progress and
  drops the words a cancelled thinking turn left over; the rest is answered.
- A turn that ends while the user's next utterance is under way (its voice start came, its
  end not yet: "Stop." has its final after "What is that animal?" began) goes to
  USER_SPEAKING, not LISTENING, so the new words are evaluated ahead as they come.
- Unsure hearing (:class:`~omniflow.core.clarify.ClarifyPolicy`): a spoken turn whose final
  the recogniser is unsure of (``clarify.*``) gets the configured request to say it again
  instead of an answer, and its words are not carried into the next turn.

Every :class:`Cancel` carries its :class:`CancelReason` (what the node counts and acts on)
beside the text that goes into messages; :class:`DialogueStats` counts the actions.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import Enum, IntEnum
from typing import Literal

from omniflow.core.clarify import CLARIFY_PARAMS, ClarifyPolicy
from omniflow.core.end_of_turn import END_OF_TURN_PARAMS, EndOfTurnPolicy, without_closing_stop
from omniflow.core.params import ParamSpec

__all__ = [
    "DIALOGUE_PARAMS",
    "MAX_CARRY_WORDS",
    "STREAM_FRESH_S",
    "AnswerAhead",
    "AwaitTurnEnd",
    "Busy",
    "Cancel",
    "CancelReason",
    "complete_sentences",
    "DialogueManager",
    "DialogueStats",
    "ScoreTurn",
    "StartTurn",
    "State",
    "StateChanged",
    "StopPhrases",
    "TurnEnded",
    "UserSaid",
    "Warm",
]


# The turn-taking parameters of the dialogue node (all live: see DialogueManager.set_params).
DIALOGUE_PARAMS = (
    ParamSpec(
        "barge_in.enabled", True, "User speech may interrupt the robot while it speaks", live=True
    ),
    ParamSpec(
        "barge_in.min_speech_ms",
        60,
        "User speech at least this long interrupts the "
        "robot (the fusion node's VAD confirms speech after its vad.min_speech_ms, 60 by "
        "default, with the robot's own voice removed: then the start itself interrupts)",
        unit="ms",
        minimum=0,
        maximum=2000,
        live=True,
    ),
    ParamSpec(
        "speech_start_timeout_s",
        3.0,
        "A complete answer that the speech node has not "
        "started playing after this long ends the turn as not played (no speech node, or a "
        "muted one; counted as unplayed, with a warning); a speech node that starts within "
        "it still speaks the answer from its first piece",
        unit="s",
        minimum=0.5,
        maximum=60.0,
        live=True,
    ),
    ParamSpec(
        "user_turn_timeout_s",
        6.0,
        "While the user speaks (or after a barge-in), this long without a voice-activity "
        "event or transcript gives the utterance up and listens again (the fusion node died, "
        "or its messages were lost); longer than the final transcript takes after the end of "
        "speech",
        unit="s",
        minimum=1.0,
        maximum=120.0,
        live=True,
    ),
    ParamSpec(
        "stop.words",
        "stop, stop it, stop that, stop talking, wait, hold on, hang on, be quiet, quiet, "
        "shut up, that's enough, enough, never mind, nevermind, cancel, pause, halt, silence",
        "Comma-separated phrases that ask the robot to stop: an utterance made only of "
        "these and stop.fillers gets no content answer (a leading one ends the turn in "
        "progress and the rest is answered)",
        live=True,
    ),
    ParamSpec(
        "stop.fillers",
        "okay, ok, oh, um, uh, hmm, please, hey, robot, now, just, a, second, sec, moment, "
        "minute, right, all, alright, no, thanks, thank you, you, there, for",
        "Comma-separated words that may stand beside a stop phrase and still leave it a stop "
        'request ("okay, stop please"); alone they ask for nothing',
        live=True,
    ),
    ParamSpec(
        "stop.reply",
        "",
        'What the robot says to a stop request ("Okay."); empty: nothing',
        live=True,
    ),
    *CLARIFY_PARAMS,
    *END_OF_TURN_PARAMS,
)


class State(IntEnum):
    """Dialogue states; the values are those of ``omniflow/msg/DialogueState``."""

    LISTENING = 0
    USER_SPEAKING = 1
    THINKING = 2
    SPEAKING = 3
    INTERRUPTED = 4


class CancelReason(Enum):
    """Why a turn in progress was cancelled."""

    BARGE_IN = "barge_in"  # the user spoke over the robot long enough
    USER_WENT_ON = "user_went_on"  # the user went on speaking while the model was thinking
    PREEMPTED = "preempted"  # a newer turn (a goal, a proactive turn) took its place
    REQUESTED = "requested"  # the turn's goal was cancelled
    TIMED_OUT = "timed_out"  # the turn's goal ran out of time
    STOP_REQUEST = "stop_request"  # the user asked the robot to stop
    DEACTIVATED = "deactivated"  # the dialogue node stopped taking turns
    SPEECH_LOST = "speech_lost"  # the speech node went away while it played the answer


Source = Literal["speech", "goal", "proactive"]
Outcome = Literal["done", "unplayed", "interrupted", "cancelled", "failed", "empty"]


@dataclass(frozen=True)
class StateChanged:
    """Publish the new state (``reason`` says what caused it)."""

    state: State
    turn_id: int
    reason: str


@dataclass(frozen=True)
class StartTurn:
    """Generate an answer to ``user_text``; ``utterance_id`` is 0 unless it was spoken.
    ``reply``, when set, is the whole answer (the acknowledgement of a stop request, the
    request to say it again): said as it is, without the model."""

    turn_id: int
    user_text: str
    source: Source
    utterance_id: int = 0
    reply: str = ""


@dataclass(frozen=True)
class Cancel:
    """Stop generating ``turn_id`` now (and, when ``stop_speech``, silence its playback);
    ``reason`` is the text for messages, ``cause`` what it was."""

    turn_id: int
    reason: str
    stop_speech: bool
    cause: CancelReason


@dataclass(frozen=True)
class Warm:
    """The user's words so far: evaluate them ahead so the end of the turn finds them ready."""

    user_text: str


@dataclass(frozen=True)
class ScoreTurn:
    """Ask the model how likely ``user_text`` (the user's words so far, as
    :func:`~omniflow.core.end_of_turn.without_closing_stop` gives them) ends the turn; the
    answer goes to :meth:`DialogueManager.turn_score` with ``utterance_id``."""

    utterance_id: int
    user_text: str


@dataclass(frozen=True)
class AwaitTurnEnd:
    """The user's words so far scored ``probability`` of ending the turn (None: not scored):
    the machine waits for more speech until ``wait_s`` after the end of the speech."""

    utterance_id: int
    probability: float | None
    wait_s: float


@dataclass(frozen=True)
class AnswerAhead:
    """The user's turn is likely to start with ``user_text`` once the pause after the words
    of ``utterance_id`` has lasted: start its answer now, to be taken over by the turn if it
    starts with exactly these words (and dropped otherwise). An empty ``user_text``: the
    user went on, drop any answer ahead."""

    utterance_id: int
    user_text: str


@dataclass(frozen=True)
class UserSaid:
    """The user finished an utterance with this text (the ``user_said`` event)."""

    utterance_id: int
    text: str


@dataclass(frozen=True)
class TurnEnded:
    """A turn is over: ``outcome`` and the answer as far as it went."""

    turn_id: int
    outcome: Outcome
    response: str
    reason: str


Action = (
    StateChanged
    | StartTurn
    | Cancel
    | Warm
    | ScoreTurn
    | AwaitTurnEnd
    | AnswerAhead
    | UserSaid
    | TurnEnded
)


_STOPPED = "the user asked the robot to stop"
_UNSURE = "unsure of the words heard: asked to say it again"
STREAM_FRESH_S = 1.0  # how long a stream position counts as the present without progress
MAX_CARRY_WORDS = 32  # a long spoken sentence and then some
_STREAM_RESTART_S = 1.0  # a stream position this far back is a new stream (as fusion's)
# VoiceActivity.speech_s is a float32: the 60 ms the fusion node confirms a start after
# arrives as 0.0599999987 s, which a plain comparison with 0.06 s takes for too short, and
# the barge-in then waited for the next ONGOING event, a fusion slice (40 ms) later.
_SPEECH_S_SLACK = 1e-6
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)")


def complete_sentences(text: str) -> str:
    """``text`` up to its last complete sentence ("" when none): what a cut-off answer keeps in
    the conversation history. A fragment such as "This is" would teach a small model to
    answer with fragments; the finished sentences were said and stay.

    >>> complete_sentences("It is a cup. It holds")
    'It is a cup.'
    """
    ends = [m.end() for m in _SENTENCE_END.finditer(text)]
    return text[: ends[-1]].strip() if ends else ""


_CLAUSE = re.compile(r"[^.,!?;:…—–]+[.,!?;:…—–]*|[.,!?;:…—–]+")
_WORDS = re.compile(r"[a-z0-9']+")


def _words(text: str) -> list[str]:
    return _WORDS.findall(text.lower().replace("’", "'"))


class StopPhrases:
    """Which utterances ask the robot to stop (see :meth:`split` for the rule).

    Args:
        phrases: the stop phrases ("stop", "hold on"), matched as whole words, case and
            punctuation aside.
        fillers: words that may stand beside a stop phrase ("okay", "please").
    """

    def __init__(self, phrases: list[str] | tuple[str, ...], fillers: list[str] | tuple[str, ...]):
        parsed = {tuple(_words(p)) for p in phrases} - {()}
        self.phrases = sorted(parsed, key=len, reverse=True)  # "stop it" before "stop"
        self.fillers = frozenset(w for f in fillers for w in _words(f))

    @classmethod
    def parse(cls, phrases: str, fillers: str) -> StopPhrases:
        """From the comma-separated ``stop.words`` and ``stop.fillers`` values."""
        return cls(phrases.split(","), fillers.split(","))

    def _kind(self, clause: str) -> str:
        """The clause's kind: "stop" (stop phrases and fillers, at least one stop phrase),
        "filler" (fillers only, or no words) or "content" (any other word)."""
        words = _words(clause)
        found = False
        i = 0
        while i < len(words):
            phrase = next((p for p in self.phrases if tuple(words[i : i + len(p)]) == p), None)
            if phrase is not None:
                found = True
                i += len(phrase)
            elif words[i] in self.fillers:
                i += 1
            else:
                return "content"
        return "stop" if found else "filler"

    def split(self, text: str) -> tuple[bool, str]:
        """Whether ``text`` asks to stop, and what is left to answer.

        The text is cut into clauses at punctuation (``. , ! ? ; : …`` and dashes). The
        clauses that lead it and hold only stop phrases and fillers, with at least one stop
        phrase among them, are the stop part; the rest (from the first clause with another
        word) is what is left to answer. No stop part: ``(False, text)``.

        >>> stop = StopPhrases(["stop", "hold on"], ["okay"])
        >>> stop.split("Okay, hold on. Stop!")
        (True, '')
        >>> stop.split("Stop. What is that animal?")
        (True, 'What is that animal?')
        >>> stop.split("Stop the music")
        (False, 'Stop the music')
        """
        stop = False
        for match in _CLAUSE.finditer(text):
            kind = self._kind(match.group())
            if kind == "content":
                return (True, text[match.start() :].strip()) if stop else (False, text)
            stop = stop or kind == "stop"
        return (True, "") if stop else (False, text)


class Busy(Exception):
    """A new turn was asked for while another is in progress (and preemption was not)."""


@dataclass
class _Pending:
    """A final transcript waiting for the end of the turn to be confirmed."""

    utterance_id: int
    text: str  # the final's own words (the carry is added when the turn starts)
    speech_end: float
    deadline: float
    last_word_confidence: float  # the recogniser's, of the final's last word (NaN: none)
    confidence: float  # the recogniser's, of the whole final (NaN: none)
    scored: bool = False


@dataclass
class _Turn:
    turn_id: int
    source: Source
    response: str = ""
    generated: bool = False  # the model finished (or failed)
    done_at: float = 0.0
    speech_started: bool = False


class DialogueManager:
    """The dialogue state machine; see the module docstring.

    Args:
        barge_in: whether user speech may interrupt the robot.
        barge_in_min_speech_s: user speech at least this long (as the voice-activity events
            report it) interrupts the robot.
        speech_start_timeout_s: once the answer is complete, how long to wait for the speech
            node to start playing it before going back to listening (no speech node, or a
            muted one, must not hold the conversation).
        user_turn_timeout_s: while the user speaks, how long without a voice-activity event
            or transcript before the utterance is given up (no fusion node any more).
        stop: the stop requests (default: the ``stop.words`` and ``stop.fillers`` defaults).
        stop_reply: what to say to a stop request ("": nothing).
        end_of_turn: how long to wait after the speech for an end-of-turn probability
            (default: none, a final starts the turn at once; the node passes the
            ``end_of_turn.*`` parameters).
        clarify: when to ask the user to say it again (default: never; the node passes the
            ``clarify.*`` parameters).
    """

    def __init__(
        self,
        *,
        barge_in: bool = True,
        barge_in_min_speech_s: float = 0.06,
        speech_start_timeout_s: float = 2.0,
        user_turn_timeout_s: float = 6.0,
        stop: StopPhrases | None = None,
        stop_reply: str = "",
        end_of_turn: EndOfTurnPolicy | None = None,
        clarify: ClarifyPolicy | None = None,
    ) -> None:
        if barge_in_min_speech_s < 0 or speech_start_timeout_s <= 0 or user_turn_timeout_s <= 0:
            raise ValueError(
                "barge_in_min_speech_s must be >= 0, speech_start_timeout_s and "
                "user_turn_timeout_s > 0"
            )
        self.barge_in = barge_in
        self.barge_in_min_speech_s = barge_in_min_speech_s
        self.speech_start_timeout_s = speech_start_timeout_s
        self.user_turn_timeout_s = user_turn_timeout_s
        self._heard_at = 0.0  # the last voice-activity event or transcript
        self.stop = stop if stop is not None else _DEFAULT_STOP
        self.stop_reply = stop_reply.strip()
        self.end_of_turn = end_of_turn if end_of_turn is not None else _NO_END_OF_TURN_WAIT
        self.clarify = clarify if clarify is not None else ClarifyPolicy.off()
        self.state = State.LISTENING
        self.turn_id = 0  # the newest turn started
        self._turn: _Turn | None = None  # the turn being generated or spoken
        self._utterance = 0  # the utterance the user is speaking (0: none)
        self._warm_text = ""
        self._ahead = False  # an answer ahead was asked for and may be running
        self._carry = ""  # words of a cancelled THINKING turn, kept for the next
        self._last_user_text = ""
        # an utterance heard while barge-in was off: its id, text and confidence
        self._held: tuple[int, str, float] | None = None
        self._pending: _Pending | None = None  # a final waiting for the end of the turn
        self._voice = 0  # the utterance whose voice started last
        self._voice_at = 0.0  # when it started (its onset in stream time when known)
        self._voice_open = False  # no end or final of it yet
        self._stream: float | None = None  # how far the fusion node has heard the stream
        self._stream_at = 0.0  # when that last advanced (node clock)

    @classmethod
    def from_params(cls, params: Mapping[str, object]) -> DialogueManager:
        """A manager set from ``DIALOGUE_PARAMS`` values."""
        manager = cls()
        manager.set_params(params)
        return manager

    def set_params(self, params: Mapping[str, object]) -> None:
        """Take ``DIALOGUE_PARAMS`` values (checked against their specs) from now on."""
        self.barge_in = bool(params["barge_in.enabled"])
        self.barge_in_min_speech_s = float(params["barge_in.min_speech_ms"]) / 1000
        self.speech_start_timeout_s = float(params["speech_start_timeout_s"])
        self.user_turn_timeout_s = float(params["user_turn_timeout_s"])
        self.stop = StopPhrases.parse(str(params["stop.words"]), str(params["stop.fillers"]))
        self.stop_reply = str(params["stop.reply"]).strip()
        self.end_of_turn = EndOfTurnPolicy.from_params(params)
        self.clarify = ClarifyPolicy.from_params(params)

    # ----------------------------------------------------------------- queries
    @property
    def busy(self) -> bool:
        """A turn is being generated or spoken, or the user is speaking."""
        return self.state != State.LISTENING

    @property
    def utterance(self) -> int:
        """The utterance the user is saying (its words are evaluated ahead); 0 when none."""
        return self._utterance

    @property
    def active_turn(self) -> int:
        """The turn being generated or spoken; 0 when none."""
        return self._turn.turn_id if self._turn is not None else 0

    # ----------------------------------------------------------------- the user's voice
    def voice_start(
        self, utterance_id: int, speech_s: float, now: float, onset: float | None = None
    ) -> list[Action]:
        """The fusion node confirmed user speech (echo removed) that began at ``onset``
        (stream time; default ``now``)."""
        self._heard_at = now
        actions: list[Action] = []
        self._voice, self._voice_at = utterance_id, now if onset is None else onset
        self._voice_open = True
        if self.state == State.LISTENING:
            self._utterance = utterance_id
            actions.append(self._set(State.USER_SPEAKING, "the user started speaking"))
        elif self.state == State.THINKING and self._turn is not None:
            turn = self._turn
            if turn.source == "speech":
                self._carry = self._last_user_text
            actions += self._end_turn(
                "cancelled",
                "the user went on speaking",
                now,
                stop_speech=False,
                cause=CancelReason.USER_WENT_ON,
            )
            self._utterance = utterance_id
            actions.append(self._set(State.USER_SPEAKING, "the user went on speaking"))
        elif self.state in (State.USER_SPEAKING, State.INTERRUPTED):
            self._utterance = utterance_id
            pending, self._pending = self._pending, None
            if pending is not None:  # the user went on after a pause: one turn
                self._carry = without_closing_stop(self._with_carry(pending.text))
            if self._ahead:  # the words answered ahead were not the end after all
                self._ahead = False
                actions.append(AnswerAhead(utterance_id, ""))
        actions += self.voice_ongoing(utterance_id, speech_s, now)
        return actions

    def voice_ongoing(self, utterance_id: int, speech_s: float, now: float) -> list[Action]:
        """The user is still speaking (``speech_s`` so far): a barge-in once it is long enough."""
        self._heard_at = now
        if (
            self.state != State.SPEAKING
            or not self.barge_in
            or speech_s + _SPEECH_S_SLACK < self.barge_in_min_speech_s
        ):
            return []
        self._utterance = utterance_id
        reason = f"barge-in: the user spoke over the robot for {speech_s * 1000:.0f} ms"
        actions = self._end_turn(
            "interrupted", reason, now, stop_speech=True, cause=CancelReason.BARGE_IN
        )
        actions.append(self._set(State.INTERRUPTED, reason))
        return actions

    def voice_end(self, utterance_id: int, now: float) -> list[Action]:
        """The VAD heard the end of the utterance; the final transcript follows (or came)."""
        self._heard_at = now
        if utterance_id == self._voice:
            self._voice_open = False
        return []

    def heard(self, stream_s: float, now: float) -> list[Action]:
        """The fusion node has heard the stream up to ``stream_s`` (stream time): a pause
        after the user's words that lasted the end-of-turn wait there starts the turn. A
        position more than a second back is a new stream (a bag looping, a restarted
        microphone): the pause of the old one is over."""
        restarted = self._stream is not None and stream_s < self._stream - _STREAM_RESTART_S
        if self._stream is None or stream_s > self._stream or restarted:
            self._stream, self._stream_at = stream_s, now
        if restarted:
            return self._commit(now)
        return self._pause_over(now)

    def transcript(
        self,
        utterance_id: int,
        text: str,
        final: bool,
        now: float,
        speech_end: float | None = None,
        last_word_confidence: float = math.nan,
        confidence: float = math.nan,
    ) -> list[Action]:
        """A partial or final transcript of the user's utterance; ``speech_end`` is when the
        speech ended (the final's end stamp; default ``now``), from which the end-of-turn
        wait counts; ``last_word_confidence``: the recogniser's confidence in the final's
        last word (NaN: it gave none), a guess gets the long wait; ``confidence``: its
        confidence in the whole final (NaN: none), a final it is unsure of is asked again."""
        self._heard_at = now
        text = " ".join(text.split())
        listening_to_user = self.state in (State.USER_SPEAKING, State.INTERRUPTED, State.LISTENING)
        if final and utterance_id == self._voice:
            self._voice_open = False
        if not final:
            if self.state in (State.USER_SPEAKING, State.INTERRUPTED) and text:
                full = self._with_carry(text)
                if full != self._warm_text:
                    self._warm_text = full
                    return [Warm(full)]
            return []
        if not listening_to_user:
            if self.stop.split(text)[0]:  # heard without a barge-in (off, or too short)
                self._held = None  # a question held for later was stopped too
                return self._end_turn(
                    "interrupted",
                    _STOPPED,
                    now,
                    stop_speech=True,
                    cause=CancelReason.STOP_REQUEST,
                ) + self._user_turn(utterance_id, text, now, confidence)
            if text and self.state == State.SPEAKING:
                self._held = (utterance_id, text, confidence)  # barge-in off: answer it later
            return []
        return self._tentative_end(
            utterance_id, text, now, speech_end, last_word_confidence, confidence
        )

    def _tentative_end(
        self,
        utterance_id: int,
        text: str,
        now: float,
        speech_end: float | None,
        last_word_confidence: float,
        confidence: float,
    ) -> list[Action]:
        """A final heard while listening to the user: ask whether it ends the turn, or
        start the turn at once (end-of-turn waits off, a stop request, nothing said)."""
        earlier = self._pending
        if earlier is not None and earlier.utterance_id != utterance_id:
            self._carry = without_closing_stop(self._with_carry(earlier.text))  # start lost
        self._pending = None
        full = self._with_carry(text)
        if not self.end_of_turn.enabled or not full or self.stop.split(text)[0]:
            return self._user_turn(utterance_id, text, now, confidence)
        heard = self._stream_now(now)
        end = heard if speech_end is None else min(speech_end, heard)
        longest = max(self.end_of_turn.long_wait_s, self.end_of_turn.unscored_wait_s)
        if utterance_id < self._voice and 0 <= self._voice_at - end <= longest:
            # A slow final: the user spoke again within the wait, the pause is over; the
            # next utterance's final (fusion sends them in order) carries these words. (Speech
            # that began before this one ended is from a new stream: a bag looping.)
            self._carry = without_closing_stop(full)
            return []
        if heard >= end + longest:  # a final slower than any wait: nothing left to wait for
            return self._user_turn(utterance_id, text, now, confidence)
        # Until the score arrives, the longest wait holds (a lost score cannot wedge it).
        self._pending = _Pending(
            utterance_id, text, end, end + longest, last_word_confidence, confidence
        )
        actions: list[Action] = [ScoreTurn(utterance_id, without_closing_stop(full))]
        if self.state == State.LISTENING:  # its start was not heard: the user is speaking
            self._utterance = utterance_id
            actions.append(self._set(State.USER_SPEAKING, "the user paused"))
        return actions

    def turn_score(self, utterance_id: int, probability: float | None, now: float) -> list[Action]:
        """The model's end-of-turn probability for the words :class:`ScoreTurn` asked about
        (None: it could not score them): start the turn now, or wait for more speech."""
        pending = self._pending
        if pending is None or pending.utterance_id != utterance_id or pending.scored:
            return []  # the user went on meanwhile, or a stale answer
        pending.scored = True
        wait_s = self.end_of_turn.wait_s(probability, pending.text, pending.last_word_confidence)
        pending.deadline = pending.speech_end + wait_s
        started = self._pause_over(now)
        if started:
            return started
        actions: list[Action] = [AwaitTurnEnd(utterance_id, probability, wait_s)]
        if self.end_of_turn.answers_ahead(probability, pending.text, pending.last_word_confidence):
            self._ahead = True
            actions.append(AnswerAhead(utterance_id, self._with_carry(pending.text)))
        return actions

    def _stream_now(self, now: float) -> float:
        """The present for a pause: how far the stream is heard, or the node clock when the
        stream has not advanced for ``STREAM_FRESH_S``."""
        if self._stream is not None and now - self._stream_at < STREAM_FRESH_S:
            return self._stream
        return now

    def _pause_over(self, now: float) -> list[Action]:
        """Start the pending turn if the pause after it has lasted its wait."""
        if self._pending is not None and self._stream_now(now) >= self._pending.deadline:
            return self._commit(now)
        return []

    def _commit(self, now: float) -> list[Action]:
        """The pause after the pending final lasted: it ends the user's turn."""
        pending, self._pending = self._pending, None
        if pending is None:
            return []
        return self._user_turn(pending.utterance_id, pending.text, now, pending.confidence)

    def _user_turn(
        self, utterance_id: int, text: str, now: float, confidence: float = math.nan
    ) -> list[Action]:
        stop, rest = self.stop.split(text)
        if stop:
            self._carry = ""  # the words of a cancelled turn were stopped too
        full = self._with_carry(rest)
        self._carry = ""
        self._warm_text = ""
        self._utterance = 0
        if not full:
            if not stop:
                return [self._listen("nothing was recognised")]
            self._last_user_text = ""  # nothing to carry into the next turn
            actions: list[Action] = [UserSaid(utterance_id, text)]
            if not self.stop_reply:
                return [*actions, self._listen(_STOPPED)]
            return actions + self._start(
                "speech", text, utterance_id, now, _STOPPED, reply=self.stop_reply
            )
        actions = [UserSaid(utterance_id, text if stop else full)]
        if self.clarify.asks(rest, confidence):
            self._last_user_text = ""  # not words to build on
            if not self.clarify.reply:
                return [*actions, self._listen(_UNSURE)]
            return actions + self._start(
                "speech", full, utterance_id, now, _UNSURE, reply=self.clarify.reply
            )
        self._last_user_text = full
        actions += self._start("speech", full, utterance_id, now, "the user finished speaking")
        return actions

    def _with_carry(self, text: str) -> str:
        if not self._carry:
            return text
        carried = self._carry.split()[-MAX_CARRY_WORDS:]
        return " ".join([*carried, text]).strip()

    # ----------------------------------------------------------------- turns from elsewhere
    def prompt(
        self, text: str, source: Source, now: float, *, preempt: bool = False
    ) -> list[Action]:
        """Start a turn from a goal or the proactive policy.

        Raises:
            Busy: the dialogue is busy and ``preempt`` is false.
            ValueError: ``text`` is empty.
        """
        text = " ".join(text.split())
        if not text:
            raise ValueError("the prompt is empty")
        actions: list[Action] = []
        if self.busy:
            if not preempt:
                raise Busy(f"busy ({self.state.name.lower()}, turn {self.turn_id})")
            if self._turn is not None:
                actions += self._end_turn(
                    "cancelled",
                    f"preempted by a {source} turn",
                    now,
                    stop_speech=True,
                    cause=CancelReason.PREEMPTED,
                )
            self._carry = self._warm_text = ""
            self._utterance = 0
            self._pending = None
        actions += self._start(source, text, 0, now, f"a {source} turn")
        return actions

    def cancel(
        self, reason: str, now: float, *, cause: CancelReason = CancelReason.REQUESTED
    ) -> list[Action]:
        """Cancel the turn in progress (by default: its goal was cancelled); silence
        included."""
        return self._end_turn(
            "cancelled", reason, now, stop_speech=True, cause=cause, then=State.LISTENING
        )

    # ----------------------------------------------------------------- the model
    def token(self, turn_id: int, text: str, now: float) -> list[Action]:
        """The model produced ``text`` for ``turn_id``; the first piece starts SPEAKING."""
        turn = self._current(turn_id)
        if turn is None:
            return []
        turn.response += text
        if self.state == State.THINKING and turn.response.strip():
            return [self._set(State.SPEAKING, "the answer is streaming")]
        return []

    def generated(self, turn_id: int, now: float, error: str = "") -> list[Action]:
        """The model finished ``turn_id`` (``error`` when it failed)."""
        turn = self._current(turn_id)
        if turn is None:
            return []
        turn.generated = True
        turn.done_at = now
        if error:
            return self._end_turn("failed", error, now, stop_speech=False, then=State.LISTENING)
        if not turn.response.strip():
            return self._end_turn(
                "empty", "the model gave no answer", now, stop_speech=False, then=State.LISTENING
            )
        return []

    # ----------------------------------------------------------------- playback
    def speech(self, speaking: bool, turn_id: int, now: float) -> list[Action]:
        """The speech node's state: playing ``turn_id`` or idle after it."""
        turn = self._current(turn_id)
        if turn is None:
            return []
        if speaking:
            turn.speech_started = True
            return []
        if turn.speech_started and turn.generated:
            return self._end_turn(
                "done", "the robot finished speaking", now, stop_speech=False, then=State.LISTENING
            )
        return []

    def speech_lost(self, now: float) -> list[Action]:
        """The speech node went away (it died, or the network to it is cut): a turn it was
        playing ends, since its end of playback will never come. (An answer it had not
        started playing ends by the ``speech_start_timeout_s`` rule.)"""
        turn = self._turn
        if turn is None or not turn.speech_started:
            return []
        return self._end_turn(
            "failed",
            "the speech node went away while it played the answer",
            now,
            stop_speech=False,
            cause=CancelReason.SPEECH_LOST,
            then=State.LISTENING,
        )

    def tick(self, now: float) -> list[Action]:
        """Time-outs: a pause after the user's words that lasted the end-of-turn wait starts
        the turn; an answer nobody started playing ends after ``speech_start_timeout_s``
        (outcome ``unplayed``: the answer was lost, and says so); an utterance nothing more is
        heard of is given up after ``user_turn_timeout_s``."""
        started = self._pause_over(now)
        if started:
            return started
        if (
            self.state in (State.USER_SPEAKING, State.INTERRUPTED)
            and now - self._heard_at >= self.user_turn_timeout_s
        ):
            self._utterance = 0
            self._warm_text = ""
            self._voice_open = False
            return [
                self._set(
                    State.LISTENING,
                    f"nothing more heard of the utterance for {self.user_turn_timeout_s:g} s "
                    "(no final transcript): listening again",
                )
            ]
        turn = self._turn
        if (
            turn is not None
            and turn.generated
            and not turn.speech_started
            and now - turn.done_at >= self.speech_start_timeout_s
        ):
            return self._end_turn(
                "unplayed",
                f"the answer was not played: no speech node started it within "
                f"{self.speech_start_timeout_s:g} s (speech_start_timeout_s)",
                now,
                stop_speech=False,
                then=State.LISTENING,
            )
        return []

    # ----------------------------------------------------------------- internals
    def _current(self, turn_id: int) -> _Turn | None:
        turn = self._turn
        return turn if turn is not None and turn.turn_id == turn_id else None

    def _set(self, state: State, reason: str) -> StateChanged:
        self.state = state
        return StateChanged(state, self.turn_id, reason)

    def _listen(self, reason: str) -> StateChanged:
        """LISTENING once a turn is over, or USER_SPEAKING when the user's next utterance
        is already under way: a stop request's final comes after the words that follow it
        began ("Stop. What is that animal?"), and those words are then evaluated ahead
        like any other's."""
        if not self._voice_open:
            return self._set(State.LISTENING, reason)
        self._utterance = self._voice
        return self._set(State.USER_SPEAKING, f"{reason}; the user is speaking")

    def _start(
        self,
        source: Source,
        text: str,
        utterance_id: int,
        now: float,
        reason: str,
        *,
        reply: str = "",
    ) -> list[Action]:
        self.turn_id += 1
        self._turn = _Turn(self.turn_id, source)
        self._ahead = False  # the turn takes the answer ahead over, or it is dropped
        return [
            StartTurn(self.turn_id, text, source, utterance_id, reply),
            self._set(State.THINKING, reason),
        ]

    def _end_turn(
        self,
        outcome: Outcome,
        reason: str,
        now: float,
        *,
        stop_speech: bool,
        cause: CancelReason | None = None,
        then: State | None = None,
    ) -> list[Action]:
        """End the turn in progress; one that is still generating, or must be silenced, is
        cancelled for ``cause`` (only the model's own end of a turn passes none)."""
        turn, self._turn = self._turn, None
        if turn is None:
            return []
        actions: list[Action] = []
        if cause is not None and (not turn.generated or stop_speech):
            actions.append(Cancel(turn.turn_id, reason, stop_speech, cause))
        actions.append(TurnEnded(turn.turn_id, outcome, turn.response, reason))
        if then is not None:
            actions.append(
                self._listen(reason) if then == State.LISTENING else self._set(then, reason)
            )
            if then == State.LISTENING and self._held is not None:
                utterance_id, text, confidence = self._held
                self._held = None
                actions += self._user_turn(utterance_id, text, now, confidence)
        return actions


_NO_END_OF_TURN_WAIT = replace(EndOfTurnPolicy.default(), enabled=False)
_DEFAULT_STOP = StopPhrases.parse(
    next(spec.default for spec in DIALOGUE_PARAMS if spec.name == "stop.words"),
    next(spec.default for spec in DIALOGUE_PARAMS if spec.name == "stop.fillers"),
)

# The turn outcomes each counter of DialogueStats counts.
_OUTCOME_COUNTERS = {
    "done": "turns_done",
    "cancelled": "cancelled",
    "interrupted": "cancelled",
    "failed": "failed",
    "unplayed": "unplayed",
}


@dataclass
class DialogueStats:
    """Counters of what the conversation did, from the manager's actions (:meth:`record`)."""

    turns: int = 0
    turns_done: int = 0
    end_of_turn_waits: int = 0  # finals that waited for the pause after them to last
    barge_ins: int = 0
    cancelled: int = 0
    failed: int = 0
    unplayed: int = 0  # answers no speech node played (lost: none was there in time)
    proactive: int = 0
    asked_again: int = 0  # spoken turns the recogniser was unsure of (clarify.*)
    last_error: str = ""

    def record(self, action: Action) -> None:
        """Count one action the manager returned."""
        if isinstance(action, StartTurn):
            self.turns += 1
            if action.source == "proactive":
                self.proactive += 1
        elif isinstance(action, AwaitTurnEnd):
            self.end_of_turn_waits += 1
        elif isinstance(action, StateChanged) and action.reason == _UNSURE:
            self.asked_again += 1
        elif isinstance(action, Cancel):
            if action.cause is CancelReason.BARGE_IN:
                self.barge_ins += 1
        elif isinstance(action, TurnEnded):
            counter = _OUTCOME_COUNTERS.get(action.outcome)
            if counter is not None:
                setattr(self, counter, getattr(self, counter) + 1)
            if action.outcome == "failed":
                self.last_error = action.reason
