"""Window association: which tokens of the other streams join the context of an event.

An event (the *trigger*: a speech onset, a keyword, a transcript) at stamp t asks for
context. :class:`Associator` waits until the window [t - before, t + after] has closed in
stream time (``now >= t + after``: tokens stamped after the trigger, and late encoders, get
their chance), then considers every held token of the wanted modalities in the window (the
*candidates*), scores each with the :class:`~omniflow.core.semantic.Gate`, and chooses the
best ``max_chosen`` that pass: highest score first, then nearest in time to the trigger, then
oldest, then lowest id (a total order, so a decision is reproducible).

Every decision is explained: a :class:`Decision` lists each candidate with its score, whether
it was chosen and, if not, why (``"hamming 17 > 12"``, ``"too old (...)"``, ``"lower score
than chosen (...)"``). Tokens outside the window are never candidates, so "outside the
window" never appears. :class:`Decision` and :class:`TokenRef` map field for field onto
``omniflow/msg/Association`` and ``omniflow/msg/TokenRef`` (stamps as int ns, durations as int
ns; ``token_id`` and ``payload`` are extras the node uses and does not publish).

After each decision the :class:`Freshness` policy ages the candidates that were left out;
tokens unused for ``unused_limit`` consecutive decisions drop to quarter resolution, and at
twice the limit they leave the ring's active set. The associator keeps no per-decision state
beyond ``max_pending`` waiting requests and a ``history`` of recent decisions: memory is
bounded. No ROS imports; stamps are integer nanoseconds of stream time.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from omniflow.core.semantic import Gate
from omniflow.core.timing import NS_PER_MS
from omniflow.core.tokens import Modality, Resolution, Token, TokenRing, token_problem
from omniflow.errors import ConfigError

__all__ = [
    "DEFAULT_FRESHNESS",
    "AssociationStats",
    "Associator",
    "Decision",
    "Freshness",
    "TokenRef",
    "quarter_vector",
]


@dataclass(frozen=True, slots=True)
class TokenRef:
    """One token as a decision saw it: ``omniflow/msg/TokenRef`` field for field.

    ``score`` is the Hamming similarity to the trigger (0..1); ``reason`` is empty when
    chosen. ``token_id`` (ring id, -1 for a trigger that is not in the ring) and ``payload``
    (held for chosen tokens and the trigger only, so history never keeps unused payloads)
    are not published.
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

    def apply(self, ring: TokenRing, decision: Decision) -> tuple[int, int]:
        """Age the decision's candidates in ``ring``; return (downgraded, retired) counts."""
        downgraded = retired = 0
        for candidate in decision.candidates:
            if candidate.chosen:
                ring.mark_used(candidate.token_id)
                continue
            rounds = ring.mark_unused(candidate.token_id)
            if rounds is None:
                continue
            if rounds >= 2 * self.unused_limit:
                retired += ring.retire(candidate.token_id)
            elif rounds >= self.unused_limit:
                downgraded += ring.set_resolution(
                    candidate.token_id, Resolution.QUARTER, self.shrink
                )
        return downgraded, retired


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
    timeline. Cost of a decision: one ring query (O(log n + m)) and m gate checks. No Bloom
    pre-test: every candidate's score is reported, and for a window of a few tokens direct
    Hamming distances are cheaper (see :class:`~omniflow.core.semantic.BloomFilter`).
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
        # (deadline_ns, decision_id, ring resets at request time, trigger), deadline order.
        self._pending: list[tuple[int, int, int, Token]] = []
        self._next_id = 1

    @property
    def pending(self) -> int:
        """How many requests wait for their window to close."""
        return len(self._pending)

    def request(self, trigger: Token) -> int:
        """Register an event; return its decision id. Raises ValueError for an invalid
        trigger (bad stamp, modality or code)."""
        problem = token_problem(trigger)
        if problem is not None:
            raise ValueError(f"trigger rejected: {problem}")
        decision_id = self._next_id
        self._next_id += 1
        if len(self._pending) >= self.max_pending:
            _, dropped_id, _, _ = self._pending.pop(0)
            self.stats.dropped_requests += 1
            self.stats.last_drop_reason = (
                f"request {dropped_id} dropped: more than {self.max_pending} waiting"
            )
        item = (trigger.stamp_ns + self.after_ns, decision_id, self.ring.stats.resets, trigger)
        bisect.insort(self._pending, item, key=lambda p: (p[0], p[1]))
        self.stats.requests += 1
        return decision_id

    def poll(self, now_ns: int) -> list[Decision]:
        """Decide every request whose window closed by ``now_ns`` (stream time)."""
        resets = self.ring.stats.resets
        decisions: list[Decision] = []
        while self._pending:
            deadline, decision_id, resets_then, trigger = self._pending[0]
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
            decision = self.decide(decision_id, trigger, now_ns)
            if self.freshness is not None:
                downgraded, retired = self.freshness.apply(self.ring, decision)
                self.stats.downgraded += downgraded
                self.stats.retired += retired
            self.history.append(decision)
            decisions.append(decision)
        return decisions

    def decide(self, decision_id: int, trigger: Token, now_ns: int) -> Decision:
        """Decide one trigger now, from what the ring holds (no waiting, no freshness)."""
        t = trigger.stamp_ns
        window = self.ring.query(t - self.before_ns, t + self.after_ns)
        scored = []
        for token in window:
            if token.modality not in self.modalities or (
                trigger.token_id >= 0 and token.token_id == trigger.token_id
            ):
                continue
            verdict = self.gate.evaluate(trigger.code, t, token.code, token.stamp_ns)
            scored.append((token, verdict))
        ranked = sorted(
            ((tok, v) for tok, v in scored if v.accepted),
            key=lambda p: (-p[1].score, abs(p[0].stamp_ns - t), p[0].stamp_ns, p[0].token_id),
        )
        chosen = {tok.token_id for tok, _ in ranked[: self.max_chosen]}
        last = ranked[min(self.max_chosen, len(ranked)) - 1] if ranked else None
        candidates = []
        for token, verdict in scored:
            is_chosen = token.token_id in chosen
            if is_chosen or not verdict.accepted:
                reason = verdict.reason
            else:
                reason = _ranked_out_reason(token, verdict.score, last, t)
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
                )
            )
        self.stats.decisions += 1
        self.stats.candidates += len(candidates)
        self.stats.chosen += len(chosen)
        return Decision(
            now_ns,
            decision_id,
            _trigger_ref(trigger),
            self.before_ns,
            self.after_ns,
            tuple(candidates),
        )


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
