"""What one turn of the conversation is conditioned on, kept as plain values, without ROS.

The dialogue node feeds :class:`TurnContext` what the graph reports (when each utterance
started, the fusion node's associations, the vision encoder's scenes, camera frames) and the
turns as they start and end; the context answers what goes into the model's prompt:

- **what the camera saw**: the vision tokens the association chose for the utterance (the
  newest association naming the utterance: the fusion node decides again by the words of
  the final transcript; else the one whose trigger is within ``TRIGGER_MATCH_NS`` of the
  utterance's start), else the newest scene when it is recent enough; a turn that is not
  spoken (a goal, a proactive turn) gets the newest scene;
- **frames** for a model that sees images: the ones nearest the chosen stamps, at most
  ``MAX_IMAGES``, each within ``FRAME_MATCH_NS``. Three stores, so a chosen frame is still
  there when its turn starts (seconds later): the newest camera frames (``_FRAMES``), the
  frames the fusion node encoded (a scene names each; only those can be chosen, and a named
  object is looked for seconds back), ``_ENCODED`` deep, and the frames an association chose,
  kept until the turn of their utterance ends (at most ``_PINNED`` utterances);
- **history**: what the user and the robot said, oldest first, at most ``max_turns`` entries,
  each user turn with the scene its prompt carried.
  An answer cut short keeps only its finished sentences (a fragment would be imitated); a
  failed one keeps what was said;
- **when to speak unprompted**: the proactive policy's facts (a person appearing in the
  scenes, idle time, the power state) and its clock are the node clock's (sim time under
  replay), not the wall clock.

Every stamp is in nanoseconds of the node clock. A clock of 0 is one that has not started
(sim time before the first ``/clock``). Not thread-safe: the node holds its lock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from omniflow.core.dialogue import StartTurn, TurnEnded, complete_sentences
from omniflow.core.params import ParamSpec
from omniflow.core.proactive import ProactivePolicy, Rule
from omniflow.core.prompt import Prompt, Turn
from omniflow.core.timing import NS_PER_MS, NS_PER_S

__all__ = [
    "FRAME_MATCH_NS",
    "MAX_IMAGES",
    "TRIGGER_MATCH_NS",
    "TURN_PARAMS",
    "Seen",
    "TurnContext",
    "trim_oldest",
]

# The dialogue node's parameters for what goes into a turn and when to speak unprompted.
TURN_PARAMS = (
    ParamSpec(
        "history.max_turns",
        16,
        "Earlier turns (user and robot each count one) kept "
        "for the model; older ones are forgotten (the context trims further when full)",
        minimum=0,
        maximum=256,
        live=True,
    ),
    ParamSpec(
        "vision.enabled",
        True,
        "Describe what the camera saw (the frames the "
        "association chose, else the newest scene) to the model on spoken turns",
        live=True,
    ),
    ParamSpec(
        "vision.max_age_ms",
        3000,
        "The newest scene is used only when younger than this",
        unit="ms",
        minimum=0,
        maximum=60000,
        live=True,
    ),
    ParamSpec(
        "proactive.enabled", True, "Let the robot speak unprompted when a rule holds", live=True
    ),
    ParamSpec(
        "proactive.rate_hz",
        1.0,
        "How often the proactive rules are checked",
        unit="Hz",
        minimum=0.1,
        maximum=10.0,
        read_only=True,
    ),
    ParamSpec(
        "proactive.min_interval_s",
        30.0,
        "At least this long between proactive turns (and between two firings of one rule)",
        unit="s",
        minimum=0.0,
        maximum=86400.0,
        read_only=True,
    ),
    ParamSpec(
        "proactive.after_turn_s",
        5.0,
        "No proactive turn until this long after the last turn ended: the user may be "
        "about to answer the robot (a person who comes into view meanwhile is not greeted)",
        unit="s",
        minimum=0.0,
        maximum=3600.0,
        read_only=True,
    ),
    ParamSpec(
        "proactive.person_gone_s",
        5.0,
        "A person in view counts as having appeared (person_appeared) only when none was "
        "seen for this long before: a missed detection or a glance away is not a new arrival",
        unit="s",
        minimum=0.0,
        maximum=3600.0,
        read_only=True,
    ),
    ParamSpec(
        "proactive.rules",
        "person_appeared => Someone just came into view. Greet them in one short sentence.",
        "Proactive rules, one per line: 'CONDITION [and "
        "CONDITION] => INSTRUCTION'; facts: person_present, person_appeared, idle_s, "
        "battery_percent, temperature_c",
        read_only=True,
    ),
)

# An association belongs to an utterance when its trigger is this close to the speech start.
TRIGGER_MATCH_NS = 200 * NS_PER_MS
# How many of the chosen frames go to the model; a frame matches a chosen stamp within this.
MAX_IMAGES = 2
FRAME_MATCH_NS = 50 * NS_PER_MS
# The newest associations, scenes and frames kept (frames: about 3 s at 15 frames/s), and
# how many utterances and turns are remembered.
_ASSOCIATIONS = 32
_SCENES = 64
_FRAMES = 48
_ENCODED = 24  # 5 s of encoded frames at 5 Hz, 12 s at 2 Hz
_PINNED = 8
_REMEMBERED = 64


def trim_oldest(table: dict, keep: int = _REMEMBERED) -> None:
    """Drop the oldest entries of an insertion-ordered dict down to ``keep``."""
    while len(table) > keep:
        del table[next(iter(table))]


@dataclass(frozen=True)
class Seen:
    """What the camera saw for a turn: words for the model and the stamps of the frames."""

    text: str = ""
    stamps_ns: tuple[int, ...] = ()


@dataclass(frozen=True)
class _Association:
    trigger_ns: int
    chosen: tuple[tuple[int, str], ...]  # (stamp, summary) of each chosen vision token
    utterance_id: int = 0


class TurnContext:
    """Observations, history and idle time of one conversation; see the module docstring.

    Args:
        now_ns: the node clock at start-up (idle time counts from it).
        policy: the proactive rules (none by default).
    """

    def __init__(self, now_ns: int = 0, policy: ProactivePolicy | None = None) -> None:
        self.policy = policy if policy is not None else ProactivePolicy(())
        self._history: deque[Turn] = deque()
        self._user_texts: dict[int, str] = {}  # turn id -> what the user said
        self._turn_scenes: dict[int, str] = {}  # turn id -> the scene its prompt carried
        self._utterance_start: dict[int, int] = {}  # utterance id -> start stamp
        self._associations: deque[_Association] = deque(maxlen=_ASSOCIATIONS)
        self._scenes: deque[tuple[int, str]] = deque(maxlen=_SCENES)
        self._frames: deque[tuple[int, Any]] = deque(maxlen=_FRAMES)
        self._encoded: deque[tuple[int, Any]] = deque(maxlen=_ENCODED)
        self._scene_stamps: deque[int] = deque(maxlen=_ENCODED)  # encoded, frame not seen yet
        # utterance id -> {chosen stamp: frame or None until it arrives}, until its turn ends
        self._pinned: dict[int, dict[int, Any]] = {}
        self._turn_utterance: dict[int, int] = {}  # turn id -> utterance id
        self._idle_since_ns: int | None = None
        self._power = (float("nan"), float("nan"))  # battery percent, temperature (°C)
        self.mark_idle(now_ns)

    @classmethod
    def from_params(cls, params: Mapping[str, object], now_ns: int = 0) -> TurnContext:
        """A context with the proactive policy of ``TURN_PARAMS`` values (ConfigError for a
        rule that does not parse)."""
        policy = ProactivePolicy(
            str(params["proactive.rules"]).splitlines(),
            min_interval_s=float(params["proactive.min_interval_s"]),
            person_gone_s=float(params["proactive.person_gone_s"]),
            after_turn_s=float(params["proactive.after_turn_s"]),
        )
        return cls(now_ns, policy)

    # ----------------------------------------------------------------- observations
    def utterance_started(self, utterance_id: int, start_ns: int) -> None:
        self._utterance_start[utterance_id] = start_ns
        trim_oldest(self._utterance_start)

    def add_association(
        self, trigger_ns: int, chosen: Iterable[tuple[int, str]], utterance_id: int = 0
    ) -> None:
        """An association: its trigger stamp, (stamp, summary) of the tokens it chose and
        its utterance (0: unknown). The frames it chose are kept until that utterance's turn
        ends."""
        association = _Association(trigger_ns, tuple(chosen), utterance_id)
        self._associations.append(association)
        if not association.chosen:
            return
        key = utterance_id or -trigger_ns  # an unknown utterance: kept by its trigger
        pins = self._pinned.setdefault(key, {})
        for stamp_ns, _ in association.chosen:
            pins[stamp_ns] = self._nearest_frame(stamp_ns)
        trim_oldest(self._pinned, _PINNED)

    def add_scene(self, stamp_ns: int, description: str, person_present: bool) -> None:
        """A scene: the fusion node encoded the frame of ``stamp_ns`` (which is kept)."""
        self._scenes.append((stamp_ns, description))
        self.policy.observe_person(person_present, stamp_ns / NS_PER_S)
        frame = self._nearest_frame(stamp_ns, self._frames)
        if frame is not None:
            self._encoded.append((stamp_ns, frame))
        else:  # the scene came first: keep the frame when it arrives
            self._scene_stamps.append(stamp_ns)

    def set_power(self, battery_percent: float, temperature_c: float) -> None:
        """The newest power state (NaN: unknown)."""
        self._power = (battery_percent, temperature_c)

    def add_frame(self, stamp_ns: int, frame: Any) -> None:
        """A camera frame, kept as it came (only the chosen ones are ever decoded)."""
        self._frames.append((stamp_ns, frame))
        if stamp_ns in self._scene_stamps:
            self._scene_stamps.remove(stamp_ns)
            self._encoded.append((stamp_ns, frame))
        for pins in self._pinned.values():
            for wanted, kept in pins.items():
                if kept is None and abs(wanted - stamp_ns) <= FRAME_MATCH_NS:
                    pins[wanted] = frame

    def clear_frames(self) -> None:
        self._frames.clear()
        self._encoded.clear()
        self._scene_stamps.clear()
        self._pinned.clear()

    @property
    def frames_kept(self) -> int:
        """Frames held (all three stores; a frame in two counts twice)."""
        pinned = sum(f is not None for pins in self._pinned.values() for f in pins.values())
        return len(self._frames) + len(self._encoded) + pinned

    def _nearest_frame(self, stamp_ns: int, *stores: Iterable[tuple[int, Any]]) -> Any | None:
        """The kept frame nearest ``stamp_ns`` within ``FRAME_MATCH_NS`` (None: none)."""
        if not stores:
            pinned = (
                (s, f) for pins in self._pinned.values() for s, f in pins.items() if f is not None
            )
            stores = (pinned, self._encoded, self._frames)
        best = None
        for store in stores:
            for stamp, frame in store:
                gap = abs(stamp - stamp_ns)
                if gap <= FRAME_MATCH_NS and (best is None or gap < best[0]):
                    best = (gap, frame)
        return None if best is None else best[1]

    # ----------------------------------------------------------------- what the camera saw
    def seen(self, utterance_id: int, now_ns: int, max_age_ns: int) -> Seen:
        """The vision tokens the association chose for this utterance, else the newest
        scene when it is at most ``max_age_ns`` old, else nothing."""
        start_ns = self._utterance_start.get(utterance_id)
        named = [a for a in self._associations if utterance_id and a.utterance_id == utterance_id]
        best = named[-1] if named else None
        if best is None and start_ns is not None:
            best = min(self._associations, default=None, key=lambda a: abs(a.trigger_ns - start_ns))
            if best is not None and abs(best.trigger_ns - start_ns) > TRIGGER_MATCH_NS:
                best = None
        if best is not None and best.chosen:
            text = "; ".join(dict.fromkeys(summary for _, summary in best.chosen if summary))
            return Seen(text, tuple(stamp for stamp, _ in best.chosen))
        if self._scenes:
            stamp_ns, description = self._scenes[-1]
            if now_ns - stamp_ns <= max_age_ns:
                return Seen(description, (stamp_ns,))
        return Seen()

    def frames(self, stamps_ns: Iterable[int]) -> list[Any]:
        """The kept frames nearest the first ``MAX_IMAGES`` stamps (within
        ``FRAME_MATCH_NS`` of each)."""
        chosen = []
        for stamp_ns in list(stamps_ns)[:MAX_IMAGES]:
            frame = self._nearest_frame(stamp_ns)
            if frame is not None:
                chosen.append(frame)
        return chosen

    # ----------------------------------------------------------------- turns
    @property
    def history(self) -> tuple[Turn, ...]:
        return tuple(self._history)

    def warm_prompt(
        self,
        system: str,
        user_text: str,
        utterance_id: int,
        now_ns: int,
        *,
        vision: bool,
        max_age_ns: int,
    ) -> Prompt:
        """The prompt the user's words so far will end up in (evaluated ahead): with the
        scene :meth:`begin_turn` would give a turn of this utterance now, so the turn's own
        prompt, which carries it before the user's line, finds the whole prefix evaluated."""
        scene = self.seen(utterance_id, now_ns, max_age_ns).text if vision else ""
        return Prompt(system=system, scene=scene, history=self.history, user=user_text)

    def begin_turn(
        self,
        start: StartTurn,
        system: str,
        now_ns: int,
        *,
        vision: bool,
        max_age_ns: int,
        decode: Callable[[Any], Any | None] | None = None,
    ) -> Prompt:
        """Remember the turn's user text and build its prompt. With ``vision`` the prompt
        describes what the camera saw; with ``decode`` too (a model that sees images) it
        carries the chosen frames that ``decode`` turns into images (None: skipped)."""
        self._user_texts[start.turn_id] = start.user_text
        trim_oldest(self._user_texts)
        self._turn_utterance[start.turn_id] = start.utterance_id
        trim_oldest(self._turn_utterance)
        seen = self.seen(start.utterance_id, now_ns, max_age_ns) if vision else Seen()
        self._turn_scenes[start.turn_id] = seen.text
        trim_oldest(self._turn_scenes)
        images = ()
        if vision and decode is not None:
            images = tuple(
                image for image in map(decode, self.frames(seen.stamps_ns)) if image is not None
            )
        return Prompt(
            system=system,
            scene=seen.text,
            history=self.history,
            user=start.user_text,
            images=images,
        )

    def end_turn(self, ended: TurnEnded, now_ns: int, max_turns: int) -> None:
        """Keep what was said (an answer cut short: its finished sentences), forget turns
        beyond ``max_turns`` entries, and start counting idle time."""
        user = self._user_texts.pop(ended.turn_id, "")
        scene = self._turn_scenes.pop(ended.turn_id, "")
        self._pinned.pop(self._turn_utterance.pop(ended.turn_id, 0), None)
        robot = ended.response.strip()
        if ended.outcome in ("interrupted", "cancelled"):
            robot = complete_sentences(robot)
        if user:
            self._history.append(Turn("user", user, scene))
        if robot:  # a turn without the user's words (proactive) keeps its scene here
            self._history.append(Turn("robot", robot, "" if user else scene))
        while len(self._history) > max_turns:
            self._history.popleft()
        self.mark_idle(now_ns)

    # ----------------------------------------------------------------- idle time
    def mark_idle(self, now_ns: int) -> None:
        """The conversation went idle now (a turn ended, or the node started)."""
        self._idle_since_ns = now_ns if now_ns > 0 else None

    def idle_s(self, now_ns: int) -> float:
        """Seconds since the last turn ended. A clock that had not started then, or that
        went back since (a replay restarted), starts the count now."""
        if self._idle_since_ns is None or now_ns < self._idle_since_ns:
            self.mark_idle(now_ns)
            return 0.0
        return (now_ns - self._idle_since_ns) / NS_PER_S

    def proactive(self, now_ns: int, *, listening: bool) -> Rule | None:
        """The proactive rule that fires now, or None (see :class:`ProactivePolicy`)."""
        battery_percent, temperature_c = self._power
        return self.policy.check(
            now_ns / NS_PER_S,
            listening=listening,
            idle_s=self.idle_s(now_ns),
            battery_percent=battery_percent,
            temperature_c=temperature_c,
        )
