"""One pipeline stage's forward: embeddings on the first stage, the stage's layers, hidden
states handed to the next stage; the first rank, which samples, gets the last stage's output.

Micro-batches: with several pipeline stages, a step's sequences are split into up to
`micro_batches` groups of consecutive sequences (about equal token counts; a sequence is never
split), so that stage s works on group k while stage s+1 works on group k-1. Every rank splits
the same way, from the step's slices (`plan_step`, called before each forward by the runner on
rank 0 and by the worker loop elsewhere). Sends are asynchronous; each stage's receives follow
the groups' order, so the outputs come back in row order.

Wire format between stages: one tensor [2, n, hidden] = (layer output, residual stream) per
group, the pair DecoderLayer passes on; the receiver knows n from the step's slices.
With one stage this is exactly DecoderForCausalLM.forward.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch import nn

from tandem.layers.attention_batch import AttentionBatch, SeqSlice
from tandem.models.llama import DecoderForCausalLM
from tandem.parallel.group import RankGroup


def split_micro_batches(slices: Sequence[SeqSlice], count: int) -> list[tuple[int, int]]:
    """[(first slice, end slice)] of up to `count` groups of consecutive sequences, each group
    closing once it reaches its share of the step's tokens."""
    total = sum(s.num_new for s in slices)
    groups, start, tokens = [], 0, 0
    for i, s in enumerate(slices):
        tokens += s.num_new
        if len(groups) < count - 1 and tokens * count >= total * (len(groups) + 1) and i + 1 < len(slices):
            groups.append((start, i + 1))
            start = i + 1
    groups.append((start, len(slices)))
    return groups


class PipelineStage(nn.Module):
    def __init__(self, model: DecoderForCausalLM, group: RankGroup) -> None:
        super().__init__()
        self.inner = model
        self.g = group
        self._slices: list[SeqSlice] | None = None
        self._block_size = 0
        # sends of this forward still in flight, with their tensors (alive until sent)
        self._pending_sends: list[tuple[dist.Work, torch.Tensor]] = []

    @property
    def arch(self):
        return self.inner.arch

    def plan_step(self, slices: list[SeqSlice], block_size: int) -> None:
        """The next forward's sequences (every rank gets the same), for its micro-batches."""
        self._slices, self._block_size = slices, block_size

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, batch: AttentionBatch,
                kv_cache: torch.Tensor) -> torch.Tensor | None:
        # -> hidden [T, hidden] after the final norm on rank 0; None on the other ranks
        slices, self._slices = self._slices, None
        if self.g.pp_size == 1 or slices is None:
            parts = [(0, input_ids.shape[0], batch)]
        else:
            parts, row = [], 0
            for a, b in split_micro_batches(slices, self.g.cfg.pipeline_micro_batches):
                n = sum(s.num_new for s in slices[a:b])
                parts.append((row, row + n, AttentionBatch.build(slices[a:b], self._block_size, input_ids.device)))
                row += n
        outs = [self._stage(input_ids[s:e], positions[s:e], mb, kv_cache) for s, e, mb in parts]
        for work, _ in self._pending_sends:
            work.wait()
        self._pending_sends = []
        if self.g.rank != 0:
            return None
        m = self.inner
        if self.g.pp_size > 1:        # rank 0 gets each group's last-stage output, in order
            outs = []
            for s, e, _ in parts:
                buf = torch.empty(2, e - s, m.arch.hidden_size, dtype=self._dtype, device=input_ids.device)
                self.g.recv(buf, src=self.g.stage_rank(self.g.pp_size - 1) - self.g.tp_rank)
                outs.append((buf[0], buf[1]))
        x = torch.cat([o[0] for o in outs]) if len(outs) > 1 else outs[0][0]
        residual = torch.cat([o[1] for o in outs]) if len(outs) > 1 else outs[0][1]
        return m.model.norm.add_forward(x, residual)[0]

    @property
    def _dtype(self) -> torch.dtype:
        return self.inner.model.layers[0].input_layernorm.weight.dtype   # every rank holds layers

    def _stage(self, input_ids: torch.Tensor, positions: torch.Tensor, batch: AttentionBatch,
               kv_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        # this stage's layers on one group: (x, residual) [n, hidden] each
        m, g = self.inner, self.g
        n = input_ids.shape[0]
        if g.stage == 0:
            x, residual = m.model.embed_tokens(input_ids), None
        else:
            buf = torch.empty(2, n, m.arch.hidden_size, dtype=self._dtype, device=input_ids.device)
            g.recv(buf, src=g.stage_rank(g.stage - 1))
            x, residual = buf[0], buf[1]
        cos, sin = m.rotary.cos_sin(positions, self._dtype)
        for layer in m.model.layers:
            x, residual = layer(x, residual, cos, sin, batch, kv_cache, m.workspace)
        last = g.stage == g.pp_size - 1
        if not last:
            dst = g.stage_rank(g.stage + 1)
        elif g.stage > 0 and g.tp_rank == 0:
            dst = 0
        else:
            return x, residual
        out = torch.stack((x, residual)).contiguous()
        self._pending_sends.append(g.isend(out, dst))
        return x, residual

    @torch.inference_mode()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.inner.compute_logits(hidden)
