"""What a proposer may need to know of the target it drafts for (a draft model: the device, the
dtype, the tokenizer to check, how many tokens the target's KV cache holds)."""

from __future__ import annotations

from dataclasses import dataclass

from tandem.config import EngineConfig
from tandem.models.kv_layout import layout_of
from tandem.models.loader import LoadedModel
from tandem.runner.kv_budget import KVBudget
from tandem.tokenization.tokenizer import Tokenizer


@dataclass(frozen=True)
class SpecTarget:
    config: EngineConfig
    loaded: LoadedModel
    tokenizer: Tokenizer

    @property
    def kv_tokens(self) -> int:
        """Tokens the target's KV cache holds: running requests never hold more."""
        budget = KVBudget(self.config, self.loaded.model, self.loaded.arch.vocab_size, self.loaded.max_model_len)
        return budget.num_blocks(layout_of(self.loaded, self.config.cache)) * self.config.cache.block_size

    @classmethod
    def of_engine(cls, engine) -> "SpecTarget":
        return cls(engine.config, engine.loaded, engine.tokenizer)
