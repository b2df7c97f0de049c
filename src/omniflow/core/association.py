"""Window association: which tokens of the other streams join the context of an event.

An event (the *trigger*: a speech onset, a keyword, a transcript) at stamp t asks for
context. :class:`Associator` waits until the window [t - before, t + after] has closed in
stream time (``now >= t + after``: tokens stamped after the trigger, and late encoders, get
their chance), then considers every held token of the wanted modalities in the window (the
*candidates*), scores each with the :class:`~omniflow.core.semantic.Gate`, and chooses the
best ``max_chosen`` that pass: highest score first, then nearest in time to the trigger, then
oldest, then lowest id (a total order, so a decision is reproducible).

What the trigger asks about comes with the request as an :class:`Ask`: the utterance it
belongs to and the :class:`~omniflow.core.lexicon.Query` of its words. A speech onset has no
words yet: every candidate scores 0 and the frame nearest the onset wins. When the final
transcript is in, the pipeline asks again for the same onset with its words: a named object
("the cat") is looked for ``look_back_ns`` back (it may have left the view before the
question), a pointing word ("this") resolves to the label the hand points at in the
candidate nearest the onset; each candidate then scores by its Bloom filter (does it show the
named object or a close word?) and its code (how near, within the gate's ``max_hamming``).
Vision tokens carry a :class:`VisionPayload` (what was seen, its labels' code and filter, the
frame).

Every decision is explained: a :class:`Decision` lists each candidate with its score, whether
it was chosen and, if not, why (``"hamming 17 > 12"``, ``"too old (...)"``, ``"lower score
than chosen (...)"``). Tokens outside the window are never candidates, so "outside the
window" never appears. :class:`Decision` and :class:`TokenRef` map field for field onto
``omniflow/msg/Association`` and ``omniflow/msg/TokenRef`` (stamps as int ns, durations as int
ns; ``token_id`` and ``payload`` are extras the node uses and does not publish).

After each decision the :class:`Freshness` policy ages the candidates that were left out, and
the pipeline calls :meth:`Associator.age` once per newly encoded frame (a round at the vision
rate, so tokens age at live rates, not only at speech onsets); tokens unused for
``unused_limit`` consecutive rounds drop to quarter resolution (a vision token's frame to
half width and height), and at twice the limit they leave the ring's active set unless an
open utterance may still pick them (``keep_from_ns``). The associator keeps no per-decision state
beyond ``max_pending`` waiting requests and a ``history`` of recent decisions: memory is
bounded. No ROS imports; stamps are integer nanoseconds of stream time.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from omniflow.core.lexicon import Query, Sight
from omniflow.core.semantic import BloomFilter, Gate
from omniflow.core.timing import NS_PER_MS
from omniflow.core.tokens import Modality, Resolution, Token, TokenRing, token_problem
from omniflow.errors import ConfigError

__all__ = [
    "DEFAULT_FRESHNESS",
    "Ask",
    "AssociationStats",
    "Associator",
    "Decision",
    "Freshness",
    "TokenRef",
    "VisionPayload",
    "quarter_frame",
    "quarter_vector",
]


@dataclass(frozen=True, slots=True)
class TokenRef:
    """One token as a decision saw it: ``omniflow/msg/TokenRef`` field for field.

    ``score`` is the gate's (0..1: Bloom hit and code similarity); ``reason`` is empty when
    chosen. ``time_offset_ns`` (stamp - trigger stamp), ``hamming`` (-1: nothing compared),
    ``bloom_hit``, ``labels`` and ``pointed`` explain the score. ``token_id`` (ring id, -1
    for a trigger that is not in the ring) and ``payload`` (held for chosen tokens and the
    trigger only, so history never keeps unused payloads) are not published.
    """

    modality: Modality
    stamp_ns: int
    code: int
    resolution: Resolution
    score: float
    chosen: bool
    reason: str
    token_id: int = -1
    payload: Any = None
    time_offset_ns: int = 0
    hamming: int = -1
    bloom_hit: bool = False
    labels: tuple[str, ...] = ()
    pointed: str = ""


@dataclass(frozen=True)
class VisionPayload:
    """A vision token's payload: the encoder's observations as (kind, detail) pairs, the
    :class:`~omniflow.core.lexicon.Sight` (labels, pointed-at label, their code and words),
    the Bloom filter of those words, and the frame (None once dropped)."""

    summary: tuple[tuple[str, str | None], ...]
    sight: Sight
    bloom: BloomFilter | None = None
    image: np.ndarray | None = None

    @property
    def nbytes(self) -> int:
        """Bytes of the frame held."""
        return 0 if self.image is None else int(self.image.nbytes)


@dataclass(frozen=True)
class Ask:
    """What a request asks about: its utterance, its words (None: time only: a speech onset)
    and how far back a named object is looked for."""

    utterance_id: int = 0
    query: Query | None = None
    look_back_ns: int = 0


@dataclass(frozen=True, slots=True)
class Decision:
    """One association decision: ``omniflow/msg/Association`` field for field.

    ``decided_ns`` is the header stamp (stream time of the decision); the window is
    [trigger.stamp_ns - window_before_ns, trigger.stamp_ns + window_after_ns]; candidates are
    in stamp order, chosen or not. The trigger is reported with score 1.0, chosen and an
    empty reason.
    """

    decided_ns: int
    decision_id: int
    trigger: TokenRef
    window_before_ns: int
    window_after_ns: int
    candidates: tuple[TokenRef, ...]
    utterance_id: int = 0
    query: str = ""

    @property
    def chosen(self) -> tuple[TokenRef, ...]:
        """The candidates that joined the context, best first."""
        return tuple(
            sorted(
                (c for c in self.candidates if c.chosen),
                key=lambda c: (
                    -c.score,
                    abs(c.stamp_ns - self.trigger.stamp_ns),
                    c.stamp_ns,
                    c.token_id,
                ),
            )
        )


def quarter_vector(payload: Any) -> Any:
    """A quarter-size version of an embedding: the mean of each group of 4 values along the
    last axis (a shrink callback for :class:`Freshness`). Non-arrays are returned as is."""
    if not isinstance(payload, np.ndarray) or payload.ndim == 0 or payload.shape[-1] < 4:
        return payload
    n = payload.shape[-1] // 4 * 4
    grouped = payload[..., :n].reshape(*payload.shape[:-1], n // 4, 4)
    return grouped.mean(axis=-1).astype(payload.dtype, copy=False)


def quarter_frame(payload: Any) -> Any:
    """A :class:`VisionPayload` whose frame keeps every other row and column (a quarter of
    the pixels, copied so the full frame is freed); other payloads as :func:`quarter_vector`."""
    if isinstance(payload, VisionPayload):
        if payload.image is None:
            return payload
        return replace(payload, image=np.ascontiguousarray(payload.image[::2, ::2]))
    return quarter_vector(payload)


@dataclass(frozen=True)
class Freshness:
    """Ages tokens that keep being left out of decisions (immutable: safe to share).

    After each decision: a chosen candidate's unused count is reset (it is fresh again); a
    candidate that was not chosen gets one more unused round; at ``unused_limit``
    consecutive rounds its resolution drops to quarter (the payload becomes
    ``shrink(payload)`` when a shrink callback is given; a token is shrunk at most once), and
    at ``2 * unused_limit`` it leaves the active set (``ring.retire``), freeing its slot and
    payload.
    """

    unused_limit: int = 3
    shrink: Callable[[Any], Any] | None = None

    def __post_init__(self) -> None:
        limit = self.unused_limit
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigError(f"unused_limit must be a positive integer, got {limit!r}")

    def apply(
        self, ring: TokenRing, decision: Decision, keep_from_ns: int | None = None
    ) -> tuple[int, int]:
        """Age the decision's candidates in ``ring``; return (downgraded, retired) counts.
        Tokens stamped at or after ``keep_from_ns`` are downgraded but never retired."""
        downgraded = retired = 0
        for candidate in decision.candidates:
            if candidate.chosen:
                ring.mark_used(candidate.token_id)
                continue
            d, r = self.age(ring, candidate.token_id, candidate.stamp_ns, keep_from_ns)
            downgraded += d
            retired += r
        return downgraded, retired

    def age(
        self, ring: TokenRing, token_id: int, stamp_ns: int, keep_from_ns: int | None = None
    ) -> tuple[int, int]:
        """One more unused round for one token; (downgraded, retired) as 0/1."""
        rounds = ring.mark_unused(token_id)
        if rounds is None:
            return 0, 0
        keep = keep_from_ns is not None and stamp_ns >= keep_from_ns
        if rounds >= 2 * self.unused_limit and not keep:
            return 0, int(ring.retire(token_id))
        if rounds >= self.unused_limit:
            return int(ring.set_resolution(token_id, Resolution.QUARTER, self.shrink)), 0
        return 0, 0


#: The design's default: quarter resolution after 3 unused decisions, retired after 6.
DEFAULT_FRESHNESS = Freshness()


@dataclass
class AssociationStats:
    """Counters of an :class:`Associator`, for diagnostics."""

    requests: int = 0
    decisions: int = 0
    dropped_requests: int = 0  # too many waiting, or the ring was reset under them
    candidates: int = 0
    chosen: int = 0
    downgraded: int = 0  # freshness: dropped to quarter resolution
    retired: int = 0  # freshness: left the active set
    last_drop_reason: str = ""

    def as_dict(self) -> dict[str, int | str]:
        """Every counter, by name."""
        return asdict(self)


class Associator:
    """Decides, for each trigger, which tokens in its time window join the context.

    ``request(trigger)`` registers an event and returns its decision id; ``poll(now_ns)``
    decides every request whose window has closed, oldest trigger first, applying the
    freshness policy after each decision. At most ``max_pending`` requests wait (the oldest
    is dropped and counted beyond that); when the ring was reset (its clock jumped back)
    requests made before the reset are dropped, since their window belongs to another
    timeline. Cost of a decision: one ring query (O(log n + m)) and m gate checks (a Hamming
    distance, and with words a look-up of each word in the candidate's Bloom filter). Codes
    are compared directly rather than through a band filter of the window: every
    candidate's score is reported, and for a window of a few tokens direct Hamming distances
    are cheaper (see :class:`~omniflow.core.semantic.BloomFilter`).
    """

    def __init__(
        self,
        ring: TokenRing,
        before_ns: int = 80 * NS_PER_MS,
        after_ns: int = 120 * NS_PER_MS,
        gate: Gate | None = None,
        modalities: Iterable[Modality] = (Modality.VISION,),
        max_chosen: int = 1,
        freshness: Freshness | None = DEFAULT_FRESHNESS,
        max_pending: int = 32,
        history: int = 16,
    ) -> None:
        """``before_ns``/``after_ns``: the window around the trigger (ns, >= 0);
        ``max_chosen``: how many candidates may join one context; ``freshness``: the ageing
        policy (None: tokens never age); ``history``: how many recent decisions to keep."""
        for name, value, low in (
            ("before_ns", before_ns, 0),
            ("after_ns", after_ns, 0),
            ("max_chosen", max_chosen, 1),
            ("max_pending", max_pending, 1),
            ("history", history, 0),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"{name} must be an integer >= {low}, got {value!r}")
        wanted = tuple(modalities)
        if not wanted or any(m not in tuple(Modality) for m in wanted):
            raise ConfigError(
                f"modalities must be a non-empty subset of "
                f"{[m.name for m in Modality]}, got {wanted!r}"
            )
        self.ring = ring
        self.before_ns = before_ns
        self.after_ns = after_ns
        self.gate = gate if gate is not None else Gate()
        self.modalities = frozenset(Modality(m) for m in wanted)
        self.max_chosen = max_chosen
        self.freshness = freshness
        self.max_pending = max_pending
        self.stats = AssociationStats()
        self.history: deque[Decision] = deque(maxlen=history)
        # Tokens stamped from here on are never retired by freshness (an open utterance may
        # still pick them); None: no such utterance. Set by the owner.
        self.keep_from_ns: int | None = None
        # (deadline_ns, decision_id, ring resets at request time, trigger, ask), deadline order.
        self._pending: list[tuple[int, int, int, Token, Ask | None]] = []
        self._next_id = 1

    @property
    def pending(self) -> int:
        """How many requests wait for their window to close."""
        return len(self._pending)

    def request(self, trigger: Token, ask: Ask | None = None) -> int:
        """Register an event; return its decision id. ``ask``: what it asks about (None:
        compare the trigger's own code with the candidates'). Raises ValueError for an
        invalid trigger (bad stamp, modality or code)."""
        problem = token_problem(trigger)
        if problem is not None:
            raise ValueError(f"trigger rejected: {problem}")
        decision_id = self._next_id
        self._next_id += 1
        if len(self._pending) >= self.max_pending:
            _, dropped_id, _, _, _ = self._pending.pop(0)
            self.stats.dropped_requests += 1
            self.stats.last_drop_reason = (
                f"request {dropped_id} dropped: more than {self.max_pending} waiting"
            )
        item = (trigger.stamp_ns + self.after_ns, decision_id, self.ring.stats.resets, trigger, ask)
        bisect.insort(self._pending, item, key=lambda p: (p[0], p[1]))
        self.stats.requests += 1
        return decision_id

    def poll(self, now_ns: int) -> list[Decision]:
        """Decide every request whose window closed by ``now_ns`` (stream time)."""
        resets = self.ring.stats.resets
        decisions: list[Decision] = []
        while self._pending:
            deadline, decision_id, resets_then, trigger, ask = self._pending[0]
            if resets_then != resets:
                self._pending.pop(0)
                self.stats.dropped_requests += 1
                self.stats.last_drop_reason = (
                    f"request {decision_id} dropped: the ring was reset (clock jumped back)"
                )
                continue
            if deadline > now_ns:
                break
            self._pending.pop(0)
            decision = self.decide(decision_id, trigger, now_ns, ask)
            if self.freshness is not None:
                downgraded, retired = self.freshness.apply(self.ring, decision, self.keep_from_ns)
                self.stats.downgraded += downgraded
                self.stats.retired += retired
            self.history.append(decision)
            decisions.append(decision)
        return decisions

    def age(self, except_id: int = -1) -> None:
        """One freshness round for every held token of the wanted modalities but
        ``except_id`` (the pipeline calls it for each newly encoded frame)."""
        if self.freshness is None:
            return
        for token in list(self.ring):
            if token.modality in self.modalities and token.token_id != except_id:
                d, r = self.freshness.age(
                    self.ring, token.token_id, token.stamp_ns, self.keep_from_ns
                )
                self.stats.downgraded += d
                self.stats.retired += r

    def decide(
        self, decision_id: int, trigger: Token, now_ns: int, ask: Ask | None = None
    ) -> Decision:
        """Decide one trigger now, from what the ring holds (no waiting, no freshness)."""
        t = trigger.stamp_ns
        query = ask.query if ask is not None else None
        before = self.before_ns
        if query is not None and query.object_word is not None:
            before = max(before, ask.look_back_ns)
        window = [
            token
            for token in self.ring.query(t - before, t + self.after_ns)
            if token.modality in self.modalities
            and not (trigger.token_id >= 0 and token.token_id == trigger.token_id)
        ]
        words, code, said = _resolve(trigger, ask, window)
        scored = []
        for token in window:
            seen = token.payload if isinstance(token.payload, VisionPayload) else None
            if seen is None:
                token_code, bloom = token.code, None
            else:
                token_code = seen.sight.code if seen.sight.main is not None else None
                bloom = seen.bloom
            verdict = self.gate.evaluate(
                code, t, token_code, token.stamp_ns, words=words, bloom=bloom
            )
            scored.append((token, verdict, seen))
        ranked = sorted(
            ((tok, v) for tok, v, _ in scored if v.accepted),
            key=lambda p: (-p[1].score, abs(p[0].stamp_ns - t), p[0].stamp_ns, p[0].token_id),
        )
        chosen = {tok.token_id for tok, _ in ranked[: self.max_chosen]}
        last = ranked[min(self.max_chosen, len(ranked)) - 1] if ranked else None
        candidates = []
        for token, verdict, seen in scored:
            is_chosen = token.token_id in chosen
            if is_chosen:
                reason = ""
            elif not verdict.accepted:
                reason = verdict.reason
            else:
                reason = "; ".join(
                    r
                    for r in (_ranked_out_reason(token, verdict.score, last, t), verdict.reason)
                    if r
                )
            candidates.append(
                TokenRef(
                    token.modality,
                    token.stamp_ns,
                    token.code,
                    token.resolution,
                    verdict.score,
                    is_chosen,
                    reason,
                    token.token_id,
                    token.payload if is_chosen else None,
                    token.stamp_ns - t,
                    verdict.hamming,
                    verdict.bloom_hit,
                    seen.sight.labels if seen is not None else (),
                    (seen.sight.pointed or "") if seen is not None else "",
                )
            )
        self.stats.decisions += 1
        self.stats.candidates += len(candidates)
        self.stats.chosen += len(chosen)
        return Decision(
            now_ns,
            decision_id,
            _trigger_ref(trigger),
            before,
            self.after_ns,
            tuple(candidates),
            ask.utterance_id if ask is not None else 0,
            said,
        )


def _resolve(
    trigger: Token, ask: Ask | None, window: list[Token]
) -> tuple[tuple[str, ...] | None, int | None, str]:
    """(words, code, description) the candidates are judged by. Without an ask: the
    trigger's code alone (words None). With one: its object word and code; a pointing word
    adds the label the hand points at in the pointing candidate nearest the trigger (and its
    code when no object was named)."""
    if ask is None:
        return None, trigger.code, ""
    query = ask.query
    if query is None:
        return (), None, ""
    words: tuple[str, ...] = ()
    code = query.code
    said = []
    if query.object_word is not None:
        words = (query.object_word,)
        said.append(query.object_word)
    if query.points:
        pointing = [
            tok
            for tok in window
            if isinstance(tok.payload, VisionPayload) and tok.payload.sight.pointed
        ]
        if pointing:
            near = min(
                pointing, key=lambda tok: (abs(tok.stamp_ns - trigger.stamp_ns), tok.stamp_ns)
            )
            pointed = near.payload.sight.pointed
            words = (*words, pointed)
            if code is None:
                code = near.payload.sight.code
            said.append(f"this -> {pointed}")
        else:
            said.append("this -> nothing pointed at")
    return words, code, ", ".join(said)


def _ranked_out_reason(token: Token, score: float, last: tuple[Token, Any] | None, t: int) -> str:
    """Why a candidate that passed the gate was not among the chosen (``last``: the lowest
    ranked chosen one, which exists whenever a passing candidate is left out)."""
    if last is None:
        return "not chosen"
    last_token, last_verdict = last
    if score < last_verdict.score:
        return f"lower score than chosen ({score:.3f} < {last_verdict.score:.3f})"
    if abs(token.stamp_ns - t) > abs(last_token.stamp_ns - t):
        return f"score tied with chosen ({score:.3f}), farther from the trigger"
    return f"score tied with chosen ({score:.3f}), ranked after it"


def _trigger_ref(trigger: Token) -> TokenRef:
    return TokenRef(
        Modality(trigger.modality),
        trigger.stamp_ns,
        trigger.code,
        Resolution(trigger.resolution),
        1.0,
        True,
        "",
        trigger.token_id,
        trigger.payload,
    )
