"""RoPE frequencies and rotation agree with transformers' definitions."""

from __future__ import annotations

import pytest
import torch

from tandem.layers.norm import RMSNorm
from tandem.layers.rotary import RotaryEmbedding, apply_rotary, inv_frequencies
from tandem.layers.rotary import RopeSpec

transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("scaling", [
    None,
    {"rope_type": "linear", "factor": 4.0},
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 8192},
])
def test_inv_freq_matches_transformers(scaling):
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    params = {"rope_theta": 500000.0, "rope_type": "default", **(scaling or {})}
    cfg = LlamaConfig(hidden_size=512, num_attention_heads=4, rope_parameters=params,
                      max_position_embeddings=131072)
    spec = RopeSpec(theta=500000.0, rope_type=params["rope_type"], factor=params.get("factor", 1.0),
                    low_freq_factor=params.get("low_freq_factor", 1.0),
                    high_freq_factor=params.get("high_freq_factor", 4.0),
                    original_max_position_embeddings=params.get("original_max_position_embeddings"))
    if params["rope_type"] == "default":
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
        expected = LlamaRotaryEmbedding.compute_default_rope_parameters(cfg)[0]
    else:
        expected = ROPE_INIT_FUNCTIONS[params["rope_type"]](cfg, "cpu")[0]
    torch.testing.assert_close(inv_frequencies(128, spec, 131072), expected, atol=0, rtol=1e-6)


def test_apply_rotary_is_rotate_half_form():
    torch.manual_seed(0)
    x = torch.randn(5, 3, 8)
    rope = RotaryEmbedding(8, RopeSpec(), 64, "cpu")
    pos = torch.tensor([0, 1, 7, 30, 63])
    cos, sin = rope.cos_sin(pos, torch.float32)
    full_cos, full_sin = torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)
    rotate_half = torch.cat([-x[..., 4:], x[..., :4]], -1)
    torch.testing.assert_close(apply_rotary(x, cos, sin), x * full_cos + rotate_half * full_sin)
    assert torch.equal(apply_rotary(x[:1], cos[:1], sin[:1]), x[:1])  # position 0 is the identity


def test_rmsnorm_formula():
    torch.manual_seed(0)
    norm = RMSNorm(6, eps=1e-6)
    norm.weight.data = torch.rand(6) + 0.5
    x = torch.randn(3, 6)
    expected = norm.weight * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(norm(x), expected)
