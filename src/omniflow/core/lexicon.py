"""One word space for speech and sight: object labels, their close words, and spoken words.

The vision encoder names what it sees with the 80 labels of the COCO 2017 detection set
(:data:`COCO_LABELS`, the ``coco_labels.txt`` of Coral's SSD MobileNet v2 detector); people
name the same things with other words ("mug", "kitten", "sofa"). :data:`CLOSE_WORDS` lists
the usual spoken words for each label, and :class:`WordSpace` puts labels, close words and
any spoken word into one embedding space (all-MiniLM-L6-v2, see
:mod:`omniflow.engines.embedding`), hashed into 32-bit LSH codes by one
:class:`~omniflow.core.semantic.LshEncoder`, so a word heard and an object seen can be
compared by Hamming distance.

- :meth:`WordSpace.sight` turns a frame's labels (and the one a hand points at) into a
  :class:`Sight`: the code of its main object (the pointed-at one, else the most confident)
  and the words its Bloom filter holds (every label and its close words);
- :meth:`WordSpace.query` turns a transcript into a :class:`Query`: its content words (by
  elimination: question words, articles, pronouns, colours and other function words are
  dropped; a plural's singular is added), the object word among them (the one nearest to a
  label, if near enough) and its code, and whether it points ("this", "that", "here"...),
  which the association resolves to the object the hand points at.

Label and close-word vectors are computed once and shipped (``omniflow/data/coco_words.npz``,
made by ``scripts/make_word_vectors.py``); other words are embedded when first heard, if an
embedder is given. No ROS imports, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from omniflow.core.semantic import LshEncoder

__all__ = [
    "CLOSE_WORDS",
    "COCO_LABELS",
    "DEICTIC_WORDS",
    "Query",
    "Sight",
    "WordSpace",
    "content_words",
    "vocabulary",
]

#: The 80 object classes of COCO 2017 detection, in the detector's class-id order.
COCO_LABELS = (
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat",
    "traffic light", "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat",
    "dog", "horse", "sheep", "cow", "elephant", "bear", "zebra", "giraffe", "backpack",
    "umbrella", "handbag", "tie", "suitcase", "frisbee", "skis", "snowboard", "sports ball",
    "kite", "baseball bat", "baseball glove", "skateboard", "surfboard", "tennis racket",
    "bottle", "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple",
    "sandwich", "orange", "broccoli", "carrot", "hot dog", "pizza", "donut", "cake", "chair",
    "couch", "potted plant", "bed", "dining table", "toilet", "tv", "laptop", "mouse",
    "remote", "keyboard", "cell phone", "microwave", "oven", "toaster", "sink",
    "refrigerator", "book", "clock", "vase", "scissors", "teddy bear", "hair drier",
    "toothbrush",
)  # fmt: skip

#: Words people say for a label (the label's own words are implied).
CLOSE_WORDS: Mapping[str, tuple[str, ...]] = {
    "person": ("man", "woman", "people", "someone", "child", "boy", "girl", "human"),
    "bicycle": ("bike",),
    "car": ("vehicle",),
    "motorcycle": ("motorbike",),
    "airplane": ("plane", "aeroplane", "aircraft"),
    "cat": ("kitten", "kitty", "pussycat"),
    "dog": ("puppy",),
    "bird": ("parrot",),
    "backpack": ("rucksack",),
    "handbag": ("purse", "bag"),
    "sports ball": ("ball", "football"),
    "bottle": ("flask",),
    "wine glass": ("glass",),
    "cup": ("mug", "coffee", "tea", "saucer"),
    "bowl": ("dish",),
    "donut": ("doughnut",),
    "chair": ("seat", "stool"),
    "couch": ("sofa",),
    "potted plant": ("plant", "flower"),
    "dining table": ("table", "desk"),
    "tv": ("television", "screen", "monitor"),
    "laptop": ("computer", "notebook"),
    "remote": ("controller",),
    "cell phone": ("phone", "mobile", "smartphone"),
    "refrigerator": ("fridge",),
    "teddy bear": ("teddy", "toy"),
    "hair drier": ("hairdryer", "dryer"),
}

#: Words that point rather than name: resolved to the object the hand points at.
DEICTIC_WORDS = frozenset({"this", "that", "these", "those", "here"})

# Dropped from a transcript before looking for the object word: question and function
# words, pronouns, common verbs, and colour and quality words (asked *about* an object).
_STOPWORDS = frozenset(
    """
    a an the and or but of to in on at by for with from up down out over under into onto
    about as is are was were be been being am do does did doing have has had having can
    could will would shall should may might must what which who whom whose where when why
    how i me my mine you your yours he him his she her hers it its we us our they them their
    there then than so not no yes please tell show say see look give let me some any all
    each every much many more most very too also just only like kind sort thing things one
    stop okay ok hey hello hi well now again colour color colours colors red green blue
    yellow black white brown grey gray orange pink purple big small large little new old
    name called call doing holding pointing point mean is it's what's that's there's
    """.split()
)

_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")


def vocabulary() -> tuple[str, ...]:
    """Every label and close word, labels first (the words whose vectors are shipped)."""
    words = list(COCO_LABELS)
    for label in COCO_LABELS:
        words.extend(w for w in CLOSE_WORDS.get(label, ()) if w not in words)
    return tuple(words)


def _singular(word: str) -> str | None:
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("es") and word[-3] in "sxz":
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return None


def content_words(text: str) -> tuple[tuple[str, ...], bool]:
    """(content words of ``text``, whether it points), lower case, in order; a plural's
    singular follows it ("cats" -> "cats", "cat")."""
    words: list[str] = []
    points = False
    for word in _WORD.findall(text.lower()):
        if word in DEICTIC_WORDS:
            points = True
        if word in _STOPWORDS or word in DEICTIC_WORDS or len(word) < 2:
            continue
        words.append(word)
        single = _singular(word)
        if single is not None:
            words.append(single)
    return tuple(dict.fromkeys(words)), points


@dataclass(frozen=True)
class Sight:
    """What a frame shows, in the word space: its labels (most confident first), the label
    a hand points at, the code of its main object (0 with no label) and the words its Bloom
    filter holds."""

    labels: tuple[str, ...] = ()
    pointed: str | None = None
    code: int = 0
    words: tuple[str, ...] = ()

    @property
    def main(self) -> str | None:
        """The pointed-at label, else the most confident one."""
        return self.pointed or (self.labels[0] if self.labels else None)


@dataclass(frozen=True)
class Query:
    """What a transcript asks about: its content words, the object word among them (None:
    none near a label), that word's code, its cosine to the nearest label, and whether
    the transcript points."""

    text: str = ""
    words: tuple[str, ...] = ()
    object_word: str | None = None
    code: int | None = None
    similarity: float = 0.0
    points: bool = False

    @property
    def evidence(self) -> bool:
        """Whether the query says anything the frames can be told apart by."""
        return self.object_word is not None or self.points


class WordSpace:
    """Labels, close words and spoken words in one embedding space, hashed by one LSH.

    ``words``/``vectors``: the shipped vocabulary (unit rows); ``embed``: a function that
    embeds any other word (None: unknown words have no vector); ``min_similarity``: a
    content word is the object word only when its cosine to some label reaches this.
    """

    def __init__(
        self,
        words: Iterable[str],
        vectors: np.ndarray,
        embed: Callable[[str], np.ndarray] | None = None,
        *,
        min_similarity: float = 0.5,
        seed: int = 7,
    ) -> None:
        self.words = tuple(words)
        self.vectors = np.asarray(vectors, dtype=np.float32)
        if self.vectors.ndim != 2 or len(self.words) != len(self.vectors):
            raise ValueError("one vector per word is needed")
        self._index = {w: i for i, w in enumerate(self.words)}
        missing = [label for label in COCO_LABELS if label not in self._index]
        if missing:
            raise ValueError(f"the word vectors lack the labels {missing[:5]}")
        self._label_rows = np.array([self._index[label] for label in COCO_LABELS])
        self._label_of = {label: label for label in COCO_LABELS}
        self._multiword = [label for label in COCO_LABELS if " " in label]
        for label, close in CLOSE_WORDS.items():
            for word in close:
                self._label_of.setdefault(word, label)
        self._embed = embed
        self._extra: dict[str, np.ndarray] = {}
        self.min_similarity = float(min_similarity)
        self.lsh = LshEncoder(self.vectors.shape[1], seed=seed)
        self._codes: dict[str, int] = {}

    def vector(self, word: str) -> np.ndarray | None:
        """The word's unit vector: shipped, embedded before, or embedded now (None: unknown
        and no embedder)."""
        row = self._index.get(word)
        if row is not None:
            return self.vectors[row]
        vector = self._extra.get(word)
        if vector is None and self._embed is not None:
            vector = np.asarray(self._embed(word), dtype=np.float32)
            if len(self._extra) >= 4096:
                self._extra.clear()
            self._extra[word] = vector
        return vector

    def code(self, word: str) -> int | None:
        """The 32-bit LSH code of the word's vector (None: no vector)."""
        code = self._codes.get(word)
        if code is None:
            vector = self.vector(word)
            if vector is None:
                return None
            code = self.lsh.encode(vector)
            if len(self._codes) < 8192:
                self._codes[word] = code
        return code

    def close_words(self, label: str) -> tuple[str, ...]:
        """The label, its own words ("dining table" -> "dining", "table") and its close
        words: what a Bloom filter of a frame showing it holds."""
        parts = label.split() if " " in label else []
        return (label, *parts, *CLOSE_WORDS.get(label, ()))

    def sight(self, labels: Iterable[str], pointed: str | None = None) -> Sight:
        """A frame's :class:`Sight` from its labels (most confident first)."""
        labels = tuple(dict.fromkeys(str(label) for label in labels))
        if pointed is not None and pointed not in labels:
            labels = (pointed, *labels)
        main = pointed or (labels[0] if labels else None)
        code = (self.code(main) or 0) if main is not None else 0
        words = tuple(dict.fromkeys(w for label in labels for w in self.close_words(label)))
        return Sight(labels, pointed, code, words)

    def query(self, text: str) -> Query:
        """The :class:`Query` of a (partial or final) transcript."""
        words, points = content_words(text)
        said = " ".join(_WORD.findall(text.lower()))
        named = [label for label in self._multiword if f" {label} " in f" {said} "]
        if named:  # "dining table", "teddy bear": the whole label
            return Query(text, words, named[0], self.code(named[0]), 1.0, points)
        best, best_similarity = None, 0.0
        labels = self.vectors[self._label_rows]
        for word in words:
            if word in self._label_of:  # a label or a close word names its object outright
                best, best_similarity = word, 1.0
                break
            vector = self.vector(word)
            if vector is None:
                continue
            similarity = float(np.max(labels @ vector))
            if similarity > best_similarity:
                best, best_similarity = word, similarity
        if best is None or best_similarity < self.min_similarity:
            return Query(text, words, None, None, best_similarity, points)
        return Query(text, words, best, self.code(best), best_similarity, points)
