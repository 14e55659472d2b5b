"""One pipeline stage's forward: embeddings on the first stage, the stage's layers, hidden
states handed to the next stage; the first rank, which samples, gets the last stage's output.

Wire format between stages: one tensor [2, T, hidden] = (layer output, residual stream), the
pair DecoderLayer passes on; the receiver knows T from the step's inputs. With one stage this is
exactly DecoderForCausalLM.forward.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from tandem.layers.attention_batch import AttentionBatch
from tandem.models.llama import DecoderForCausalLM
from tandem.parallel.group import RankGroup


class PipelineStage(nn.Module):
    def __init__(self, model: DecoderForCausalLM, group: RankGroup) -> None:
        super().__init__()
        self.inner = model
        self.g = group

    @property
    def arch(self):
        return self.inner.arch

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, batch: AttentionBatch,
                kv_cache: torch.Tensor) -> torch.Tensor | None:
        # -> hidden [T, hidden] after the final norm on rank 0; None on the other ranks
        m, g = self.inner, self.g
        T, h = input_ids.shape[0], m.arch.hidden_size
        dtype = m.model.embed_tokens.weight.dtype
        if g.stage == 0:
            x, residual = m.model.embed_tokens(input_ids), None
        else:
            buf = torch.empty(2, T, h, dtype=dtype, device=input_ids.device)
            dist.recv(buf, src=g.stage_rank(g.stage - 1))
            x, residual = buf[0], buf[1]
        cos, sin = m.rotary.cos_sin(positions, dtype)
        for layer in m.model.layers:
            x, residual = layer(x, residual, cos, sin, batch, kv_cache, m.workspace)
        last = g.stage == g.pp_size - 1
        if not last:
            dist.send(torch.stack((x, residual)).contiguous(), dst=g.stage_rank(g.stage + 1))
        elif g.stage > 0 and g.tp_rank == 0:
            dist.send(torch.stack((x, residual)).contiguous(), dst=0)
        if g.rank != 0:
            return None
        if not last:                      # rank 0 waits for the last stage's output
            buf = torch.empty(2, T, h, dtype=dtype, device=input_ids.device)
            dist.recv(buf, src=g.stage_rank(g.pp_size - 1) - g.tp_rank)
            x, residual = buf[0], buf[1]
        return m.model.norm.add_forward(x, residual)[0]

    @torch.inference_mode()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.inner.compute_logits(hidden)
