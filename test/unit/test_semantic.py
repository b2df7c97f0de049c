"""Semantic codes, the band Bloom filter and the gate (tier 1, no ROS)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from omniflow.core import semantic
from omniflow.core.semantic import (
    VERSION,
    BloomFilter,
    Gate,
    GateResult,
    LshEncoder,
    hamming,
    hamming_many,
    similarity,
)
from omniflow.errors import ConfigError

MS = 1_000_000
GOLDEN_VECTOR = np.array([0.3, -1.2, 0.5, 2.0, -0.7, 0.1, 1.1, -0.4])
CODES = st.integers(0, 2**32 - 1)


def test_a_fixed_vector_has_a_fixed_code_for_this_seed_and_version():
    """Pins the construction: same seed + VERSION -> same code on every machine and run.
    If numpy ever changed PCG64's stream this fails, and VERSION must be bumped."""
    assert VERSION == 1
    encoder = LshEncoder(dim=8, bits=32, seed=0)
    assert encoder.encode(GOLDEN_VECTOR) == 0x5BC763D5
    np.testing.assert_allclose(
        encoder.planes[0, :3], [0.06681528, -1.09477389, -0.81601345], rtol=1e-7
    )
    # No projection is near zero, so summation order (BLAS, SIMD) cannot flip a bit.
    assert np.abs(encoder.planes @ GOLDEN_VECTOR).min() > 0.05
    assert LshEncoder(dim=8, seed=0).encode(GOLDEN_VECTOR) == 0x5BC763D5
    assert LshEncoder(dim=8, seed=1).encode(GOLDEN_VECTOR) != 0x5BC763D5


def test_codes_are_uint32_the_opposite_vector_flips_every_bit_and_scale_does_not_matter():
    encoder = LshEncoder(dim=8)
    code = encoder.encode(GOLDEN_VECTOR)
    assert encoder.encode(-GOLDEN_VECTOR) == code ^ 0xFFFF_FFFF
    assert encoder.encode(GOLDEN_VECTOR * 1000.0) == code
    assert encoder.encode(np.zeros(8)) == 0
    assert 0 <= LshEncoder(dim=8, bits=12).encode(GOLDEN_VECTOR) < 2**12


def test_batch_encoding_gives_the_same_codes():
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((50, 64))
    for bits in (32, 12):
        encoder = LshEncoder(dim=64, bits=bits, seed=3)
        batch = encoder.encode_batch(vectors)
        assert batch.dtype == np.uint32
        assert batch.tolist() == [encoder.encode(v) for v in vectors]


def test_hamming_distance_estimates_the_angle_between_embeddings():
    """SimHash: each bit differs with probability theta / pi."""
    rng = np.random.default_rng(11)
    dim, pairs = 128, 300
    encoder = LshEncoder(dim=dim)
    for theta in (0.2, math.pi / 4, math.pi / 2, 2.5):
        a = rng.standard_normal((pairs, dim))
        a /= np.linalg.norm(a, axis=1, keepdims=True)
        ortho = rng.standard_normal((pairs, dim))
        ortho -= np.sum(ortho * a, axis=1, keepdims=True) * a
        ortho /= np.linalg.norm(ortho, axis=1, keepdims=True)
        b = math.cos(theta) * a + math.sin(theta) * ortho
        distances = hamming_many(0, encoder.encode_batch(a) ^ encoder.encode_batch(b))
        assert np.mean(distances) / 32 == pytest.approx(theta / math.pi, abs=0.03)


@given(a=CODES, b=CODES)
def test_hamming_and_similarity_are_symmetric_and_bounded(a, b):
    assert hamming(a, b) == hamming(b, a) == bin(a ^ b).count("1")
    assert 0.0 <= similarity(a, b) <= 1.0
    assert similarity(a, a) == 1.0
    assert similarity(a, b) == 1 - hamming(a, b) / 32


@pytest.mark.parametrize("numpy_has_bitwise_count", [True, False])
def test_vectorised_hamming_matches_with_and_without_numpy_bitwise_count(
    numpy_has_bitwise_count, monkeypatch
):
    if not numpy_has_bitwise_count:  # numpy 1.x on Ubuntu 24.04 robots
        monkeypatch.delattr(np, "bitwise_count", raising=False)
    rng = np.random.default_rng(5)
    codes = rng.integers(0, 2**32, size=200, dtype=np.uint32)
    got = semantic.hamming_many(0xDEADBEEF, codes)
    assert got.tolist() == [hamming(0xDEADBEEF, int(c)) for c in codes]
    assert hamming_many(1, np.array([], dtype=np.uint32)).tolist() == []


@pytest.mark.parametrize(
    ("vector", "message"),
    [
        (np.zeros(7), "expected a vector of 8"),
        (np.full(8, np.nan), "NaN"),
        (np.array([np.inf] + [0.0] * 7), "NaN or infinite"),
    ],
)
def test_bad_embeddings_are_rejected(vector, message):
    with pytest.raises(ValueError, match=message):
        LshEncoder(dim=8).encode(vector)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"dim": 0},
        {"dim": 8, "bits": 33},
        {"dim": 8, "bits": 0},
        {"dim": 8, "seed": -1},
        {"dim": 8, "seed": 1.5},
        {"dim": 8, "center": np.zeros(3)},
    ],
)
def test_bad_encoder_settings_are_config_errors(kwargs):
    with pytest.raises(ConfigError):
        LshEncoder(**kwargs)


def test_a_center_makes_one_orthant_embeddings_informative():
    rng = np.random.default_rng(2)
    features = np.abs(rng.standard_normal((200, 32))) + 3.0  # all positive, like ReLU output
    plain = LshEncoder(dim=32).encode_batch(features)
    centred = LshEncoder(dim=32, center=features.mean(axis=0)).encode_batch(features)
    spread = [np.mean(hamming_many(int(c), codes)) for codes in (plain, centred) for c in codes[:1]]
    assert spread[0] < 8 < spread[1]  # without centring every code looks alike


# --------------------------------------------------------------------------- Bloom filter
def flip_bits(code: int, positions: list[int]) -> int:
    for p in positions:
        code ^= 1 << p
    return code


@settings(max_examples=200, deadline=None)
@given(
    codes=st.lists(CODES, min_size=1, max_size=16),
    pick=st.integers(0, 15),
    flips=st.lists(st.integers(0, 31), max_size=3, unique=True),
    bands=st.sampled_from([4, 8]),
)
def test_bloom_never_misses_a_code_within_bands_minus_one_bits(codes, pick, flips, bands):
    bloom = BloomFilter(bits=512, hashes=3, bands=bands)
    for code in codes:
        bloom.add(code)
    flips = flips[: bloom.exact_hamming]
    assert bloom.maybe_similar(flip_bits(codes[pick % len(codes)], flips))


@pytest.mark.parametrize("keys", [32, 200, 400])
def test_bloom_false_positive_rate_is_measured_and_matches_theory(keys):
    """Key-level FPR of a 1024-bit, 3-hash filter: 32 keys is a window of 8 codes x 4
    bands (theory 0.07 %); 200 and 400 keys load it heavily (8.7 %, 32 %)."""
    bloom = BloomFilter(bits=1024, hashes=3, bands=4)
    rng = np.random.default_rng(keys)
    added = set(rng.integers(0, 2**40, size=keys).tolist())
    for key in added:
        bloom.add_key(key)
    trials = 40_000
    probes = rng.integers(2**40, 2**41, size=trials).tolist()
    measured = sum(bloom.has_key(k) for k in probes) / trials
    expected = bloom.expected_fpr
    # binomial standard error, plus 15 % for the hash family's deviation from ideal
    tolerance = 4 * math.sqrt(expected * (1 - expected) / trials) + 0.15 * expected
    assert measured == pytest.approx(expected, abs=tolerance)
    assert all(bloom.has_key(k) for k in added)


def test_bloom_answers_no_for_unrelated_codes_most_of_the_time():
    """End-to-end rate of "maybe similar" for random unrelated codes against a window of 8
    codes (4 bands of 8 bits): a band collides by chance with probability 1 - (255/256)^32
    = 11.8 %, plus the filter's own 0.07 %."""
    rng = np.random.default_rng(3)
    bloom = BloomFilter(bits=1024, hashes=3, bands=4)
    for code in rng.integers(0, 2**32, size=8).tolist():
        bloom.add(code)
    trials = 20_000
    rate = sum(bloom.maybe_similar(c) for c in rng.integers(0, 2**32, size=trials).tolist())
    expected = 1 - (255 / 256) ** 32 + bloom.expected_fpr
    assert rate / trials == pytest.approx(expected, abs=0.015)
    bloom.clear()
    assert bloom.keys_added == 0
    assert not any(bloom.maybe_similar(c) for c in range(1000))


@pytest.mark.parametrize(
    "kwargs", [{"bits": 4}, {"hashes": 0}, {"hashes": 17}, {"bands": 3}, {"bands": 64}]
)
def test_bad_bloom_settings_are_config_errors(kwargs):
    with pytest.raises(ConfigError):
        BloomFilter(**kwargs)


def test_bloom_rejects_codes_outside_uint32():
    with pytest.raises(ValueError, match="unsigned 32-bit"):
        BloomFilter().add(2**32)


# --------------------------------------------------------------------------- gate
T = 5_000 * MS


@pytest.mark.parametrize(
    ("gate", "code", "stamp", "expected"),
    [
        (Gate(12), 0b0, T, GateResult(True, 1.0, "")),
        (Gate(12), (1 << 12) - 1, T - 70 * MS, GateResult(True, 0.625, "")),
        (Gate(12), (1 << 17) - 1, T, GateResult(False, 1 - 17 / 32, "hamming 17 > 12")),
        (
            Gate(12, max_age_ns=60 * MS),
            0b111,
            T - 95 * MS,
            GateResult(False, 1 - 3 / 32, "too old (95.0 ms > 60.0 ms)"),
        ),
        (
            Gate(12, max_age_ns=60 * MS),
            (1 << 17) - 1,
            T - 95 * MS,
            GateResult(False, 1 - 17 / 32, "hamming 17 > 12; too old (95.0 ms > 60.0 ms)"),
        ),
        (Gate(12, max_age_ns=60 * MS), 0b1, T + 100 * MS, GateResult(True, 1 - 1 / 32, "")),
        (Gate(32), 0xFFFF_FFFF, T, GateResult(True, 0.0, "")),  # recency only
        (Gate(0), 0b1, T, GateResult(False, 1 - 1 / 32, "hamming 1 > 0")),
        (Gate(4, bits=8), 0b1111, T, GateResult(True, 0.5, "")),
    ],
)
def test_gate_decisions(gate, code, stamp, expected):
    result = gate.evaluate(0, T, code, stamp)
    assert result[:3] == expected[:3]
    assert (result.hamming, result.bloom_hit) == ((code & 0xFFFF_FFFF).bit_count(), False)


def _filter(*words: str) -> BloomFilter:
    bloom = BloomFilter(bits=512, hashes=3)
    for word in words:
        bloom.add_word(word)
    return bloom


@pytest.mark.parametrize(
    ("trigger", "code", "words", "bloom", "expected"),
    [
        # named and shown: Bloom hit and equal codes
        (0b0, 0b0, ("cat",), _filter("cat", "kitten"), GateResult(True, 1.0, "", 0, True)),
        # a close word in the filter, codes 8 bits apart (within 10)
        (0b0, 0xFF, ("mug",), _filter("cup", "mug"), GateResult(True, 0.875, "", 8, True)),
        # another object: no hit, codes too far apart to count
        (
            0b0,
            (1 << 15) - 1,
            ("cat",),
            _filter("cup", "mug"),
            GateResult(True, 0.0, "hamming 15 > 10; no word of 'cat' in its filter", 15, False),
        ),
        # a frame without labels has no code: nothing to compare
        (0b0, None, ("cat",), None, GateResult(True, 0.0, "no word of 'cat' in its filter")),
        # no words (a speech onset): every candidate scores 0, time decides
        (None, 0b0, (), _filter("cup"), GateResult(True, 0.0, "")),
    ],
)
def test_gate_by_meaning(trigger, code, words, bloom, expected):
    assert Gate(10).evaluate(trigger, T, code, T, words=words, bloom=bloom) == expected


def test_bloom_filter_words_have_no_false_negatives_and_few_false_hits():
    words = [f"word{i}" for i in range(30)]
    bloom = _filter(*words)
    assert all(bloom.has_word(w.upper()) for w in words)  # case does not matter
    false_hits = sum(bloom.has_word(f"other{i}") for i in range(2000))
    assert false_hits / 2000 <= 3 * bloom.expected_fpr + 0.002


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_hamming": -1},
        {"max_hamming": 33},
        {"max_age_ns": 0},
        {"max_hamming": 9, "bits": 8},
        {"max_hamming": True},
    ],
)
def test_bad_gate_settings_are_config_errors(kwargs):
    with pytest.raises(ConfigError):
        Gate(**kwargs)
