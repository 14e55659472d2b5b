"""The model runner: a scheduler step in, sampled tokens (and scored prompt tokens) out (mechanism only).

It owns the model, the KV cache tensor and the sampler; it knows nothing of queues or
policies. Inputs are built on the CPU once per step and moved to the device together.
A sequence with proposed tokens gets a token sampled at each of their positions (the runner
verifies nothing: the engine's update decides how many proposals to accept).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from tandem.grammar.masks import GrammarMasks
from tandem.grammar.masks import apply as apply_masks
from tandem.kv.layout import KVLayout
from tandem.layers.attention_batch import AttentionBatch, SeqSlice
from tandem.models.loader import LoadedModel
from tandem.runner.aux_hidden import AuxHiddenStep, AuxSpan
from tandem.runner.cuda_graphs import DecodeGraphs
from tandem.runner.sampler import Sampler, SamplingRow, distinct_ids, gather_logprobs, make_generator
from tandem.runner.scheduled import SampledSeq, ScheduledSeq, SeqState
from tandem.types import TokenLogprob

# A request's seeded generator is re-derived at every output position, so that seeded
# sampling gives the same tokens whatever worker, topology or batch produces them.
_POSITION_STRIDE = 1_000_003
# Prompt rows scored per pass of the LM head: bounds the [rows, vocab] float32 logits it makes.
_PROMPT_SCORE_ROWS = 128


@dataclass(frozen=True)
class PromptScoring:
    """Rows of this step whose hidden state scores the next prompt token (prompt logprobs)."""

    rows: torch.Tensor                  # LongTensor[P]: flat rows, grouped by request
    targets: torch.Tensor               # LongTensor[P]: the prompt token each row scores
    spans: list[tuple[SeqState, int]]    # (request, its number of rows), in row order


@dataclass(frozen=True)
class StepInputs:
    input_ids: torch.Tensor      # LongTensor[T]
    positions: torch.Tensor      # LongTensor[T]
    batch: AttentionBatch
    logits_rows: torch.Tensor    # LongTensor[S]: flat rows whose hidden state is sampled
    sampled: list[ScheduledSeq]  # sequences that sample, each owning num_verified rows, in row order
    prompt_scoring: PromptScoring | None = None
    spans: tuple[tuple[SeqState, int, int], ...] = ()   # (request, first position, rows), in row order
    slices: tuple[SeqSlice, ...] = ()   # what `batch` was built from (verify rows: one slice each)


@dataclass(frozen=True)
class StepResult:
    sampled: list[SampledSeq]     # in the order of StepInputs.sampled
    prompt_logprobs: list[tuple[SeqState, list[TokenLogprob]]]  # the next scored prompt tokens


class ModelRunner:
    def __init__(self, loaded: LoadedModel, layout: KVLayout, kv_cache: torch.Tensor,
                 device: torch.device) -> None:
        self.loaded = loaded
        self.model = loaded.model
        self.layout = layout
        self.kv_cache = kv_cache  # [num_blocks, num_layers, 2, block_size, kv_heads, head_dim]
        self.device = device
        self.sampler = Sampler()
        # Proposals are verified as single-token decode rows where the prefill path rounds
        # differently enough to flip greedy near-ties (bfloat16, float16: greedy output then equals
        # plain decoding's token for token); in float32 as one prefill chunk, which is faster (CPU,
        # demo target, 1,000-token context: 12 ms for 6 rows as a chunk, 16-17 ms as decode rows,
        # 7-8 ms for one row) and gave the same greedy tokens in every benchmark cell.
        self.verify_as_decode_rows = loaded.dtype != torch.float32
        # a request's distinct prompt ids, for its repetition penalty: built once, dropped with it
        self._prompt_ids: weakref.WeakKeyDictionary[SeqState, torch.Tensor] = weakref.WeakKeyDictionary()
        # decode steps replayed from CUDA graphs (LoadedModel.cuda_graph_sizes); None: all eager
        self.graphs = DecodeGraphs.build(loaded, kv_cache, layout.block_size, device)

    def prepare(self, seqs: Sequence[ScheduledSeq], block_tables: Sequence[list[int]]) -> StepInputs:
        input_ids: list[int] = []
        positions: list[int] = []
        slices: list[SeqSlice] = []
        logits_rows: list[int] = []
        sampled: list[ScheduledSeq] = []
        score_rows: list[int] = []
        score_targets: list[int] = []
        scored_spans: list[tuple[SeqState, int]] = []
        spans: list[tuple[SeqState, int, int]] = []
        for seq, blocks in zip(seqs, block_tables):
            req = seq.request
            start, end = req.num_computed_tokens, req.num_computed_tokens + seq.num_new_tokens
            own_end = end - len(seq.proposed)   # the request's own tokens end here, proposals follow
            if req.scores_prompt:
                # the row at position i scores prompt token i + 1; tokens 1..len(scored) are done
                first, stop = max(start, len(req.prompt_logprobs)), min(end, req.num_prompt_tokens - 1)
                if first < stop:
                    base = len(input_ids) - start
                    score_rows.extend(range(base + first, base + stop))
                    score_targets.extend(req.prompt_token_ids[first + 1:stop + 1])
                    scored_spans.append((req, stop - first))
            input_ids.extend(req.all_token_ids[start:own_end])
            input_ids.extend(seq.proposed)
            positions.extend(range(start, end))
            spans.append((req, start, seq.num_new_tokens))
            if seq.proposed and self.verify_as_decode_rows:
                # verify rows as single-token decode rows, the numerics of plain decoding (every
                # row's K/V is written before any row attends, so row j sees rows < j): a
                # multi-token chunk would take the prefill path, whose rounding differs in bf16
                if own_end - start > 1:
                    slices.append(SeqSlice(blocks, start, own_end - start - 1))
                slices += [SeqSlice(blocks, p, 1) for p in range(max(start, own_end - 1), end)]
            else:
                slices.append(SeqSlice(blocks, start, seq.num_new_tokens))
            if seq.sample:
                logits_rows.extend(range(len(input_ids) - seq.num_verified, len(input_ids)))
                sampled.append(seq)
        dev = self.device
        return StepInputs(
            input_ids=torch.tensor(input_ids, dtype=torch.long).to(dev, non_blocking=True),
            positions=torch.tensor(positions, dtype=torch.long).to(dev, non_blocking=True),
            batch=AttentionBatch.build(slices, self.layout.block_size, dev),
            logits_rows=torch.tensor(logits_rows, dtype=torch.long).to(dev, non_blocking=True),
            sampled=sampled,
            prompt_scoring=PromptScoring(
                rows=torch.tensor(score_rows, dtype=torch.long).to(dev, non_blocking=True),
                targets=torch.tensor(score_targets, dtype=torch.long).to(dev, non_blocking=True),
                spans=scored_spans) if scored_spans else None,
            spans=tuple(spans), slices=tuple(slices))

    @torch.inference_mode()
    def execute(self, inputs: StepInputs,
                grammar_masks: Callable[[], GrammarMasks | None] | None = None) -> StepResult:
        """Forward, then sample every sampled row. `grammar_masks` gives the token bitmasks of
        constrained rows (in the order of inputs.sampled's rows); called after the forward."""
        tap = getattr(self.model, "aux_tap", None)
        size = self.graphs.replay_size(inputs.batch, tap) if self.graphs is not None else None
        if size is not None:
            hidden = self.graphs.run(inputs.input_ids, inputs.positions, inputs.batch, size)  # [T, H]
        elif tap is None:
            hidden = self.model(inputs.input_ids, inputs.positions, inputs.batch, self.kv_cache)  # [T, H]
        else:
            hidden, aux = self.model.forward_aux(inputs.input_ids, inputs.positions, inputs.batch,
                                                 self.kv_cache, tap.layers)  # [T, H], [T, k, H]
            tap.deliver(_aux_step(inputs, aux))
        scored = self._score_prompts(hidden, inputs.prompt_scoring) if inputs.prompt_scoring else []
        if not inputs.sampled:
            return StepResult([], scored)
        logits = self.model.compute_logits(hidden.index_select(0, inputs.logits_rows))  # [S, V]
        if grammar_masks is not None:
            masks = grammar_masks()   # computed on another thread while the forward ran
            if masks is not None:
                apply_masks(logits, masks)
        # row i of a sequence samples as if proposals [:i] were its output already
        rows = [self._sampling_row(seq.request, seq.proposed[:i])
                for seq in inputs.sampled for i in range(seq.num_verified)]
        out = self.sampler.sample(logits, rows)
        result, at = [], 0
        for seq in inputs.sampled:
            n = seq.num_verified
            result.append(SampledSeq(seq.request, seq.proposed, out.token_ids[at:at + n],
                                     out.logprobs[at:at + n]))
            at += n
        return StepResult(result, scored)

    def close(self) -> None:
        """Release what the runner started (nothing here; a parallel runner stops its ranks)."""

    def _score_prompts(self, hidden: torch.Tensor, scoring: PromptScoring
                       ) -> list[tuple[SeqState, list[TokenLogprob]]]:
        """Raw logprobs of the scored prompt tokens, with each request's top k."""
        counts = [req.sampling.prompt_logprobs for req, n in scoring.spans for _ in range(n)]
        entries: list[TokenLogprob] = []
        for lo in range(0, len(counts), _PROMPT_SCORE_ROWS):
            hi = min(lo + _PROMPT_SCORE_ROWS, len(counts))
            logits = self.model.compute_logits(hidden.index_select(0, scoring.rows[lo:hi]))
            entries += gather_logprobs(torch.log_softmax(logits.float(), dim=-1),
                                       scoring.targets[lo:hi], counts[lo:hi], with_rank=True)
        out, at = [], 0
        for req, n in scoring.spans:
            out.append((req, entries[at:at + n]))
            at += n
        return out

    def _sampling_row(self, req: SeqState, proposed: tuple[int, ...] = ()) -> SamplingRow:
        params = req.sampling
        output = req.output_token_ids + list(proposed) if proposed else req.output_token_ids
        generator = None
        if params.seed is not None and not params.greedy:
            seed = (params.seed * _POSITION_STRIDE + len(output)) % (2**63)
            generator = make_generator(seed, self.device)
        prompt_ids = None
        if params.repetition_penalty != 1.0:
            prompt_ids = self._prompt_ids.get(req)
            if prompt_ids is None:
                prompt_ids = self._prompt_ids[req] = distinct_ids(req.prompt_token_ids, self.device)
        return SamplingRow(params=params, output_token_ids=output,
                           prompt_token_ids=req.prompt_token_ids, prompt_ids=prompt_ids,
                           generator=generator, eos_token_ids=self.loaded.eos_token_ids)


def _aux_step(inputs: StepInputs, aux: torch.Tensor) -> AuxHiddenStep:
    spans, at = [], 0
    for req, first, n in inputs.spans:
        spans.append(AuxSpan(req, first, n, at))
        at += n
    return AuxHiddenStep(spans, aux)
