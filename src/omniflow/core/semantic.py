"""Semantic codes: 32-bit locality-sensitive hashes of embeddings, a Bloom filter over their
LSH bands, and the gate that decides whether two tokens belong together.

:class:`LshEncoder` is sign-random-projection hashing (SimHash): each of ``bits`` random
hyperplanes through the origin gives one bit, set when the embedding lies on its positive
side. For two embeddings at angle theta, each bit differs with probability theta / pi, so
the Hamming distance of their codes estimates the angle, and :func:`similarity` (1 - distance
/ bits) falls as the embeddings drift apart. A code costs one (bits x dim) matrix-vector
product.

Reproducibility: the hyperplanes are drawn from numpy's PCG64 bit generator seeded with a
``SeedSequence`` of (``VERSION``, seed, dim, bits), turned into Gaussians by Box-Muller in this
module. NEP 19 keeps bit-generator streams and ``SeedSequence`` stable across numpy versions
and machines (the distribution methods of ``Generator`` are not promised to be), so the same
seed and version give the same codes everywhere; a golden test pins one code. Bump
``VERSION`` whenever the construction changes: codes of different versions do not compare.

:class:`BloomFilter` answers "might anything in this window be similar to this code?" in
O(bands x hashes) without touching the tokens. It stores *LSH band keys*, not whole codes: a
code is cut into ``bands`` bands of 32 / bands bits, and a key is (band index, band value).
Two codes within Hamming distance ``bands - 1`` share at least one band exactly (pigeonhole),
so for them the filter never answers no; beyond that distance it is a probabilistic test
(a band matches with probability about s ** (32 / bands) for per-bit agreement s). Whole
codes would only answer "is this exact code here?", which a similarity test cannot use.

:class:`BloomFilter` also holds *words* (:meth:`BloomFilter.add_word`): a vision token carries
one with its object labels and their close words, so "the cup" finds the frame that shows a
cup without comparing strings, and with no false negatives.

:class:`Gate` judges a candidate against the trigger: by codes alone (one embedding space),
or by meaning: a Bloom hit (a word of the trigger is in the candidate's filter) and the
Hamming similarity of the codes when within ``max_hamming`` (about cosine 0.7 at 10 bits: the
same object or a close word) each count half; a trigger without words (a speech onset)
scores every candidate 0, and time decides.
No ROS imports.
"""

from __future__ import annotations

import hashlib
import math
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from omniflow.core.timing import NS_PER_MS
from omniflow.core.tokens import CODE_MAX
from omniflow.errors import ConfigError

__all__ = [
    "CODE_BITS",
    "VERSION",
    "BloomFilter",
    "Gate",
    "GateResult",
    "LshEncoder",
    "hamming",
    "hamming_many",
    "similarity",
]

#: Version of the code construction (hyperplane generation and bit order).
VERSION = 1
#: Bits in a semantic code.
CODE_BITS = 32

_MASK64 = 0xFFFF_FFFF_FFFF_FFFF
_POPCOUNT8 = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)


def hamming(a: int, b: int) -> int:
    """Number of differing bits between two codes."""
    return (int(a) ^ int(b)).bit_count()


def hamming_many(code: int, codes: ArrayLike) -> np.ndarray:
    """Hamming distance from ``code`` to each of ``codes`` (vectorised, uint32 codes)."""
    xor = np.bitwise_xor(np.asarray(codes, dtype=np.uint32), np.uint32(code))
    if hasattr(np, "bitwise_count"):  # numpy >= 2.0
        return np.bitwise_count(xor).astype(np.int64)
    # numpy 1.x (Ubuntu 24.04's python3-numpy): a byte-wise popcount table.
    octets = np.ascontiguousarray(xor).view(np.uint8).reshape(*xor.shape, 4)
    return _POPCOUNT8[octets].sum(axis=-1, dtype=np.int64)


def similarity(a: int, b: int, bits: int = CODE_BITS) -> float:
    """1 - hamming / bits: 1.0 for equal codes, about 0.5 for unrelated ones."""
    return 1.0 - hamming(a, b) / bits


def _check_int(name: str, value: object, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ConfigError(f"{name} must be an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        allowed = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ConfigError(f"{name} must be {allowed}, got {value}")
    return int(value)


class LshEncoder:
    """Sign-random-projection hash of ``dim``-dimensional embeddings into ``bits``-bit codes.

    Bit i of a code is 1 when ``planes[i] . (vector - center) > 0``; a zero vector (no
    direction) has code 0. ``center`` (optional, e.g. the mean embedding of a data set) makes
    the codes of embeddings that all lie in one orthant (ReLU features) informative.
    """

    def __init__(
        self, dim: int, bits: int = CODE_BITS, seed: int = 0, center: ArrayLike | None = None
    ) -> None:
        self.dim = _check_int("dim", dim, 1)
        self.bits = _check_int("bits", bits, 1, CODE_BITS)
        self.seed = _check_int("seed", seed, 0)
        self.version = VERSION
        self.planes = _gaussian_planes(self.bits, self.dim, self.seed)
        self.center: np.ndarray | None = None
        if center is not None:
            c = np.asarray(center, dtype=np.float64)
            if c.shape != (self.dim,) or not np.all(np.isfinite(c)):
                raise ConfigError(f"center must be {self.dim} finite numbers")
            self.center = c

    def _project(self, vectors: np.ndarray) -> np.ndarray:
        if self.center is not None:
            vectors = vectors - self.center
        return vectors @ self.planes.T

    def encode(self, vector: ArrayLike) -> int:
        """The code of one embedding, as a Python int in [0, 2**bits). Raises ValueError for
        a wrong shape or non-finite values."""
        v = np.asarray(vector, dtype=np.float64)
        if v.shape != (self.dim,):
            raise ValueError(f"expected a vector of {self.dim} values, got shape {v.shape}")
        if not np.all(np.isfinite(v)):
            raise ValueError("the embedding contains NaN or infinite values")
        positive = self._project(v) > 0
        return int.from_bytes(np.packbits(positive, bitorder="little").tobytes(), "little")

    def encode_batch(self, vectors: ArrayLike) -> np.ndarray:
        """Codes (uint32) of an (n, dim) array of embeddings, same bits as :meth:`encode`."""
        m = np.asarray(vectors, dtype=np.float64)
        if m.ndim != 2 or m.shape[1] != self.dim:
            raise ValueError(f"expected an (n, {self.dim}) array, got shape {m.shape}")
        if not np.all(np.isfinite(m)):
            raise ValueError("the embeddings contain NaN or infinite values")
        packed = np.packbits(self._project(m) > 0, axis=1, bitorder="little")
        padded = np.zeros((m.shape[0], 4), dtype=np.uint8)
        padded[:, : packed.shape[1]] = packed
        return padded.view("<u4").reshape(-1).astype(np.uint32)

    def similarity(self, a: int, b: int) -> float:
        """1 - hamming / bits for this encoder's code length."""
        return similarity(a, b, self.bits)


def _gaussian_planes(bits: int, dim: int, seed: int) -> np.ndarray:
    """(bits, dim) standard normal values from PCG64's raw stream via Box-Muller."""
    sequence = np.random.SeedSequence([VERSION, seed, dim, bits])
    bit_generator = np.random.PCG64(sequence)
    pairs = (bits * dim + 1) // 2
    raw = bit_generator.random_raw(2 * pairs).reshape(2, pairs)
    # 53-bit uniforms strictly inside (0, 1): log() never sees 0.
    u = ((raw >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53
    radius = np.sqrt(-2.0 * np.log(u[0]))
    angle = 2.0 * math.pi * u[1]
    normals = np.concatenate([radius * np.cos(angle), radius * np.sin(angle)])
    return normals[: bits * dim].reshape(bits, dim)


def _mix64(x: int) -> int:
    """SplitMix64's finaliser: a fast, well-mixed 64-bit hash of an integer key."""
    x = (x + 0x9E37_79B9_7F4A_7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58_476D_1CE4_E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D0_49BB_1331_11EB) & _MASK64
    return x ^ (x >> 31)


def _word_key(word: str) -> int:
    digest = hashlib.blake2b(word.strip().lower().encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


class BloomFilter:
    """A Bloom filter of LSH band keys of 32-bit codes (see the module docstring).

    ``bits`` filter bits (a ``bytearray``) and ``hashes`` probes per key (double hashing of
    one SplitMix64 value); ``bands`` must divide 32. Memory is allocated once; :meth:`clear`
    empties it for the next window. A key that was added is always found (no false
    negatives); a key that was not is found with probability about :attr:`expected_fpr`.

    Measured (``benchmarks/fusion_core.py``): for a decision window of a few vision codes,
    building the filter and testing one code costs about 8x a direct Hamming scan of the
    same codes, so the associator scores candidates directly (it must report every
    candidate's score anyway). The filter pays off for "anything like this?" over many
    codes, where only a yes/no is needed, and as a vision token's set of label words
    (:meth:`add_word`), tested once per word of a query.
    """

    def __init__(self, bits: int = 1024, hashes: int = 3, bands: int = 4) -> None:
        self.bits = _check_int("bits", bits, 8)
        self.hashes = _check_int("hashes", hashes, 1, 16)
        bands = _check_int("bands", bands, 1, CODE_BITS)
        if CODE_BITS % bands:
            raise ConfigError(f"bands must divide {CODE_BITS} (1, 2, 4, 8, 16 or 32), got {bands}")
        self.bands = bands
        self._band_bits = CODE_BITS // bands
        self._band_mask = (1 << self._band_bits) - 1
        self._bytes = bytearray((self.bits + 7) // 8)
        self._zeros = bytes(len(self._bytes))
        self.keys_added = 0

    @property
    def exact_hamming(self) -> int:
        """Codes within this Hamming distance of an added code always test positive."""
        return self.bands - 1

    @property
    def expected_fpr(self) -> float:
        """Probability that a key never added tests positive: (1 - e^(-k n / m))^k."""
        k, n, m = self.hashes, self.keys_added, self.bits
        return (1.0 - math.exp(-k * n / m)) ** k

    def clear(self) -> None:
        """Forget every key (the storage is reused)."""
        self._bytes[:] = self._zeros  # same length: copied in place
        self.keys_added = 0

    def _probes(self, key: int) -> list[int]:
        h = _mix64(key)
        h1, h2 = h & 0xFFFF_FFFF, (h >> 32) | 1
        return [(h1 + i * h2) % self.bits for i in range(self.hashes)]

    def add_key(self, key: int) -> None:
        """Add one non-negative integer key (below 2**64)."""
        filter_bytes = self._bytes
        for probe in self._probes(key):
            filter_bytes[probe >> 3] |= 1 << (probe & 7)
        self.keys_added += 1

    def has_key(self, key: int) -> bool:
        """True if ``key`` may have been added; False if it certainly was not."""
        filter_bytes = self._bytes
        return all(filter_bytes[p >> 3] >> (p & 7) & 1 for p in self._probes(key))

    def add_word(self, word: str) -> None:
        """Add a word (lower-cased; its stable 64-bit BLAKE2b hash is the key)."""
        self.add_key(_word_key(word))

    def has_word(self, word: str) -> bool:
        """True if ``word`` may have been added; False if it certainly was not."""
        return self.has_key(_word_key(word))

    def band_keys(self, code: int) -> list[int]:
        """The code's band keys: band index in the high bits, band value in the low 32."""
        width, mask = self._band_bits, self._band_mask
        return [(band << 32) | ((code >> (band * width)) & mask) for band in range(self.bands)]

    def add(self, code: int) -> None:
        """Add a 32-bit code (its ``bands`` band keys)."""
        if not 0 <= code <= CODE_MAX:
            raise ValueError(f"code must be an unsigned 32-bit integer, got {code!r}")
        for key in self.band_keys(code):
            self.add_key(key)

    def maybe_similar(self, code: int) -> bool:
        """True if some added code may share a band with ``code`` (always True for those
        within :attr:`exact_hamming`); False: no added code is that close."""
        return any(self.has_key(key) for key in self.band_keys(code))


class GateResult(NamedTuple):
    """The gate's verdict on one candidate."""

    accepted: bool
    score: float  # 0.5 Bloom hit + 0.5 code similarity (when within max_hamming), 0..1
    reason: str  # why it was rejected or scored low; empty when it matched or was not asked
    hamming: int = -1  # Hamming distance of the codes; -1: nothing to compare
    bloom_hit: bool = False  # a word of the trigger is in the candidate's filter


class Gate:
    """Judges a candidate against the trigger, in one of two ways.

    - Codes alone (``words`` None: a trigger and candidates of one embedding space): a
      candidate is accepted when its code is within ``max_hamming`` of the trigger's, scored
      by their Hamming similarity (``max_hamming = bits`` accepts on recency alone).
    - By meaning (``words`` given: what the trigger names: its object word, or the label a
      hand points at for "this"; ``bloom``: the candidate's filter of label words): every
      candidate is accepted and scored 0.5 for a Bloom hit plus 0.5 x the code similarity
      when within ``max_hamming`` (32-bit codes of unrelated words still agree on about half
      their bits, so only near codes are evidence). ``trigger_code``/``code`` None: nothing
      to compare (no object word, a frame without a label). No words: every candidate
      scores 0, and time decides.

    Either way a candidate more than ``max_age_ns`` older than the trigger is rejected (None:
    no age limit beyond the window). Reasons read e.g. ``"hamming 17 > 12; too old (95.0 ms
    > 60.0 ms)"`` or ``"hamming 15 > 10; no word of 'cat' in its filter"``.
    """

    def __init__(
        self, max_hamming: int = 12, max_age_ns: int | None = None, bits: int = CODE_BITS
    ) -> None:
        self.bits = _check_int("bits", bits, 1, CODE_BITS)
        self.max_hamming = _check_int("max_hamming", max_hamming, 0, self.bits)
        if max_age_ns is not None:
            max_age_ns = _check_int("max_age_ns", max_age_ns, 1)
        self.max_age_ns = max_age_ns

    def evaluate(
        self,
        trigger_code: int | None,
        trigger_ns: int,
        code: int | None,
        stamp_ns: int,
        *,
        words: tuple[str, ...] | None = None,
        bloom: BloomFilter | None = None,
    ) -> GateResult:
        """Judge a candidate (code, stamp, filter) against the trigger (code, stamp, words)."""
        distance = -1 if trigger_code is None or code is None else hamming(trigger_code, code)
        near = 0 <= distance <= self.max_hamming
        similarity = 1.0 - distance / self.bits if distance >= 0 else 0.0
        notes = [f"hamming {distance} > {self.max_hamming}"] if distance > self.max_hamming else []
        hit = False
        if words is None:
            accepted, score = near, similarity
        else:
            hit = bloom is not None and any(bloom.has_word(w) for w in words)
            accepted = True
            score = (0.5 if hit else 0.0) + (0.5 * similarity if near else 0.0)
            if words and not hit:
                notes.append(f"no word of {' '.join(words)!r} in its filter")
        age = trigger_ns - stamp_ns
        if self.max_age_ns is not None and age > self.max_age_ns:
            accepted = False
            notes.append(
                f"too old ({age / NS_PER_MS:.1f} ms > {self.max_age_ns / NS_PER_MS:.1f} ms)"
            )
        return GateResult(accepted, score, "; ".join(notes), distance, hit)
