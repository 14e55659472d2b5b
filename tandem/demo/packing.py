"""Token streams for training: documents tokenized once, shuffled per epoch, packed into fixed rows.

Each document ends with <|endoftext|>; rows are cut from the concatenation of all documents in a
seeded per-epoch order, so a row may span two documents (standard packing). The position of the
stream is (epoch, row), which is all a checkpoint needs to resume the same data order.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer


@dataclass(frozen=True)
class TokenizedDocs:
    tokens: np.ndarray    # int32 [total tokens], documents back to back, each ending with eod
    offsets: np.ndarray   # int64 [num_docs + 1], document i is tokens[offsets[i]:offsets[i+1]]

    @property
    def num_docs(self) -> int:
        return len(self.offsets) - 1


def tokenize_docs(tok: Tokenizer, texts: list[str], eod_id: int) -> TokenizedDocs:
    ids = [e.ids + [eod_id] for e in tok.encode_batch(texts, add_special_tokens=False)]
    lengths = np.array([len(x) for x in ids], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    tokens = np.fromiter((t for x in ids for t in x), dtype=np.int32, count=int(offsets[-1]))
    return TokenizedDocs(tokens, offsets)


def save_docs(docs: TokenizedDocs, path: Path) -> None:
    np.savez(path, tokens=docs.tokens, offsets=docs.offsets)


def load_docs(path: Path) -> TokenizedDocs:
    z = np.load(path)
    return TokenizedDocs(z["tokens"], z["offsets"])


def concat_docs(parts: list[TokenizedDocs]) -> TokenizedDocs:
    tokens = np.concatenate([p.tokens for p in parts])
    offsets, base = [np.zeros(1, dtype=np.int64)], 0
    for p in parts:
        offsets.append(p.offsets[1:] + base)
        base += int(p.offsets[-1])
    return TokenizedDocs(tokens, np.concatenate(offsets))


def epoch_rows(docs: TokenizedDocs, seq_len: int, seed: int, epoch: int) -> np.ndarray:
    """int64 [num_rows, seq_len]: documents in a seeded order, concatenated, cut into rows
    (the tail shorter than a row is dropped)."""
    order = np.random.default_rng([seed, epoch]).permutation(docs.num_docs)
    stream = np.concatenate([docs.tokens[docs.offsets[i]:docs.offsets[i + 1]] for i in order])
    n = len(stream) // seq_len
    return stream[: n * seq_len].reshape(n, seq_len).astype(np.int64)


def fixed_rows(docs: TokenizedDocs, seq_len: int, max_rows: int) -> np.ndarray:
    """int64 [<= max_rows, seq_len]: the first rows of the documents in their stored order (for evaluation)."""
    n = min(max_rows, len(docs.tokens) // seq_len)
    return docs.tokens[: n * seq_len].reshape(n, seq_len).astype(np.int64)
