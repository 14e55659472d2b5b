"""Draft-model proposals: a small model with the target's tokenizer guesses the next tokens
greedily; the target verifies them in one step.

The draft runs with tandem's own model code (load_model, forward over an AttentionBatch) on the
target's device, with its own paged KV cache: its own cache tensor and BlockPool
(tandem/spec/draft_cache.py), sized for every token the target's cache can hold plus a draft's
slack per running request, so it never competes with the target for blocks. The draft's KV is
private to the proposer, with a prefix cache of its own (full blocks by chained hash and cache
salt), so prompts sharing a prefix (an agent's system prompt and tools) are caught up once.

One call for the requests that want drafts (limits k_i > 0):
1. catch-up, one batched forward: each request's tokens whose K/V the draft lacks (the target's
   accepted tokens and next token since the last call: one or two tokens in steady state; for a
   new request its context past the leading blocks the draft's prefix cache holds, at most
   `catchup_tokens_per_step` over the call, the rest at the next calls, without drafts until
   caught up); its last row gives the first draft token;
2. k_max - 1 greedy decode steps batched over the requests still drafting (a request stops at
   its limit, or after an end-of-sequence token).
A request the draft cannot serve gets no draft (its context is past the draft's length, or the
draft's cache is full), never an error. `finished` returns its blocks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from tandem.config import SpeculativeConfig
from tandem.errors import ModelLoadError
from tandem.kv.layout import KVLayout
from tandem.layers.attention_batch import AttentionBatch, SeqSlice
from tandem.models.loader import load_model
from tandem.spec.draft_cache import DraftCache, DraftSeq
from tandem.spec.target import SpecTarget
from tandem.tokenization.tokenizer import Tokenizer


# A catch-up of at most this many tokens runs as single-token decode rows (all rows write their
# K/V before any row attends, so row j sees rows < j), batched with every other request's, rather
# than as a prefill chunk of its own (one attention call per request and layer).
_AS_DECODE_ROWS = 8


@dataclass(frozen=True)
class DraftModelConfig:
    # draft prefill tokens per call, all requests together: bounds the stall of one step (and the
    # cost of a step the speculation gate probes while the draft has fallen behind); a smaller
    # bound delays a new request's first draft (512 cost a third of the batch-1 gain on the
    # demo's ~800-token tool-call prompts)
    catchup_tokens_per_step: int = 2048


def check_same_tokenizer(draft: Tokenizer, target: Tokenizer, draft_path: str) -> None:
    """Raise ModelLoadError unless both tokenizers map the same tokens to the same ids."""
    mine, theirs = draft.backend.get_vocab(), target.backend.get_vocab()
    if mine == theirs:
        return
    differ = sorted(t for t in mine.keys() | theirs.keys() if mine.get(t) != theirs.get(t))
    example = differ[0]
    raise ModelLoadError(
        f"the draft model {draft_path} does not share the target's tokenizer: {len(differ)} tokens "
        f"differ (e.g. {example!r} is {theirs.get(example)} for the target and {mine.get(example)} "
        f"for the draft; vocabularies of {len(theirs)} and {len(mine)} tokens); a draft model must "
        "use the target's tokenizer")


class DraftModelProposer:
    def __init__(self, k: int, draft_path: str, target: SpecTarget,
                 cfg: DraftModelConfig = DraftModelConfig()) -> None:
        self.k = k
        self.cfg = cfg
        model_cfg = dataclasses.replace(target.config.model, path=draft_path, served_name=None,
                                        max_model_len=None, show_progress=False)
        tokenizer = Tokenizer.from_dir(draft_path)
        check_same_tokenizer(tokenizer, target.tokenizer, draft_path)
        self.loaded = load_model(model_cfg)
        self.device = torch.device(model_cfg.device)
        self.vocab = min(self.loaded.arch.vocab_size, target.loaded.arch.vocab_size)
        self.eos = frozenset(target.loaded.eos_token_ids)
        self.max_len = self.loaded.max_model_len
        a = self.loaded.arch
        block_size = target.config.cache.block_size
        self.layout = KVLayout(model=f"draft/{a.architecture}/L{a.num_layers}/H{a.hidden_size}",
                               dtype=str(self.loaded.dtype).removeprefix("torch."),
                               block_size=block_size, num_layers=a.num_layers,
                               num_kv_heads=a.num_kv_heads, head_dim=a.head_dim)
        per_request = -(-(k + 1) // block_size) + 1   # a draft's positions past the request's end
        num_blocks = -(-target.kv_tokens // block_size) + target.config.scheduler.max_num_seqs * per_request
        self.kv_cache = self.layout.allocate(num_blocks, self.device)  # [blocks, L, 2, bs, kv_heads, head_dim]
        self.cache = DraftCache(num_blocks, block_size)

    # --- the Proposer's side ---------------------------------------------------------------
    def propose(self, requests: Sequence, limits: Sequence[int] | None = None) -> list[list[int]]:
        limits = [self.k] * len(requests) if limits is None else [min(self.k, k) for k in limits]
        drafts: list[list[int]] = [[] for _ in requests]
        budget = self.cfg.catchup_tokens_per_step
        catchup: list[tuple[DraftSeq, list[int], int]] = []   # (seq, new tokens, first position)
        catchup_requests: list = []                           # the request of each catchup entry
        drafting: list[tuple[int, DraftSeq, int]] = []       # (index, seq, its last position)
        for i, (req, k) in enumerate(zip(requests, limits)):
            tokens = req.all_token_ids
            n = len(tokens)
            if k <= 0 or budget <= 0 or n + k > self.max_len:
                continue
            seq = self.cache.seq(req)
            self.cache.adopt(seq, tokens, req.cache_keys)   # a new request: its cached leading blocks
            valid = min(seq.valid(tokens), n - 1)   # the last token always goes through: its row drafts
            todo = tokens[valid:valid + budget]
            caught_up = valid + len(todo) == n
            if not self.cache.reserve(seq, n + k - 1 if caught_up else valid + len(todo)):
                continue
            budget -= len(todo)
            catchup.append((seq, todo, valid))
            catchup_requests.append(req)
            seq.computed, seq.base, seq.fed = valid + len(todo), n, []
            if caught_up:
                drafting.append((i, seq, n - 1))
        if not catchup:
            return drafts
        rows = self._forward(catchup, [seq for _, seq, _ in drafting])
        for (seq, _, _), req in zip(catchup, catchup_requests):   # its own full blocks, now
            self.cache.publish(seq, req.all_token_ids, req.cache_keys)   # computed, serve later requests
        live = []
        for (i, seq, _), token in zip(drafting, rows):
            drafts[i].append(token)
            if len(drafts[i]) < limits[i] and token not in self.eos:
                live.append(i)
        seqs = {i: seq for i, seq, _ in drafting}
        while live:
            step = [(seqs[i], [drafts[i][-1]], seqs[i].computed) for i in live]
            tokens = self._forward(step, [seqs[i] for i in live])
            nxt = []
            for i, token in zip(live, tokens):
                seq = seqs[i]
                seq.fed.append(drafts[i][-1])
                seq.computed += 1
                drafts[i].append(token)
                if len(drafts[i]) < limits[i] and token not in self.eos:
                    nxt.append(i)
            live = nxt
        return drafts

    def observe(self, request, num_proposed: int, num_accepted: int) -> None:
        pass   # the next call compares the request's tokens with what the draft fed itself

    def finished(self, request) -> None:
        self.cache.free(request)

    # --- the forward -----------------------------------------------------------------------------
    @torch.inference_mode()
    def _forward(self, items: list[tuple[DraftSeq, list[int], int]], sampled: list[DraftSeq]) -> list[int]:
        """One batched forward of `items` (seq, its new tokens, the position of the first); the
        greedy next token after the last new token of each seq in `sampled`, in that order."""
        input_ids: list[int] = []
        positions: list[int] = []
        slices: list[SeqSlice] = []
        last_row: dict[int, int] = {}
        for seq, new, start in items:
            input_ids += new
            positions += range(start, start + len(new))
            if len(new) <= _AS_DECODE_ROWS:   # batched with the other decodes, not a chunk of its own
                slices += [SeqSlice(seq.block_ids, start + j, 1) for j in range(len(new))]
            else:
                slices.append(SeqSlice(seq.block_ids, start, len(new)))
            last_row[id(seq)] = len(input_ids) - 1
        dev = self.device
        batch = AttentionBatch.build(slices, self.layout.block_size, dev)
        hidden = self.loaded.model(torch.tensor(input_ids, dtype=torch.long).to(dev),
                                   torch.tensor(positions, dtype=torch.long).to(dev),
                                   batch, self.kv_cache)                                  # [T, H]
        if not sampled:
            return []
        rows = torch.tensor([last_row[id(seq)] for seq in sampled], dtype=torch.long).to(dev)
        logits = self.loaded.model.compute_logits(hidden.index_select(0, rows))           # [S, V]
        return logits[:, :self.vocab].argmax(dim=-1).tolist()


def build(cfg: SpeculativeConfig, target: SpecTarget | None) -> DraftModelProposer:
    """{"method": "draft_model", "model": DIR} (tandem/spec/registry.py; make_proposer passes the target)."""
    assert target is not None and cfg.model
    return DraftModelProposer(cfg.num_speculative_tokens, cfg.model, target)
