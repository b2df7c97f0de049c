"""Window association and freshness (tier 1, no ROS): the pointing scenario, explanations,
ageing, bounded state, and equality with a brute-force reference on random timelines."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from omniflow.core.association import (
    Associator,
    Decision,
    Freshness,
    TokenRef,
    quarter_vector,
)
from omniflow.core.semantic import Gate
from omniflow.core.tokens import Modality, Resolution, Token, TokenRing
from omniflow.errors import ConfigError

MS = 1_000_000
T0 = 1_700_000_000 * 1_000_000_000
MSG_DIR = Path(__file__).resolve().parents[2] / "msg"
WHAT_IS_THIS = 0x3C5A_9E17  # the semantic code of the utterance


def msg_fields(name: str) -> list[str]:
    fields = []
    for line in (MSG_DIR / name).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and "=" not in line:
            fields.append(line.split()[1])
    return fields


def speech(stamp: int, code: int = WHAT_IS_THIS, payload="what is this") -> Token:
    return Token(stamp, Modality.AUDIO, code, payload)


def frame(stamp: int, code: int, payload=None) -> Token:
    return Token(stamp, Modality.VISION, code, payload)


def flip(code: int, bits: int) -> int:
    """``code`` with its lowest ``bits`` bits flipped (Hamming distance ``bits``)."""
    return code ^ ((1 << bits) - 1)


# --------------------------------------------------------------------------- the interfaces
def test_decision_and_token_ref_map_onto_the_messages_field_for_field():
    names = [f.name for f in dataclasses.fields(TokenRef)]
    renamed = {"stamp_ns": "stamp"}
    # summary: what a chosen vision token showed, in words, which the node makes of the payload
    assert [renamed.get(n, n) for n in names[:7]] + ["summary"] + names[9:] == msg_fields(
        "TokenRef.msg"
    )
    assert names[7:9] == ["token_id", "payload"]
    renamed = {
        "decided_ns": "header",
        "window_before_ns": "window_before",
        "window_after_ns": "window_after",
    }
    assert [renamed.get(f.name, f.name) for f in dataclasses.fields(Decision)] == msg_fields(
        "Association.msg"
    )


# --------------------------------------------------------------------------- pointing
def test_pointing_scenario_pairs_the_question_with_the_frame_pointed_at():
    """ "What is this?" at t0: the frame at t0 + 30 ms (the hand pointing at the box) is
    chosen; the frame at t0 - 300 ms is not even a candidate, though its code is identical to
    the question's."""
    ring = TokenRing()
    assoc = Associator(ring)
    t0 = T0 + 2_000 * MS
    stale = ring.insert(frame(t0 - 300 * MS, WHAT_IS_THIS, "the table, before pointing"))
    for i in range(-10, 5):  # audio chunks around the utterance
        ring.insert(Token(t0 + i * 40 * MS, Modality.AUDIO, 0x1234))
    pointed = ring.insert(frame(t0 + 30 * MS, flip(WHAT_IS_THIS, 3), "hand on the red box"))
    other = ring.insert(frame(t0 - 36 * MS, flip(WHAT_IS_THIS, 20), "a frame of the wall"))
    decision_id = assoc.request(speech(t0))
    assert assoc.poll(t0 + 119 * MS) == []  # still waiting for late tokens
    [decision] = assoc.poll(t0 + 120 * MS)
    assert decision.decision_id == decision_id
    assert [c.token_id for c in decision.chosen] == [pointed]
    assert decision.chosen[0].payload == "hand on the red box"
    assert decision.chosen[0].score == pytest.approx(1 - 3 / 32)
    assert stale not in [c.token_id for c in decision.candidates]
    assert [(c.token_id, c.chosen, c.reason) for c in decision.candidates] == [
        (other, False, "hamming 20 > 12"),
        (pointed, True, ""),
    ]
    assert all(c.modality is Modality.VISION for c in decision.candidates)
    assert decision.trigger.payload == "what is this"
    assert (decision.window_before_ns, decision.window_after_ns) == (80 * MS, 120 * MS)
    assert decision.decided_ns == t0 + 120 * MS


def test_the_decision_waits_for_a_frame_that_arrives_late():
    ring = TokenRing()
    assoc = Associator(ring)
    assoc.request(speech(T0))
    ring.insert(frame(T0 - 10 * MS, flip(WHAT_IS_THIS, 9)))
    assert assoc.poll(T0 + 60 * MS) == []
    late = ring.insert(frame(T0 + 50 * MS, flip(WHAT_IS_THIS, 1)))  # encoded 70 ms later
    [decision] = assoc.poll(T0 + 120 * MS)
    assert decision.chosen[0].token_id == late
    assert decision.candidates[0].reason == "lower score than chosen (0.719 < 0.969)"


@pytest.mark.parametrize(
    ("offset_ms", "is_candidate"),
    [(-81, False), (-80, True), (0, True), (120, True), (121, False)],
)
def test_window_bounds_are_inclusive(offset_ms, is_candidate):
    ring = TokenRing()
    assoc = Associator(ring)
    ring.insert(frame(T0 + offset_ms * MS, WHAT_IS_THIS))
    assoc.request(speech(T0))
    [decision] = assoc.poll(T0 + 200 * MS)
    assert len(decision.candidates) == int(is_candidate)


def test_every_candidate_is_explained():
    ring = TokenRing()
    assoc = Associator(
        ring,
        gate=Gate(max_hamming=12, max_age_ns=50 * MS),
        max_chosen=2,
        modalities=(Modality.VISION, Modality.TEXT),
    )
    ids = {
        "old": ring.insert(frame(T0 - 70 * MS, WHAT_IS_THIS)),
        "far": ring.insert(frame(T0 - 20 * MS, flip(WHAT_IS_THIS, 17))),
        "best": ring.insert(frame(T0 + 10 * MS, WHAT_IS_THIS)),
        "tie_near": ring.insert(Token(T0 + 20 * MS, Modality.TEXT, flip(WHAT_IS_THIS, 2))),
        "tie_far": ring.insert(frame(T0 + 40 * MS, flip(WHAT_IS_THIS, 2))),
        "worse": ring.insert(frame(T0 + 60 * MS, flip(WHAT_IS_THIS, 5))),
    }
    ring.insert(Token(T0 + 30 * MS, Modality.AUDIO, WHAT_IS_THIS))  # not a wanted modality
    assoc.request(speech(T0))
    [decision] = assoc.poll(T0 + 120 * MS)
    reasons = {c.token_id: (c.chosen, c.reason) for c in decision.candidates}
    assert reasons == {
        ids["old"]: (False, "too old (70.0 ms > 50.0 ms)"),
        ids["far"]: (False, "hamming 17 > 12"),
        ids["best"]: (True, ""),
        ids["tie_near"]: (True, ""),
        ids["tie_far"]: (False, "score tied with chosen (0.938), farther from the trigger"),
        ids["worse"]: (False, "lower score than chosen (0.844 < 0.938)"),
    }
    assert [c.token_id for c in decision.chosen] == [ids["best"], ids["tie_near"]]
    assert [c.stamp_ns for c in decision.candidates] == sorted(
        c.stamp_ns for c in decision.candidates
    )
    assert all(c.payload is None for c in decision.candidates if not c.chosen)


def test_a_trigger_held_in_the_ring_is_not_its_own_candidate():
    ring = TokenRing()
    assoc = Associator(ring, modalities=(Modality.VISION,))
    trigger_id = ring.insert(frame(T0, WHAT_IS_THIS))
    other = ring.insert(frame(T0 + 66 * MS, WHAT_IS_THIS))
    assoc.request(ring.get(trigger_id))
    [decision] = assoc.poll(T0 + 120 * MS)
    assert [c.token_id for c in decision.candidates] == [other]
    assert decision.trigger.token_id == trigger_id


def test_decisions_come_out_in_trigger_order_when_their_windows_close():
    ring = TokenRing()
    assoc = Associator(ring)
    late_id = assoc.request(speech(T0 + 500 * MS))
    early_id = assoc.request(speech(T0))
    assert assoc.pending == 2
    assert [d.decision_id for d in assoc.poll(T0 + 200 * MS)] == [early_id]
    assert [d.decision_id for d in assoc.poll(T0 + 10_000 * MS)] == [late_id]
    assert assoc.pending == 0


def test_waiting_requests_are_bounded_and_the_oldest_is_dropped():
    assoc = Associator(TokenRing(), max_pending=2)
    first = assoc.request(speech(T0))
    assoc.request(speech(T0 + 10 * MS))
    assoc.request(speech(T0 + 20 * MS))
    assert assoc.pending == 2
    assert assoc.stats.dropped_requests == 1
    assert f"request {first} dropped" in assoc.stats.last_drop_reason
    assert len(assoc.poll(T0 + 1_000 * MS)) == 2


def test_a_ring_reset_drops_the_requests_of_the_old_timeline():
    ring = TokenRing(reset_jump_ns=1_000 * MS)
    assoc = Associator(ring)
    ring.insert(frame(T0 + 60_000 * MS, WHAT_IS_THIS))
    assoc.request(speech(T0 + 60_000 * MS))
    ring.insert(frame(T0, WHAT_IS_THIS))  # the bag looped back a minute
    fresh = assoc.request(speech(T0))
    assert [d.decision_id for d in assoc.poll(T0 + 200 * MS)] == [fresh]
    assert assoc.stats.dropped_requests == 1
    assert "reset" in assoc.stats.last_drop_reason


def test_bad_triggers_and_settings_are_rejected():
    assoc = Associator(TokenRing())
    with pytest.raises(ValueError, match="trigger rejected: stamp_ns"):
        assoc.request(speech(0))
    for kwargs in (
        {"before_ns": -1},
        {"max_chosen": 0},
        {"modalities": ()},
        {"modalities": (5,)},
        {"max_pending": 0},
        {"after_ns": 1.5},
    ):
        with pytest.raises(ConfigError):
            Associator(TokenRing(), **kwargs)
    with pytest.raises(ConfigError):
        Freshness(unused_limit=0)


# --------------------------------------------------------------------------- freshness
def test_tokens_left_out_decay_to_quarter_then_leave_the_active_set():
    ring = TokenRing()
    shrunk = []

    def shrink(payload):
        shrunk.append(payload)
        return quarter_vector(payload)

    assoc = Associator(ring, freshness=Freshness(unused_limit=3, shrink=shrink))
    embedding = np.arange(16, dtype=np.float32)
    ignored = ring.insert(frame(T0, flip(WHAT_IS_THIS, 20), embedding))  # never passes
    used = ring.insert(frame(T0 + 10 * MS, WHAT_IS_THIS))  # always chosen
    history = []
    for round_ in range(1, 8):
        assoc.request(speech(T0 + 5 * MS))
        [decision] = assoc.poll(T0 + 200 * MS * round_)
        held = ring.get(ignored)
        history.append(
            (
                len(decision.candidates),
                None if held is None else (held.unused_rounds, held.resolution),
            )
        )
        assert ring.get(used).unused_rounds == 0
        assert ring.get(used).resolution is Resolution.FULL
    assert history == [
        (2, (1, Resolution.FULL)),
        (2, (2, Resolution.FULL)),
        (2, (3, Resolution.QUARTER)),  # at the limit: quarter resolution
        (2, (4, Resolution.QUARTER)),
        (2, (5, Resolution.QUARTER)),
        (2, None),  # at twice the limit: retired
        (1, None),  # no longer a candidate
    ]
    assert len(shrunk) == 1 and shrunk[0] is embedding
    assert assoc.stats.downgraded == 1 and assoc.stats.retired == 1
    assert ring.stats.retired == 1


def test_being_chosen_again_resets_the_unused_count():
    ring = TokenRing()
    assoc = Associator(ring, freshness=Freshness(unused_limit=3))
    token_id = ring.insert(frame(T0, flip(WHAT_IS_THIS, 4)))
    for round_, (code, expected) in enumerate(
        [(WHAT_IS_THIS, 0), (0, 1), (0, 2), (WHAT_IS_THIS, 0), (0, 1)], start=1
    ):
        assoc.request(speech(T0, code=code))
        assoc.poll(T0 + 200 * MS * round_)
        assert ring.get(token_id).unused_rounds == expected


def test_quarter_vector_keeps_a_quarter_of_an_embedding():
    vector = np.arange(16, dtype=np.float32)
    np.testing.assert_allclose(quarter_vector(vector), [1.5, 5.5, 9.5, 13.5])
    assert quarter_vector(vector).dtype == np.float32
    assert quarter_vector(np.ones((2, 8))).shape == (2, 2)
    assert quarter_vector("text") == "text"


def test_state_stays_bounded_over_many_decisions():
    ring = TokenRing(capacity=64)
    assoc = Associator(ring, history=8, freshness=Freshness(unused_limit=2))
    rng = np.random.default_rng(0)
    t = T0
    for i in range(3_000):
        t += 40 * MS
        ring.insert(Token(t, Modality.AUDIO, int(rng.integers(2**32))))
        if i % 2:
            ring.insert(frame(t - 20 * MS, flip(WHAT_IS_THIS, int(rng.integers(0, 16)))))
        assoc.request(speech(t))  # a trigger every slice: each frame is in ~5 windows
        assoc.poll(t)
    assert len(assoc.history) == 8
    assert assoc.pending <= 4
    assert len(ring) <= 64
    assert assoc.stats.decisions == 3_000 - assoc.pending
    assert assoc.stats.retired > 0


# --------------------------------------------------------------------------- reference
class Reference:
    """Brute-force association over every token ever inserted (minus the retired), with
    freshness, written without the ring's binary search or the associator's structure."""

    def __init__(self, before, after, max_hamming, max_age, modalities, max_chosen, limit):
        self.before, self.after = before, after
        self.max_hamming, self.max_age = max_hamming, max_age
        self.modalities, self.max_chosen, self.limit = set(modalities), max_chosen, limit
        self.tokens: dict[int, dict] = {}

    def decide(self, trigger: Token) -> list[tuple[int, float, bool]]:
        t = trigger.stamp_ns
        window = [
            (tid, tok)
            for tid, tok in self.tokens.items()
            if tok["active"]
            and t - self.before <= tok["stamp"] <= t + self.after
            and tok["modality"] in self.modalities
            and tid != trigger.token_id
        ]
        window.sort(key=lambda item: (item[1]["stamp"], item[0]))
        scored = []
        for tid, tok in window:
            distance = bin(tok["code"] ^ trigger.code).count("1")
            passes = distance <= self.max_hamming and (
                self.max_age is None or t - tok["stamp"] <= self.max_age
            )
            scored.append((tid, 1 - distance / 32, passes, abs(tok["stamp"] - t), tok["stamp"]))
        ranked = sorted((s for s in scored if s[2]), key=lambda s: (-s[1], s[3], s[4], s[0]))
        chosen = {s[0] for s in ranked[: self.max_chosen]}
        for tid, *_ in scored:  # freshness
            tok = self.tokens[tid]
            if tid in chosen:
                tok["unused"] = 0
                continue
            tok["unused"] += 1
            if tok["unused"] >= 2 * self.limit:
                tok["active"] = False
            elif tok["unused"] >= self.limit:
                tok["resolution"] = Resolution.QUARTER
        return [(tid, score, tid in chosen) for tid, score, *_ in scored]


EVENTS = st.lists(
    st.one_of(
        # a token: stamp offset from stream time (late ones within the tolerance), modality,
        # base code index and bits flipped
        st.tuples(
            st.just("token"),
            st.integers(-90 * MS, 50 * MS),
            st.sampled_from(list(Modality)),
            st.integers(0, 2),
            st.integers(0, 20),
        ),
        st.tuples(
            st.just("trigger"),
            st.integers(-150 * MS, 20 * MS),
            st.integers(0, 2),
            st.sampled_from([None, 0, 1]),
        ),
        st.tuples(st.just("poll"), st.integers(0, 200 * MS)),
    ),
    min_size=30,
    max_size=150,
)
BASES = (0x0000_0000, 0xF0F0_F0F0, 0x1234_5678)


@settings(max_examples=120, deadline=None)
@given(
    events=EVENTS,
    before=st.integers(0, 150),
    after=st.integers(0, 200),
    max_hamming=st.integers(0, 32),
    max_age=st.sampled_from([None, 30, 100]),
    modalities=st.sampled_from(
        [(Modality.VISION,), (Modality.VISION, Modality.TEXT), tuple(Modality)]
    ),
    max_chosen=st.integers(1, 3),
    limit=st.integers(1, 3),
)
def test_window_association_equals_a_brute_force_reference(
    events, before, after, max_hamming, max_age, modalities, max_chosen, limit
):
    before, after = before * MS, after * MS
    max_age = None if max_age is None else max_age * MS
    ring = TokenRing(capacity=512, reorder_tolerance_ns=100 * MS)
    assoc = Associator(
        ring,
        before,
        after,
        Gate(max_hamming, max_age),
        modalities,
        max_chosen,
        Freshness(limit),
        max_pending=512,
    )
    ref = Reference(before, after, max_hamming, max_age, modalities, max_chosen, limit)
    pending: dict[int, Token] = {}
    now = T0
    for event in events:
        if event[0] == "token":
            _, offset, modality, base, flips = event
            token = Token(now + offset, modality, flip(BASES[base], flips))
            token_id = ring.insert(token)
            if token_id is not None:
                ref.tokens[token_id] = {
                    "stamp": token.stamp_ns,
                    "modality": modality,
                    "code": token.code,
                    "active": True,
                    "unused": 0,
                    "resolution": Resolution.FULL,
                }
                now = max(now, token.stamp_ns)
        elif event[0] == "trigger":
            _, offset, base, in_ring = event
            trigger = Token(now + offset, Modality.AUDIO, BASES[base])
            held = [tid for tid, tok in ref.tokens.items() if tok["active"]]
            if in_ring is not None and held:  # a held token as trigger
                trigger = ring.get(held[in_ring % len(held)])
            pending[assoc.request(trigger)] = trigger
        else:
            now += event[1]
            decisions = assoc.poll(now)
            due = sorted(
                (trig.stamp_ns + after, did)
                for did, trig in pending.items()
                if trig.stamp_ns + after <= now
            )
            assert [d.decision_id for d in decisions] == [did for _, did in due]
            for decision in decisions:
                expected = ref.decide(pending.pop(decision.decision_id))
                got = [(c.token_id, c.score, c.chosen) for c in decision.candidates]
                assert got == expected
                for c in decision.candidates:
                    if c.chosen:
                        assert c.reason == ""
                    else:
                        assert re.match(r"hamming|too old|lower score|score tied", c.reason)
            for tid, tok in ref.tokens.items():
                held = ring.get(tid)
                if not tok["active"]:
                    assert held is None
                elif held is not None:
                    assert (held.unused_rounds, held.resolution) == (
                        tok["unused"],
                        tok["resolution"],
                    )


# --------------------------------------------------------------------------- by meaning
@pytest.fixture(scope="module")
def words():
    from omniflow.engines.embedding import load_word_space

    return load_word_space()


def sight_token(words, stamp: int, labels: tuple, pointed: str | None = None) -> Token:
    from omniflow.core.association import VisionPayload
    from omniflow.core.semantic import BloomFilter

    sight = words.sight(labels, pointed)
    bloom = BloomFilter(bits=512)
    for word in sight.words:
        bloom.add_word(word)
    return Token(stamp, Modality.VISION, sight.code, VisionPayload((), sight, bloom))


def decide(words, frames: list[tuple[int, tuple, str | None]], text: str | None, look_back_ms=3000):
    from omniflow.core.association import Ask

    ring = TokenRing()
    for stamp, labels, pointed in frames:
        ring.insert(sight_token(words, stamp, labels, pointed))
    assoc = Associator(ring, gate=Gate(max_hamming=10), freshness=None)
    query = words.query(text) if text is not None else None
    return assoc.decide(1, speech(T0, 0), T0, Ask(3, query, look_back_ms * MS))


CUP, CAT = ("cup", "dining table"), ("cat",)


@pytest.mark.parametrize(
    ("text", "look_back_ms", "expected_ms", "query"),
    [
        (None, 0, 10, ""),  # a START: no words, the frame nearest the onset
        ("What is on the table?", 0, 10, "table"),  # the table is in the cup's frame
        ("What colour is the cat?", 0, -60, "cat"),  # the window holds both: the cat's
        ("What colour is the cat?", 2000, -60, "cat"),
        ("Is my kitten hungry?", 0, -60, "kitten"),  # a close word in the cat's filter
        ("Hello there", 0, 10, ""),  # no object word: time
    ],
)
def test_the_named_object_is_chosen_and_otherwise_the_nearest_frame(
    words, text, look_back_ms, expected_ms, query
):
    frames = [(T0 - 60 * MS, CAT, None), (T0 + 10 * MS, CUP, None)]
    decision = decide(words, frames, text, look_back_ms)
    assert decision.chosen[0].time_offset_ns == expected_ms * MS
    assert (decision.query, decision.utterance_id) == (query, 3)


def test_a_named_object_is_looked_for_further_back_than_the_window(words):
    frames = [(T0 - 1500 * MS, CAT, None), (T0 + 10 * MS, CUP, None)]
    assert decide(words, frames, "What colour is the cat?").chosen[0].labels == CAT  # 3 s
    narrow = decide(words, frames, "What colour is the cat?", look_back_ms=1000)
    assert [c.labels for c in narrow.candidates] == [CUP]  # the cat is out of reach
    timed = decide(words, frames, "What is this?")  # nothing named: the window
    assert [c.labels for c in timed.candidates] == [CUP]


def test_this_is_the_object_the_hand_points_at(words):
    frames = [(T0 - 40 * MS, CUP, "cup"), (T0 + 30 * MS, CAT, None)]
    decision = decide(words, frames, "What is this?")
    (chosen,) = decision.chosen
    assert (chosen.labels, chosen.pointed, chosen.bloom_hit) == (CUP, "cup", True)
    assert decision.query == "this -> cup"
    (other,) = [c for c in decision.candidates if not c.chosen]
    assert other.reason.startswith("lower score than chosen (0.000 < 1.000)")
    unpointed = decide(
        words, [(T0 - 40 * MS, CUP, None), (T0 + 30 * MS, CAT, None)], "What is this?"
    )
    assert unpointed.query == "this -> nothing pointed at"
    assert unpointed.chosen[0].labels == CAT  # nearest


def test_the_explanation_names_time_hamming_and_bloom_of_every_candidate(words):
    frames = [(T0 - 60 * MS, CAT, None), (T0 + 10 * MS, CUP, None), (T0 + 50 * MS, (), None)]
    decision = decide(words, frames, "Is the mug full?")
    cat, cup, empty = decision.candidates
    assert cup.chosen and cup.bloom_hit and cup.reason == ""  # "mug" is in the cup's filter
    assert (cat.bloom_hit, cat.time_offset_ns) == (False, -60 * MS)
    assert "no word of 'mug' in its filter" in cat.reason
    assert 0 <= cat.hamming <= 32 and cup.hamming <= 12
    assert (empty.hamming, empty.labels, empty.score) == (-1, (), 0.0)  # nothing to compare


def test_the_message_carries_the_explanation_and_the_dialogue_reads_its_utterance(words):
    from omniflow.core.association import VisionPayload
    from omniflow.ros.dialogue_io import chosen_tokens
    from omniflow.ros.fusion_messages import association_msg

    frames = [(T0 - 60 * MS, CAT, None), (T0 + 10 * MS, CUP, "cup")]
    decision = decide(words, frames, "Is that cat asleep?")
    chosen = decision.chosen[0]
    shown = VisionPayload((("hand", "top-left"),), words.sight(CAT))
    decision = dataclasses.replace(
        decision,
        candidates=tuple(
            dataclasses.replace(c, payload=shown) if c.chosen else c for c in decision.candidates
        ),
    )
    msg = association_msg(decision)
    assert (msg.utterance_id, msg.query) == (3, "cat, this -> cup")
    cat, cup = msg.candidates
    assert cat.chosen and cat.summary == "cat; hand pointing top-left"
    assert (cat.time_offset_ns, cat.hamming, cat.bloom_hit) == (-60 * MS, 0, True)
    assert (list(cat.labels), cat.pointed) == (["cat"], "")
    assert (list(cup.labels), cup.pointed, cup.summary) == (list(CUP), "cup", "")
    assert cup.bloom_hit  # "that" points at the cup too: both named
    assert chosen_tokens(msg) == (T0, [(chosen.stamp_ns, cat.summary)], 3)
