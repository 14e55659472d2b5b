"""ModelConfig.fused_layers: which models run the fused element-wise kernels, and the fallback."""

from __future__ import annotations

import torch

from tandem.config import ModelConfig
from tandem.kernels.build import KernelBuildConfig
from tandem.kernels.fused_ops import FusedOps
from tandem.layers.mlp import GatedMLP
from tandem.layers.norm import RMSNorm
from tandem.models.fused_choice import fused_ops
from tandem.models.llama import DecoderAttention
from tandem.models.loader import load_model
from tandem.testing.tiny_model import write_test_model

CPU = torch.device("cpu")


def test_cpu_float32_and_bfloat16_get_the_kernels():
    assert isinstance(fused_ops(True, torch.float32, CPU), FusedOps)
    assert isinstance(fused_ops(True, torch.bfloat16, CPU), FusedOps)


def test_off_other_dtypes_and_devices_keep_torch_ops():
    assert fused_ops(False, torch.float32, CPU) is None
    assert fused_ops(True, torch.float16, CPU) is None
    assert fused_ops(True, torch.float32, torch.device("meta")) is None


def test_without_a_compiler_it_falls_back_logged(tmp_path, caplog):
    cfg = KernelBuildConfig(cache_dir=tmp_path, compiler="/nonexistent/cc")
    assert fused_ops(True, torch.float32, CPU, cfg) is None
    assert "using torch ops" in caplog.text


def test_the_loader_hands_them_to_every_fused_layer(tmp_path):
    path = write_test_model(tmp_path / "m", "Qwen3ForCausalLM", num_layers=2)
    for enabled in (True, False):
        model = load_model(ModelConfig(path=str(path), show_progress=False, fused_layers=enabled)).model
        layers = [m for m in model.modules() if isinstance(m, (RMSNorm, GatedMLP, DecoderAttention))]
        assert len(layers) == 2 * 6 + 1   # per layer: 4 norms (2 + q/k), MLP, attention; final norm
        assert all((m.fused is not None) == enabled for m in layers)
