"""tandem's decode steps and prefill chunks on a model built with random weights at a config's
shapes (no checkpoint on disk), in three variants:
- eager: the default kernels (torch SDPA on a GPU, the loop over experts);
- triton: --attention triton and --moe-kernel triton;
- triton+graphs: those, with the decode step replayed from a CUDA graph (tandem/runner/cuda_graphs.py).
A step is the forward, the LM head and an argmax; its inputs (block tables, ids) are built before.
"""

from __future__ import annotations

import torch
from torch import nn

from benchmarks.gpu.timing import median_seconds
from tandem.kv.layout import KVLayout
from tandem.layers.attention_batch import AttentionBatch, SeqSlice
from tandem.layers.moe import SparseMoE
from tandem.layers.norm import RMSNorm
from tandem.models.arch import ModelArch
from tandem.models.attention_choice import attention_workspace
from tandem.models.llama import DecoderForCausalLM
from tandem.models.registry import model_class
from tandem.models.triton_choice import moe_kernel, triton_unusable
from tandem.runner.cuda_graphs import DecodeGraphs
from tandem.runner.graph_policy import unusable_reason

VARIANTS = ("eager", "triton", "triton+graphs")
BLOCK_SIZE = 16


def build_model(cfg: dict, dtype: torch.dtype, device: torch.device) -> tuple[DecoderForCausalLM, ModelArch]:
    """The model of `cfg` with random weights (norms 1, experts' correction bias 0), on `device`."""
    arch = ModelArch.from_config(cfg)
    with torch.device("meta"):
        model = model_class(arch.architecture)(arch, device=device)
    for name, p in list(model.named_parameters()):
        owner, _, attr = name.rpartition(".")
        module = model.get_submodule(owner)
        keep32 = name.endswith(model.float32_params)
        t = torch.empty(p.shape, dtype=torch.float32 if keep32 else dtype, device=device)
        if isinstance(module, RMSNorm):
            t.fill_(1.0)
        elif keep32:
            t.zero_()
        else:
            t.normal_(0.0, 0.02)
        setattr(module, attr, nn.Parameter(t, requires_grad=False))
    model.eval()
    return model, arch


class Variants:
    """Switches one built model between the variants; the MoE weights are stacked once."""

    def __init__(self, model: DecoderForCausalLM, arch: ModelArch, dtype: torch.dtype, device: torch.device):
        self.model, self.dtype, self.device = model, dtype, device
        self.triton_reason = triton_unusable(dtype, device)
        if self.triton_reason is None and arch.moe is not None:
            model.use_moe_kernel(moe_kernel("triton", dtype, device))
        self.moe = {m: m.kernel for m in model.modules() if isinstance(m, SparseMoE)}

    def apply(self, variant: str) -> str | None:
        """Set `variant` up; the reason it cannot run here, or None."""
        if variant != "eager" and self.triton_reason is not None:
            return self.triton_reason
        if variant == "triton+graphs":
            reason = unusable_reason(self.device, 1, True, True)
            if reason is not None:
                return reason
        triton = variant != "eager"
        self.model.workspace = attention_workspace("triton" if triton else "auto", self.dtype, self.device)
        for m, kernel in self.moe.items():
            m.kernel = kernel if triton else None
        return None


def kv_cache(arch: ModelArch, dtype: torch.dtype, device: torch.device, num_blocks: int) -> torch.Tensor:
    layout = KVLayout(model="gpu-bench", dtype=str(dtype).removeprefix("torch."), block_size=BLOCK_SIZE,
                      num_layers=arch.num_layers, num_kv_heads=arch.kv_heads_cached,
                      head_dim=arch.kv_dim_cached, kind=arch.kv_kind)
    return layout.allocate(num_blocks, device)   # [num_blocks, L, parts, BLOCK_SIZE, KVH, D]


def _slices(kv: torch.Tensor, lengths: list[int], num_computed: list[int]) -> list[SeqSlice] | None:
    # each sequence's blocks, scattered over the cache; None when the cache is too small
    nbs = [-(-n // BLOCK_SIZE) for n in lengths]
    if sum(nbs) > kv.shape[0]:
        return None
    perm = torch.randperm(kv.shape[0])[:sum(nbs)].tolist()
    out, at = [], 0
    for nb, n, done in zip(nbs, lengths, num_computed):
        out.append(SeqSlice(perm[at:at + nb], done, n - done))
        at += nb
    return out


def decode_seconds(model: DecoderForCausalLM, kv: torch.Tensor, batch: int, context: int, graphs: bool,
                   reps: int, warmup: int) -> float | None:
    """One decode step of `batch` sequences over `context` cached tokens; None: the cache is too small."""
    device = kv.device
    slices = _slices(kv, [context + 1] * batch, [context] * batch)
    if slices is None:
        return None
    step_batch = AttentionBatch.build(slices, BLOCK_SIZE, device)
    ids = torch.randint(model.arch.vocab_size, (batch,), device=device)
    pos = torch.full((batch,), context, dtype=torch.long, device=device)
    if graphs:
        g = DecodeGraphs(model, kv, (batch,), BLOCK_SIZE, context + 1, device)
        g.capture()
        if not g.sizes:
            raise RuntimeError(f"the CUDA graph of batch {batch} did not capture (see the warning)")
        return median_seconds(lambda: model.compute_logits(g.run(ids, pos, step_batch, batch)).argmax(-1),
                              device, reps, warmup)
    return median_seconds(lambda: model.compute_logits(model(ids, pos, step_batch, kv)).argmax(-1), device, reps,
                          warmup)


def prefill_seconds(model: DecoderForCausalLM, kv: torch.Tensor, chunk: int, reps: int,
                    warmup: int) -> float | None:
    """A prefill chunk of `chunk` tokens from an empty context, the last row's logits sampled."""
    device = kv.device
    slices = _slices(kv, [chunk], [0])
    if slices is None:
        return None
    step_batch = AttentionBatch.build(slices, BLOCK_SIZE, device)
    ids = torch.randint(model.arch.vocab_size, (chunk,), device=device)
    pos = torch.arange(chunk, device=device)
    return median_seconds(lambda: model.compute_logits(model(ids, pos, step_batch, kv)[-1:]).argmax(-1),
                          device, reps, warmup)
