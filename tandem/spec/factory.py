"""The proposer for a SpeculativeConfig (tandem/config.py)."""

from __future__ import annotations

from tandem.config import SpeculativeConfig
from tandem.spec.adaptive import AdaptiveDraftLength
from tandem.spec.gate import SpeculationGate
from tandem.spec.proposer import AdaptiveProposer
from tandem.spec.target import SpecTarget

# the most greedy steps of a draft model behind suffix decoding (each one a forward of the draft)
_FALLBACK_DRAFT_K = 6


def make_proposer(cfg: SpeculativeConfig, target: SpecTarget | None = None) -> AdaptiveProposer:
    """`target`: the engine's model and config; a draft model needs it (device, dtype, the
    tokenizer it must share, the size of its own KV cache), and so does an EAGLE-3 head (the
    target's hidden states, embedding and LM head)."""
    k = cfg.num_speculative_tokens
    if cfg.method == "ngram":
        from tandem.spec.ngram import NgramProposer

        method = NgramProposer(k, cfg.prompt_lookup_min, cfg.prompt_lookup_max)
    elif cfg.method == "suffix":
        from tandem.spec.suffix import SuffixProposer

        method = SuffixProposer(k)
        if cfg.model:   # a draft model behind the suffix tree: its greedy steps are the costly part
            from tandem.spec.draft_model import DraftModelProposer
            from tandem.spec.suffix_draft import SuffixWithDraftModel

            if target is None:
                raise ValueError("speculative method 'suffix' with a 'model' needs the target engine "
                                 "(make_proposer(cfg, SpecTarget(...)))")
            method = SuffixWithDraftModel(method, DraftModelProposer(min(k, _FALLBACK_DRAFT_K), cfg.model, target))
    elif cfg.method == "draft_model":
        if target is None:
            raise ValueError("speculative method 'draft_model' needs the target engine "
                             "(make_proposer(cfg, SpecTarget(...)))")
        from tandem.spec.draft_model import DraftModelProposer

        method = DraftModelProposer(k, cfg.model, target)
    elif cfg.method == "eagle3":
        if target is None:
            raise ValueError("speculative method 'eagle3' needs the target engine "
                             "(make_proposer(cfg, SpecTarget(...)))")
        from tandem.spec.eagle3 import Eagle3Proposer

        method = Eagle3Proposer(k, cfg.model, target)   # installs its hidden-state tap on the target
    else:
        raise ValueError(f"speculative method {cfg.method!r} is not available in this build; "
                         "use 'ngram', 'suffix', 'draft_model' or 'eagle3'")
    if not cfg.adaptive:
        return AdaptiveProposer(method, k, None)
    # suffix drafts are sized by their own probability estimates: acceptance only switches them off
    lengths = AdaptiveDraftLength(k, cfg.max_draft_tokens_per_step, shorten=cfg.method != "suffix")
    return AdaptiveProposer(method, k, lengths, SpeculationGate())
