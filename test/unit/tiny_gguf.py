"""A tiny random-weight llama GGUF (about 0.5 MB) for fast tests of the LLM path.

:func:`write_tiny_gguf` writes a real GGUF with the ``gguf`` package: llama architecture,
2 layers, 64-wide, a SentencePiece-style vocabulary of single characters, a few words and
the 256 byte-fallback tokens (so any text tokenizes). llama.cpp loads it in a fraction of a
second and generates thousands of tokens per second; the answers are random characters.
The rows of the end-of-sequence and byte tokens in the output matrix are zero while the others
are large, so greedy decoding (temperature 0) practically never ends by itself and writes only
printable ASCII: tests decide when it stops.
"""

from __future__ import annotations

import string
from pathlib import Path

import numpy as np

WORDS = ("the", "robot", "user", "box", "red", "what", "is", "this", "hello", "you", "see")


def _vocab() -> tuple[list[str], list[float], list[int]]:
    import gguf

    tokens = ["<unk>", "<s>", "</s>"]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    scores = [0.0, 0.0, 0.0]
    for byte in range(256):
        tokens.append(f"<0x{byte:02X}>")
        types.append(gguf.TokenType.BYTE)
        scores.append(0.0)
    chars = ["\u2581"] + [c for c in string.ascii_letters + string.digits + string.punctuation]
    for c in chars:
        tokens.append(c)
        types.append(gguf.TokenType.NORMAL)
        scores.append(-1.0)
    for i, word in enumerate(WORDS):
        for piece in (word, "\u2581" + word):
            tokens.append(piece)
            types.append(gguf.TokenType.NORMAL)
            scores.append(-0.5 + i * 1e-3)
    return tokens, scores, [int(t) for t in types]


def write_tiny_gguf(path: str | Path, *, seed: int = 0, context_length: int = 4096) -> Path:
    """Write the tiny model to ``path`` and return it."""
    import gguf

    path = Path(path)
    rng = np.random.default_rng(seed)
    tokens, scores, types = _vocab()
    n_vocab, n_embd, n_ff, n_head, n_layer = len(tokens), 64, 128, 4, 2

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("omniflow-tiny-test")
    writer.add_context_length(context_length)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head)
    writer.add_rope_dimension_count(n_embd // n_head)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(True)

    def weights(*shape: int, scale: float) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    writer.add_tensor("token_embd.weight", weights(n_vocab, n_embd, scale=1.0))
    writer.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    output = weights(n_vocab, n_embd, scale=1.0)
    # </s> and the byte tokens get logit 0 against large random ones: greedy decoding then
    # neither ends by itself nor writes broken UTF-8 (which servers hold back).
    output[2 : 3 + 256] = 0.0
    writer.add_tensor("output.weight", output)
    for i in range(n_layer):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            writer.add_tensor(f"blk.{i}.{name}.weight", weights(n_embd, n_embd, scale=0.2))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", weights(n_ff, n_embd, scale=0.2))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", weights(n_ff, n_embd, scale=0.2))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", weights(n_embd, n_ff, scale=0.2))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
