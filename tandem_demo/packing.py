"""Token streams for training: documents tokenized once, shuffled per epoch, packed into fixed rows.

Each document ends with <|endoftext|>. Two packings, both in a seeded per-epoch order:
- "stream" (`epoch_rows`): rows cut from the concatenation of all documents, so a row may start in
  the middle of one (standard packing). A tool call whose transcript began in the previous row then
  has no tool list to read: with generated tool names such a call can only be guessed (52% of the
  calls of a 14,000-transcript `pool` corpus, counted), which rewards making names up;
- "aligned" (`aligned_rows`): every document starts a row or follows whole documents in one, so
  what a transcript's call needs (its tool list, its request) is earlier in the same row. Rows are
  filled best-fit from a bounded set of open rows, the rest padded (padding carries no loss); a
  document longer than a row fills rows from its start, the last piece joining the others.
The position of the stream is (epoch, row), which is all a checkpoint needs to resume the same data
order.
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


def aligned_rows(docs: TokenizedDocs, seq_len: int, seed: int, epoch: int, pad_id: int,
                 open_rows: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """(int64 [num_rows, seq_len], bool [num_rows, seq_len] True on padding): documents in a seeded
    order, each placed whole into the open row with the least room that holds it (best fit among at
    most `open_rows` rows; when none has room, the fullest is closed, padded, and a new one opened);
    a document longer than a row is cut into row-sized pieces from its start."""
    order = np.random.default_rng([seed, epoch]).permutation(docs.num_docs)
    pieces: list[np.ndarray] = []
    for i in order:
        d = docs.tokens[docs.offsets[i]:docs.offsets[i + 1]]
        pieces += [d[at:at + seq_len] for at in range(0, len(d), seq_len)]
    rows: list[list[np.ndarray]] = []
    room: list[int] = []      # free positions of each open row (index into `rows` via `open_ix`)
    open_ix: list[int] = []
    for piece in pieces:
        n = len(piece)
        fits = [k for k in range(len(open_ix)) if room[k] >= n]
        if fits:
            k = min(fits, key=lambda k: room[k])
        else:
            if len(open_ix) >= open_rows:   # close the fullest open row
                full = min(range(len(open_ix)), key=lambda k: room[k])
                del open_ix[full], room[full]
            rows.append([])
            open_ix.append(len(rows) - 1)
            room.append(seq_len)
            k = len(open_ix) - 1
        rows[open_ix[k]].append(piece)
        room[k] -= n
        if room[k] == 0:
            del open_ix[k], room[k]
    out = np.full((len(rows), seq_len), pad_id, dtype=np.int64)
    pad = np.ones((len(rows), seq_len), dtype=bool)
    for r, parts in enumerate(rows):
        n = sum(len(p) for p in parts)
        if n:
            out[r, :n] = np.concatenate(parts)
            pad[r, :n] = False
    return out, pad


def fixed_rows(docs: TokenizedDocs, seq_len: int, max_rows: int) -> np.ndarray:
    """int64 [<= max_rows, seq_len]: the first rows of the documents in their stored order (for evaluation)."""
    n = min(max_rows, len(docs.tokens) // seq_len)
    return docs.tokens[: n * seq_len].reshape(n, seq_len).astype(np.int64)
