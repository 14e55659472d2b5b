"""Decode steps replayed from CUDA graphs, one graph per captured batch size (mechanism; which
sizes, which bucket, and whether graphs can run at all: tandem/runner/graph_policy.py).

Static buffers, shared by every size (a graph of size S reads their first S rows): input ids,
positions, slot blocks and offsets, context lengths [S_max]; the block table [S_max, max_blocks].
A step copies its tensors in, pads to S, replays, and reads the first B rows of that graph's
output (valid until the next replay).
Invariants:
- padding rows repeat row 0: its token, position, blocks, context and slot. They write the very
  K/V row 0 writes (every op of the forward computes a row from that row alone, so the bytes
  are equal), and their outputs are dropped;
- graphs are captured before the engine's first step: the capture's own writes land in block 0,
  which holds nothing yet.
"""

from __future__ import annotations

import logging

import torch

from tandem.layers.attention_batch import AttentionBatch, DecodeGroup
from tandem.layers.moe import SparseMoE
from tandem.models.loader import LoadedModel
from tandem.runner.graph_policy import bucket, unusable_reason

log = logging.getLogger(__name__)


class DecodeGraphs:
    def __init__(self, model: torch.nn.Module, kv_cache: torch.Tensor, sizes: tuple[int, ...],
                 block_size: int, max_model_len: int, device: torch.device) -> None:
        self.model = model
        self.kv_cache = kv_cache
        self.sizes = tuple(sorted(sizes))
        self.block_size = block_size
        self.max_ctx = max_model_len
        self.device = device
        n, max_blocks = self.sizes[-1], -(-max_model_len // block_size)
        self.input_ids = torch.zeros(n, dtype=torch.long, device=device)        # [S_max]
        self.positions = torch.zeros(n, dtype=torch.long, device=device)
        self.slot_blocks = torch.zeros(n, dtype=torch.long, device=device)
        self.slot_offsets = torch.zeros(n, dtype=torch.long, device=device)
        self.context_lens = torch.ones(n, dtype=torch.long, device=device)
        self.block_table = torch.zeros(n, max_blocks, dtype=torch.long, device=device)  # [S_max, max_blocks]
        self.rows = torch.arange(n, device=device)
        self._graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self._outputs: dict[int, torch.Tensor] = {}   # size -> hidden [size, hidden]

    @classmethod
    def build(cls, loaded: LoadedModel, kv_cache: torch.Tensor, block_size: int,
              device: torch.device) -> "DecodeGraphs | None":
        """The captured graphs of `loaded.cuda_graph_sizes`, or None (none asked for, or one
        warning naming why they cannot run: the model then decodes eagerly)."""
        if not loaded.cuda_graph_sizes:
            return None
        reason = unusable_reason(device, loaded.num_ranks, _attention_graph_safe(loaded),
                                 _moe_graph_safe(loaded.model))
        if reason is not None:
            log.warning("CUDA graphs off, decoding eagerly: %s", reason)
            return None
        graphs = cls(loaded.model, kv_cache, loaded.cuda_graph_sizes, block_size, loaded.max_model_len,
                     device)
        graphs.capture()
        return graphs if graphs.sizes else None

    def capture(self) -> None:
        """Capture every size, largest first (the smaller graphs reuse its memory pool). A size
        that fails to capture is dropped; its batches run eagerly (one warning for all)."""
        failed, pool = [], None
        for size in reversed(self.sizes):
            try:
                pool = self._capture(size, pool)
            except Exception as e:  # noqa: BLE001 - any capture failure falls back to eager decoding
                failed.append(f"{size} ({type(e).__name__}: {e})")
        self.sizes = tuple(sorted(self._graphs))
        if failed:
            log.warning("CUDA graphs: batch sizes %s not captured; those batches decode eagerly", "; ".join(failed))
        if self.sizes:
            log.info("CUDA graphs captured for decode batch sizes %s", ", ".join(map(str, self.sizes)))

    def replay_size(self, batch: AttentionBatch, aux_tap: object | None) -> int | None:
        """The captured size a step replays: pure decode, no hidden states tapped, at most the
        largest size; None: run it eagerly."""
        if batch.prefills or aux_tap is not None:
            return None
        return bucket(self.sizes, batch.num_tokens)

    def run(self, input_ids: torch.Tensor, positions: torch.Tensor, batch: AttentionBatch,
            size: int) -> torch.Tensor:
        """input_ids, positions LongTensor[B] (a pure decode step) -> hidden [B, hidden]."""
        B = batch.num_tokens
        self.input_ids[:B].copy_(input_ids)
        self.positions[:B].copy_(positions)
        self.slot_blocks[:B].copy_(batch.slot_block_ids)
        self.slot_offsets[:B].copy_(batch.slot_offsets)
        for g in batch.decodes:   # groups by context length: rows of the flat input in any order
            self.block_table[:, :g.block_table.shape[1]].index_copy_(0, g.token_index, g.block_table)
            self.context_lens.index_copy_(0, g.token_index, g.context_lens)
        if size > B:
            for buf in (self.input_ids, self.positions, self.slot_blocks, self.slot_offsets,
                        self.context_lens, self.block_table):
                buf[B:size] = buf[0]
        self._graphs[size].replay()
        return self._outputs[size][:B]

    def _batch(self, size: int) -> AttentionBatch:
        # the step a graph of `size` rows computes: one decode group over the static buffers
        group = DecodeGroup(token_range=(0, size), token_index=self.rows[:size],
                            block_table=self.block_table[:size], context_lens=self.context_lens[:size],
                            max_ctx=self.max_ctx)
        return AttentionBatch(num_tokens=size, block_size=self.block_size, slot_block_ids=self.slot_blocks[:size],
                              slot_offsets=self.slot_offsets[:size], decodes=(group,), prefills=())

    def _capture(self, size: int, pool):
        ids, pos, batch = self.input_ids[:size], self.positions[:size], self._batch(size)
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(2):   # compiles the Triton kernels, settles the allocator: outside the capture
                self.model(ids, pos, batch, self.kv_cache)
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            out = self.model(ids, pos, batch, self.kv_cache)
        self._graphs[size], self._outputs[size] = graph, out
        return graph.pool()


def _attention_graph_safe(loaded: LoadedModel) -> bool:
    ws = loaded.model.workspace
    kernel = ws.mla_kernel if loaded.arch.mla is not None else ws.decode_kernel
    return kernel is not None and kernel.graph_safe


def _moe_graph_safe(model: torch.nn.Module) -> bool:
    return all(m.kernel is not None and m.kernel.graph_safe for m in model.modules() if isinstance(m, SparseMoE))
