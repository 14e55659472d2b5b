"""Reshape a model built on the meta device into one rank's part, and say what it loads.

Per decoder layer of the rank's pipeline stage (other layers are dropped; attention layer
indices become the stage's local ones, as its KV cache holds only its layers):
- attention (dense): q/k/v column-parallel by heads, o_proj row-parallel (heads per rank =
  heads / TP; KV heads must divide too);
- attention (MLA): the query's up-projection (q_b_proj or q_proj) and kv_b_proj column-parallel
  by heads, o_proj row-parallel; the latent projections are replicated (every rank caches the
  same latent);
- dense MLP: gate/up column-parallel, down row-parallel;
- MoE: TP slices every expert's intermediate dimension; EP places whole experts on the ranks
  (contiguous ranges); shared experts are TP-sliced in both and one all-reduce sums the layer,
  except with EP's all-to-all dispatch (tandem/parallel/expert_dispatch.py), where each rank
  combines its own tokens and holds the shared experts whole.
Norms and the router are replicated. The embeddings live on the first stage's ranks only, the
final norm and the LM head on rank 0 only (it alone samples); elsewhere they are None.
"""

from __future__ import annotations

from torch import nn

from tandem.layers.linear import Linear
from tandem.layers.mlp import GatedMLP
from tandem.layers.moe import SparseMoE
from tandem.layers.parallel_linear import RowParallelLinear
from tandem.models.arch import ModelArch
from tandem.models.deepseek_v3 import LatentUpProjection, MLAttention
from tandem.models.llama import DecoderAttention, DecoderForCausalLM
from tandem.models.shard_plan import ShardPlan
from tandem.parallel.expert_dispatch import AllToAllDispatch
from tandem.parallel.group import RankGroup


def stage_layers(num_layers: int, pp_size: int, stage: int) -> tuple[int, int]:
    """[start, end) of `stage`: consecutive, sizes differing by at most one (earlier stages larger)."""
    if num_layers < pp_size:
        raise ValueError(f"{num_layers} layers cannot fill {pp_size} pipeline stages")
    base, extra = divmod(num_layers, pp_size)
    start = stage * base + min(stage, extra)
    return start, start + base + (1 if stage < extra else 0)


class _Planner:
    def __init__(self, group: RankGroup) -> None:
        self.g = group
        self.slices: dict[str, tuple[int, int, int]] = {}
        self.skip: list[str] = []

    def column(self, prefix: str, old: Linear) -> Linear:
        n, r = self.g.tp_size, self.g.tp_rank
        new = Linear(old.in_features, old.out_features // n, bias=old.bias is not None)
        self.slices[f"{prefix}.weight"] = (0, r, n)
        if old.bias is not None:
            self.slices[f"{prefix}.bias"] = (0, r, n)
        return new

    def row(self, prefix: str, old: Linear) -> RowParallelLinear:
        n, r = self.g.tp_size, self.g.tp_rank
        keep_bias = old.bias is not None and r == 0
        new = RowParallelLinear(old.in_features // n, old.out_features, bias=keep_bias)
        new.reduce = self.g.all_reduce
        self.slices[f"{prefix}.weight"] = (1, r, n)
        if old.bias is not None and not keep_bias:
            self.skip.append(f"{prefix}.bias")
        return new

    def mlp(self, prefix: str, mlp: GatedMLP, reduce: bool) -> GatedMLP:
        mlp.gate_proj = self.column(f"{prefix}.gate_proj", mlp.gate_proj)
        mlp.up_proj = self.column(f"{prefix}.up_proj", mlp.up_proj)
        down = self.row(f"{prefix}.down_proj", mlp.down_proj)
        if not reduce:
            down.reduce = None      # the enclosing MoE layer sums once
        mlp.down_proj = down
        return mlp


def shard_model(model: DecoderForCausalLM, group: RankGroup) -> ShardPlan:
    """Reshape `model` (on the meta device) in place to `group`'s rank; the plan for the loader."""
    arch: ModelArch = model.arch
    g = group
    p = _Planner(g)
    start, end = stage_layers(arch.num_layers, g.pp_size, g.stage)
    layers = list(model.model.layers)[start:end]
    model.model.layers = nn.ModuleList(layers)
    if g.tp_size > 1 and arch.num_heads % g.tp_size:
        raise ValueError(f"{arch.num_heads} attention heads do not split over {g.tp_size} ranks")
    for local, layer in enumerate(layers):
        pre = f"model.layers.{local}"
        attn = layer.self_attn
        attn.layer_idx = local
        if g.tp_size > 1:
            _shard_attention(p, f"{pre}.self_attn", attn, arch)
            layer.mlp = _shard_mlp(p, f"{pre}.mlp", layer.mlp, arch)
    if g.stage > 0:
        model.model.embed_tokens = None
        p.skip.append("model.embed_tokens.")
    if g.rank != 0:
        model.lm_head = None
        model.model.norm = None
        p.skip.extend(("lm_head.", "model.norm."))
    return ShardPlan(slices=p.slices, skip=tuple(p.skip), layers=(start, end) if g.pp_size > 1 else None,
                     num_ranks=g.cfg.world_size)


def _shard_attention(p: _Planner, pre: str, attn: nn.Module, arch: ModelArch) -> None:
    n = p.g.tp_size
    if isinstance(attn, DecoderAttention):
        if arch.num_kv_heads % n:
            raise ValueError(f"{arch.num_kv_heads} KV heads do not split over {n} tensor-parallel ranks")
        attn.num_heads, attn.num_kv_heads = arch.num_heads // n, arch.num_kv_heads // n
        for name in ("q_proj", "k_proj", "v_proj"):
            setattr(attn, name, p.column(f"{pre}.{name}", getattr(attn, name)))
        attn.o_proj = p.row(f"{pre}.o_proj", attn.o_proj)
    elif isinstance(attn, MLAttention):
        attn.num_heads = arch.num_heads // n
        name = "q_proj" if attn.mla.q_lora_rank is None else "q_b_proj"
        setattr(attn, name, p.column(f"{pre}.{name}", getattr(attn, name)))
        old = attn.kv_b_proj.weight
        attn.kv_b_proj = LatentUpProjection(old.shape[1], old.shape[0] // n)
        p.slices[f"{pre}.kv_b_proj.weight"] = (0, p.g.tp_rank, n)
        attn.o_proj = p.row(f"{pre}.o_proj", attn.o_proj)
    else:
        raise ValueError(f"no tensor-parallel plan for {type(attn).__name__}")


def _shard_mlp(p: _Planner, pre: str, mlp: nn.Module, arch: ModelArch) -> nn.Module:
    if isinstance(mlp, GatedMLP):
        return p.mlp(pre, mlp, reduce=True)
    assert isinstance(mlp, SparseMoE) and arch.moe is not None
    spec, n, r = arch.moe, p.g.tp_size, p.g.tp_rank
    if p.g.cfg.enable_expert_parallel:
        if spec.num_experts % n:
            raise ValueError(f"{spec.num_experts} experts do not split over {n} expert-parallel ranks")
        per = spec.num_experts // n
        local = range(r * per, (r + 1) * per)
        moe = SparseMoE(arch.hidden_size, spec, local_experts=local)
        p.skip.extend(f"{pre}.experts.{e}." for e in range(spec.num_experts) if e not in local)
    else:
        moe = SparseMoE(arch.hidden_size, spec)
        for e, expert in moe.experts.items():
            p.mlp(f"{pre}.experts.{e}", expert, reduce=False)
    if p.g.cfg.enable_expert_parallel and p.g.cfg.expert_dispatch == "alltoall":
        # each rank combines its own tokens: shared experts whole on every rank, no all-reduce
        moe.dispatch = AllToAllDispatch(p.g, spec.num_experts // n)
        return moe
    if moe.shared_experts is not None:
        p.mlp(f"{pre}.shared_experts", moe.shared_experts, reduce=False)
    moe.reduce = p.g.all_reduce
    return moe
