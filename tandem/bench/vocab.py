"""Which token ids a synthetic prompt may use: the model's ordinary tokens, never special ones.

Read from a Hugging Face model directory (tokenizer.json, config.json) or given as a range.
Special ids (added tokens, BOS/EOS/PAD) are excluded so random prompts never contain an
end-of-turn or a control token.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class TokenSpace:
    low: int                      # first usable id
    high: int                     # one past the last usable id
    excluded: tuple[int, ...] = ()  # special ids inside [low, high)

    def allowed(self) -> np.ndarray:
        """int64 [n]: the usable ids in increasing order."""
        ids = np.arange(self.low, self.high, dtype=np.int64)
        if self.excluded:
            ids = np.setdiff1d(ids, np.asarray(self.excluded, dtype=np.int64), assume_unique=True)
        if ids.size == 0:
            raise ValueError(f"no usable token ids in [{self.low}, {self.high})")
        return ids

    @classmethod
    def parse_range(cls, text: str) -> "TokenSpace":
        """'LO:HI' -> ids LO..HI-1."""
        try:
            lo, hi = (int(x) for x in text.split(":"))
        except ValueError as exc:
            raise ValueError(f"--vocab-range wants LO:HI, got {text!r}") from exc
        if not 0 <= lo < hi:
            raise ValueError(f"--vocab-range wants 0 <= LO < HI, got {text!r}")
        return cls(lo, hi)

    @classmethod
    def from_model_dir(cls, path: str | Path) -> "TokenSpace":
        """Usable ids of the tokenizer in a model directory.

        high = the base vocabulary size of tokenizer.json (capped by config.json's vocab_size,
        whose padding rows are not real tokens); added tokens and BOS/EOS/PAD are excluded.
        """
        path = Path(path)
        special: set[int] = set()
        high = None
        tok_file = path / "tokenizer.json"
        if tok_file.exists():
            tok = json.loads(tok_file.read_text())
            vocab = (tok.get("model") or {}).get("vocab")
            if isinstance(vocab, dict):
                high = len(vocab)
            elif isinstance(vocab, list):
                high = len(vocab)
            for added in tok.get("added_tokens", []):
                special.add(int(added["id"]))
        cfg_file = path / "config.json"
        if cfg_file.exists():
            cfg = json.loads(cfg_file.read_text())
            cfg = cfg.get("text_config", cfg)
            if cfg.get("vocab_size"):
                high = min(high, int(cfg["vocab_size"])) if high else int(cfg["vocab_size"])
            for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
                value = cfg.get(key)
                for v in (value if isinstance(value, list) else [value]):
                    if isinstance(v, int):
                        special.add(v)
        if not high:
            raise ValueError(f"{path}: no tokenizer.json vocabulary nor config.json vocab_size")
        return cls(0, high, tuple(sorted(i for i in special if i < high)))
