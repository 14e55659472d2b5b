"""shard_model on the meta device (no process group needed): each rank's shapes, slices and skips."""

from __future__ import annotations

import torch

from tandem.layers.parallel_linear import RowParallelLinear
from tandem.models.arch import ModelArch
from tandem.models.registry import model_class
from tandem.parallel.config import ParallelConfig
from tandem.parallel.group import RankGroup
from tandem.parallel.shard import shard_model, stage_layers
from tandem.testing.tiny_model import write_test_model


def _sharded(path, rank, **cfg):
    arch = ModelArch.from_dir(path)
    with torch.device("meta"):
        model = model_class(arch.architecture)(arch)
        plan = shard_model(model, RankGroup(ParallelConfig(**cfg), rank, torch.device("cpu")))
    return model, plan


def test_tensor_parallel_rank_1_of_a_dense_model(tmp_path):
    model, plan = _sharded(write_test_model(tmp_path, num_heads=4, num_kv_heads=2), 1, tensor_parallel_size=2)
    attn = model.model.layers[0].self_attn
    assert (attn.num_heads, attn.num_kv_heads) == (2, 1)
    assert attn.q_proj.weight.shape == (32, 64) and attn.k_proj.weight.shape == (16, 64)
    assert isinstance(attn.o_proj, RowParallelLinear) and attn.o_proj.weight.shape == (64, 32)
    assert plan.slices["model.layers.0.self_attn.q_proj.weight"] == (0, 1, 2)
    assert plan.slices["model.layers.1.mlp.down_proj.weight"] == (1, 1, 2)
    assert model.lm_head is None and model.model.norm is None          # only rank 0 samples
    assert model.model.embed_tokens is not None                        # the first stage embeds
    assert plan.local_name("lm_head.weight") is None and plan.num_ranks == 2


def test_expert_parallel_places_whole_experts(tmp_path):
    model, plan = _sharded(write_test_model(tmp_path, "DeepseekV3ForCausalLM", extra_config={"n_routed_experts": 8}),
                           1, tensor_parallel_size=2, enable_expert_parallel=True)
    moe = model.model.layers[1].mlp
    assert sorted(moe.experts) == ["4", "5", "6", "7"]
    assert moe.experts["4"].gate_proj.weight.shape == (32, 64)         # whole expert
    assert moe.shared_experts.gate_proj.weight.shape == (16, 64)       # shared expert: TP slice
    assert plan.local_name("model.layers.1.mlp.experts.3.up_proj.weight") is None
    assert plan.local_name("model.layers.1.mlp.experts.4.up_proj.weight") is not None
    mla = model.model.layers[0].self_attn
    assert mla.num_heads == 2 and mla.kv_b_proj.weight.shape == (2 * (16 + 16), 32)


def test_all_to_all_dispatch_keeps_shared_experts_whole(tmp_path):
    model, plan = _sharded(write_test_model(tmp_path, "DeepseekV3ForCausalLM", extra_config={"n_routed_experts": 8}),
                           1, tensor_parallel_size=2, enable_expert_parallel=True, expert_dispatch="alltoall")
    moe = model.model.layers[1].mlp
    assert sorted(moe.experts) == ["4", "5", "6", "7"] and moe.reduce is None and moe.dispatch.per == 4
    assert moe.shared_experts.gate_proj.weight.shape == (32, 64)       # whole on every rank
    assert "model.layers.1.mlp.shared_experts.gate_proj.weight" not in plan.slices


def test_pipeline_stage_2_renumbers_its_layers(tmp_path):
    assert [stage_layers(5, 2, s) for s in range(2)] == [(0, 3), (3, 5)]
    model, plan = _sharded(write_test_model(tmp_path, num_layers=5), 1, pipeline_parallel_size=2)
    assert len(model.model.layers) == 2
    assert [layer.self_attn.layer_idx for layer in model.model.layers] == [0, 1]
    assert plan.local_name("model.layers.3.mlp.up_proj.weight") == "model.layers.0.mlp.up_proj.weight"
    assert plan.local_name("model.layers.2.mlp.up_proj.weight") is None
    assert model.model.embed_tokens is None and model.lm_head is None
