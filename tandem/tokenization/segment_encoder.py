"""Tokenizing rendered chat prompts piece by piece between special tokens, with the pieces cached.

Agents resend their whole context every turn: system prompt, tool definitions, every earlier
message. A rendered chat prompt is special tokens (role markers) and the text between them, and
a Hugging Face tokenizer cuts its input at added tokens before anything else, then tokenizes
each piece on its own; so the ids of a prompt are the ids of its pieces, joined, and a piece
seen in an earlier turn need not be tokenized again (a 60,000-token prompt: ~115 ms of
tokenization, one core, for the first turn; the new message's share for the next ones).

That equivalence holds for most tokenizers (byte-level BPE: Llama 3, Qwen, Mistral's Tekken) but
not all: a sentencepiece-style Metaspace that prepends its marker to the first piece only would
differ. So the encoder checks itself at construction on probe texts around every separator and
stays off (plain `encode`) when any differs; separators are only special tokens matched on the
raw text with no whitespace stripping, and none that another added token contains.
"""

from __future__ import annotations

import re
import threading
from array import array
from collections import OrderedDict

from tokenizers import Tokenizer as Backend

# Probe texts for the self-check, `{s}` a separator: spaces, newlines and non-ASCII at the cuts.
_PROBES = ("{s}system\nYou are terse.{s}\n{s}user\n hi  there {s}\n\n",
           " leading{s}  two  spaces {s}ünïcödé 日本 ✓{s}{s}x",
           "{s}\n{s} {s}\t{s}a\n\n\n b {s}",
           "end with text after{s}tail",
           "a{s}b{s} a b{s}e{s}I")  # single letters: in every vocabulary, with and without a marker


class SegmentEncoder:
    """Pieces are kept as 4-byte ids (a list of Python ints costs ~36 bytes a token): 32M
    characters of pieces, ~10M tokens, hold ~40 MB."""

    def __init__(self, backend: Backend, capacity_chars: int = 32 << 20) -> None:
        self._backend = backend
        self._capacity = capacity_chars
        self._cache: OrderedDict[str, array] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()
        self._ids = _separators(backend)
        self._pattern = re.compile("(" + "|".join(
            re.escape(s) for s in sorted(self._ids, key=len, reverse=True)) + ")") if self._ids else None
        self.enabled = self._pattern is not None and self._self_check()

    def encode(self, text: str) -> list[int]:
        """Ids of `text` without added BOS/EOS: the same as backend.encode(text, False)."""
        if not self.enabled:
            return self._backend.encode_batch([text], add_special_tokens=False)[0].ids
        return self._segmented(text)

    def _segmented(self, text: str) -> list[int]:
        pieces = self._pattern.split(text)  # text, separator, text, ..., text
        with self._lock:
            known = {p: self._hit(p) for p in set(pieces[0::2]) if p}
        missing = [p for p, ids in known.items() if ids is None]
        if missing:
            # encode_batch releases the GIL: other requests parse meanwhile
            for piece, enc in zip(missing, self._backend.encode_batch(missing, add_special_tokens=False)):
                known[piece] = array("i", enc.ids)
            with self._lock:
                for piece in missing:
                    self._store(piece, known[piece])
        out: list[int] = []
        for i, piece in enumerate(pieces):
            if i % 2:
                out.append(self._ids[piece])
            elif piece:
                out.extend(known[piece])
        return out

    def _hit(self, piece: str) -> array | None:
        ids = self._cache.get(piece)
        if ids is not None:
            self._cache.move_to_end(piece)
        return ids

    def _store(self, piece: str, ids: array) -> None:
        if piece in self._cache or len(piece) > self._capacity // 4:
            return
        self._cache[piece] = ids
        self._chars += len(piece)
        while self._chars > self._capacity:
            old, _ = self._cache.popitem(last=False)
            self._chars -= len(old)

    def _self_check(self) -> bool:
        try:
            return all(self._segmented(text) == self._backend.encode(text, add_special_tokens=False).ids
                       for text in (probe.format(s=sep) for sep in self._ids for probe in _PROBES))
        finally:
            self._cache.clear()
            self._chars = 0


def _separators(backend: Backend) -> dict[str, int]:
    """Special tokens safe to cut at: matched on the raw text, stripping no whitespace, not
    part of a longer added token, and starting with no added token's ending (that token, met
    first, would be matched across the cut)."""
    added = backend.get_added_tokens_decoder()
    contents = [t.content for t in added.values() if t.content]
    endings = {c[i:] for c in contents for i in range(1, len(c))}  # proper suffixes
    out = {}
    for token_id, t in added.items():
        c = t.content
        if not t.special or t.normalized or t.lstrip or t.rstrip or t.single_word or not c:
            continue
        if any(c in other and c != other for other in contents):
            continue
        if any(c[:i] in endings for i in range(1, len(c))):
            continue
        out[c] = token_id
    return out
