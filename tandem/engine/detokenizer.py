"""Turn a request's output tokens into text, one engine step at a time.

Two layers, each O(new tokens) per push:

1. Offset-based incremental decoding (as in HF TGI and vLLM). Only a small window of ids is
   decoded: ids[prefix_offset:] against ids[prefix_offset:read_offset]; the difference is the
   new text. Decoding from a few tokens back keeps decoder context (SentencePiece's leading
   space, byte-level merges) right. The window starts inside the prompt's last
   PROMPT_CONTEXT_TOKENS tokens, so the first output token gets its correct leading space.
   Text ending in U+FFFD (an incomplete UTF-8 sequence split across tokens) is not final: the
   part before the trailing U+FFFD run is committed, the rest waits for more tokens.
2. Stop strings. Committed text is searched for stop strings in the unsent tail (`_held`) plus
   the new text. While no stop string has appeared, the longest unsent suffix that could still
   begin a stop string (at most max(len(stop)) - 1 characters) is held back. When one appears,
   the text before it (or through it, with include_stop_str_in_output) is the last output.
   Among several stop strings the one that is complete first (earliest end) wins, so the
   result does not depend on how tokens were grouped into pushes; on a tie, the longer one.

Invariants: the concatenation of everything push() and flush() returned is
tokenizer.decode(output ids) (cut at the first stop string); push() never returns text that
ends in U+FFFD (flush() returns what decode gives, so a request that ends mid-character gets
the replacement character, exactly as a full decode would).

`prefix_output_ids` (a stream resumed on another worker): the detokenizer is put in the state
it would have after push(prefix_output_ids), and that push's text counts as already delivered.
So the worker that produced those tokens must have sent exactly what its push() returned
(not flush()); whatever it held back is emitted here.

Known limit: a prompt that ends in the middle of a UTF-8 sequence completed by the first output
token loses that character (the prompt part is not output text).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tokenizers import Tokenizer

PROMPT_CONTEXT_TOKENS = 5  # prompt tokens decoded as context for the first output token
REPLACEMENT = "\ufffd"


@dataclass(frozen=True)
class DetokenizerStep:
    text: str       # new final text, possibly empty
    stopped: bool   # a stop string appeared; the request is finished


class IncrementalDetokenizer:
    def __init__(self, tokenizer: Tokenizer, prompt_token_ids: Sequence[int],
                 stop: tuple[str, ...] = (), include_stop_str_in_output: bool = False,
                 skip_special_tokens: bool = True, prefix_output_ids: Sequence[int] = ()) -> None:
        if any(not s for s in stop):
            raise ValueError("stop strings must be non-empty")
        self._tokenizer = tokenizer
        self._skip_special = skip_special_tokens
        self._stop = tuple(stop)
        self._max_hold = max((len(s) for s in stop), default=1) - 1
        self._include_stop = include_stop_str_in_output

        # ids[prefix_offset:read_offset] decode to text already committed; the window
        # always starts at a character boundary (or in the prompt's context).
        self._ids: list[int] = list(prompt_token_ids[len(prompt_token_ids) - PROMPT_CONTEXT_TOKENS:]
                                    if len(prompt_token_ids) > PROMPT_CONTEXT_TOKENS
                                    else prompt_token_ids)
        self._prefix_offset = 0
        self._read_offset = len(self._ids)
        self._partial = 0  # chars past read_offset's text already committed (before a U+FFFD run)

        self._held = ""                # committed text not yet returned (may begin a stop string)
        self._sent: list[str] = []     # returned text, in order
        self._stopped = False
        if prefix_output_ids:
            self.push(list(prefix_output_ids))  # already delivered by whoever generated them

    @property
    def stopped(self) -> bool:
        return self._stopped

    @property
    def text(self) -> str:
        """All output text returned so far (including prefix_output_ids' share), held text excluded."""
        if len(self._sent) > 1:
            self._sent = ["".join(self._sent)]
        return self._sent[0] if self._sent else ""

    def push(self, token_ids: list[int]) -> DetokenizerStep:
        """Add newly generated tokens; return the text that became final."""
        if self._stopped:
            return DetokenizerStep("", True)
        if not token_ids:
            return DetokenizerStep("", False)
        self._ids.extend(token_ids)
        return self._commit(self._decode_new(final=False), final=False)

    def flush(self) -> str:
        """The request ended for another reason (length, EOS): return everything held back.

        Includes a trailing U+FFFD if the output ends inside a UTF-8 sequence. Stop strings are
        still honoured; `stopped` tells whether one was found in the flushed text.
        """
        if self._stopped:
            return ""
        return self._commit(self._decode_new(final=True), final=True).text

    def _decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=self._skip_special)

    def _decode_new(self, final: bool) -> str:
        """Newly committed text of the window; advances the offsets when it is complete."""
        prefix_text = self._decode(self._ids[self._prefix_offset:self._read_offset])
        full_text = self._decode(self._ids[self._prefix_offset:])
        if len(full_text) <= len(prefix_text) and not final:
            return ""  # nothing visible yet (e.g. skipped special tokens)
        delta = full_text[len(prefix_text):]
        if final or not delta.endswith(REPLACEMENT):
            new = delta[self._partial:]
            self._prefix_offset, self._read_offset = self._read_offset, len(self._ids)
            self._partial = 0
            return new
        # An incomplete UTF-8 sequence at the end: commit what precedes it, keep the window.
        stable = delta.rstrip(REPLACEMENT)
        new = stable[self._partial:]
        self._partial = max(self._partial, len(stable))
        return new

    def _commit(self, new: str, final: bool) -> DetokenizerStep:
        buf = self._held + new
        if new and self._stop:
            cut = self._find_stop(buf)
            if cut is not None:
                self._held = ""
                self._stopped = True
                self._sent.append(buf[:cut])
                return DetokenizerStep(buf[:cut], True)
        keep = 0 if final else self._stop_prefix_len(buf)
        out, self._held = buf[:len(buf) - keep], buf[len(buf) - keep:]
        if out:
            self._sent.append(out)
        return DetokenizerStep(out, False)

    def _find_stop(self, buf: str) -> int | None:
        """Where output ends if a stop string occurs in buf: (end, start) of the earliest end."""
        best: tuple[int, int] | None = None
        for s in self._stop:
            start = buf.find(s)
            if start >= 0 and (best is None or (start + len(s), start) < best):
                best = (start + len(s), start)
        if best is None:
            return None
        return best[0] if self._include_stop else best[1]

    def _stop_prefix_len(self, buf: str) -> int:
        """Length of the longest suffix of buf (<= max_hold) that begins some stop string."""
        for k in range(min(self._max_hold, len(buf)), 0, -1):
            suffix = buf[len(buf) - k:]
            if any(s.startswith(suffix) for s in self._stop):
                return k
        return 0
