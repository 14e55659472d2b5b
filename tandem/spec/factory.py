"""The proposer for a SpeculativeConfig (tandem/config.py): its method from the table
(tandem/spec/registry.py) behind the adaptive draft length and the speculation gate."""

from __future__ import annotations

from tandem.config import SpeculativeConfig
from tandem.spec.adaptive import AdaptiveDraftLength
from tandem.spec.gate import SpeculationGate
from tandem.spec.proposer import AdaptiveProposer
from tandem.spec.registry import builder, proposer_kind
from tandem.spec.target import SpecTarget


def make_proposer(cfg: SpeculativeConfig, target: SpecTarget | None = None) -> AdaptiveProposer:
    """`target`: the engine's model and config; a method with a model needs it (a draft model:
    device, dtype, the tokenizer it must share, the size of its own KV cache; an EAGLE-3 head:
    the target's hidden states, embedding and LM head)."""
    kind = proposer_kind(cfg)
    if cfg.model and target is None:
        what = "with a 'model' " if not kind.needs_model else ""
        raise ValueError(f"speculative method {cfg.method!r} {what}needs the target engine "
                         "(make_proposer(cfg, SpecTarget(...)))")
    method = builder(kind)(cfg, target)
    k = cfg.num_speculative_tokens
    if not cfg.adaptive:
        return AdaptiveProposer(method, k, None)
    lengths = AdaptiveDraftLength(k, cfg.max_draft_tokens_per_step, shorten=kind.shorten)
    return AdaptiveProposer(method, k, lengths, SpeculationGate())
