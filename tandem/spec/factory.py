"""The proposer for a SpeculativeConfig (tandem/config.py)."""

from __future__ import annotations

from tandem.config import SpeculativeConfig
from tandem.spec.adaptive import AdaptiveDraftLength
from tandem.spec.ngram import NgramProposer
from tandem.spec.proposer import AdaptiveProposer


def make_proposer(cfg: SpeculativeConfig) -> AdaptiveProposer:
    k = cfg.num_speculative_tokens
    if cfg.method == "ngram":
        method = NgramProposer(k, cfg.prompt_lookup_min, cfg.prompt_lookup_max)
    else:
        raise ValueError(f"speculative method {cfg.method!r} is not available in this build; "
                         "use 'ngram'")
    lengths = AdaptiveDraftLength(k, cfg.max_draft_tokens_per_step) if cfg.adaptive else None
    return AdaptiveProposer(method, lengths)
