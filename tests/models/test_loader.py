"""Loading model directories: errors name the problem, shards load, dtype auto, zero-copy weights."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from tandem.config import ModelConfig
from tandem.errors import ModelLoadError
from tandem.models.loader import load_model
from tandem.testing.tiny_model import write_test_model


def load(path, **kw):
    return load_model(ModelConfig(path=str(path), show_progress=False, **kw))


def test_loaded_fields(tmp_path):
    loaded = load(write_test_model(tmp_path / "m", "Qwen2ForCausalLM", num_layers=3))
    assert loaded.arch.architecture == "Qwen2ForCausalLM"
    assert (loaded.arch.num_layers, loaded.arch.num_kv_heads, loaded.arch.head_dim) == (3, 2, 16)
    assert loaded.dtype == torch.float32 and loaded.name == "m"
    assert loaded.eos_token_ids == tuple(loaded.generation_defaults["eos_token_id"])
    assert len(loaded.eos_token_ids) == 2 and loaded.max_model_len == 2048
    assert not loaded.model.training
    assert all(p.dtype == torch.float32 and not p.requires_grad for p in loaded.model.parameters())


def test_dtype_auto_follows_checkpoint(tmp_path):
    path = write_test_model(tmp_path, dtype="bfloat16")
    assert load(path).dtype == torch.bfloat16
    assert load(path, dtype="float32").dtype == torch.float32
    assert next(load(path, dtype="float32").model.parameters()).dtype == torch.float32


def test_float16_checkpoint_runs_in_bfloat16_on_the_cpu_unless_asked(tmp_path):
    path = write_test_model(tmp_path, dtype="float16")
    loaded = load(path)
    assert loaded.dtype == torch.bfloat16
    assert all(p.dtype == torch.bfloat16 for p in loaded.model.parameters())
    assert load(path, dtype="float16").dtype == torch.float16


def test_legacy_torch_dtype_field(tmp_path):
    path = write_test_model(tmp_path, dtype="bfloat16", legacy_config=True)
    assert "torch_dtype" in json.loads((path / "config.json").read_text())
    assert load(path).dtype == torch.bfloat16


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_weights_are_mmapped_without_copy(tmp_path):
    path = write_test_model(tmp_path)
    loaded = load(path)
    target = str((path / "model.safetensors").resolve())
    ranges = []
    for line in Path("/proc/self/maps").read_text().splitlines():
        if line.endswith(target):
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            ranges.append((lo, hi))
    assert ranges, "the safetensors file is not memory-mapped"
    for name, p in loaded.model.named_parameters():
        assert any(lo <= p.data_ptr() < hi for lo, hi in ranges), f"{name} was copied"


def test_sharded_checkpoint_loads_same_weights(tmp_path):
    single = load(write_test_model(tmp_path / "one", seed=5))
    path = write_test_model(tmp_path / "sharded", seed=5, max_shard_bytes=40_000)
    shards = sorted(path.glob("model-*.safetensors"))
    assert len(shards) >= 3 and (path / "model.safetensors.index.json").is_file()
    sharded = load(path)
    a, b = dict(single.model.named_parameters()), dict(sharded.model.named_parameters())
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


def test_mistral_consolidated_file_beside_hf_weights_is_not_loaded(tmp_path):
    from safetensors.torch import save_file

    want = load(write_test_model(tmp_path / "ref", seed=5))
    for name, kw in (("single", {}), ("sharded", {"max_shard_bytes": 40_000})):
        path = write_test_model(tmp_path / name, seed=5, **kw)
        # Mistral's own format, with its own tensor names: tandem would refuse them
        save_file({"layers.0.attention.wq.weight": torch.zeros(2, 2)}, str(path / "consolidated.safetensors"))
        got = dict(load(path).model.named_parameters())
        assert all(torch.equal(p, got[n]) for n, p in want.model.named_parameters()), name
    # sharded without an index: every shard but the consolidated file
    (tmp_path / "sharded" / "model.safetensors.index.json").unlink()
    got = dict(load(tmp_path / "sharded").model.named_parameters())
    assert all(torch.equal(p, got[n]) for n, p in want.model.named_parameters())


def test_sharded_loads_in_transformers(tmp_path):
    transformers = pytest.importorskip("transformers")
    path = write_test_model(tmp_path, max_shard_bytes=40_000)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(path))
    ours = load(path)
    assert torch.equal(model.model.layers[1].mlp.down_proj.weight, ours.model.model.layers[1].mlp.down_proj.weight)


def test_missing_directory(tmp_path):
    with pytest.raises(ModelLoadError, match="model directory not found"):
        load(tmp_path / "nope")


def test_missing_config(tmp_path):
    path = write_test_model(tmp_path)
    (path / "config.json").unlink()
    with pytest.raises(ModelLoadError, match="config.json"):
        load(path)


def test_missing_weights(tmp_path):
    path = write_test_model(tmp_path)
    (path / "model.safetensors").unlink()
    with pytest.raises(ModelLoadError, match=r"missing file .*model\.safetensors"):
        load(path)


def test_missing_shard_named(tmp_path):
    path = write_test_model(tmp_path, max_shard_bytes=40_000)
    victim = sorted(path.glob("model-*.safetensors"))[1]
    victim.unlink()
    with pytest.raises(ModelLoadError, match=victim.name):
        load(path)


def test_unsupported_architecture_lists_supported(tmp_path):
    path = write_test_model(tmp_path)
    cfg = json.loads((path / "config.json").read_text())
    cfg["architectures"] = ["GPT2LMHeadModel"]
    (path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelLoadError) as e:
        load(path)
    msg = str(e.value)
    assert "GPT2LMHeadModel" in msg
    for arch in ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"):
        assert arch in msg


def test_unsupported_rope_type(tmp_path):
    path = write_test_model(tmp_path)
    cfg = json.loads((path / "config.json").read_text())
    cfg["rope_parameters"] = {"rope_type": "longrope", "factor": 4.0, "rope_theta": 10000.0}
    (path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelLoadError, match="unsupported rope type 'longrope'"):
        load(path)


def test_missing_weight_named(tmp_path):
    from safetensors.torch import load_file, save_file
    path = write_test_model(tmp_path)
    weights = load_file(str(path / "model.safetensors"))
    del weights["model.layers.1.mlp.up_proj.weight"]
    save_file(weights, str(path / "model.safetensors"))
    with pytest.raises(ModelLoadError, match="model.layers.1.mlp.up_proj.weight"):
        load(path)


def test_wrong_shape_named(tmp_path):
    path = write_test_model(tmp_path)
    cfg = json.loads((path / "config.json").read_text())
    cfg["intermediate_size"] = 96
    (path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelLoadError, match=r"mlp\.(gate|up|down)_proj\.weight.* has shape"):
        load(path)


def test_progress_bar_on_stderr(tmp_path, capsys):
    load_model(ModelConfig(path=str(write_test_model(tmp_path)), show_progress=True))
    captured = capsys.readouterr()
    assert "loading weights" in captured.err and captured.out == ""


def test_sliding_window_caps_max_model_len(tmp_path):
    path = write_test_model(tmp_path, "MistralForCausalLM")
    cfg = json.loads((path / "config.json").read_text())
    cfg["sliding_window"] = 1024
    (path / "config.json").write_text(json.dumps(cfg))
    assert load(path).max_model_len == 1024
    assert load(path, max_model_len=512).max_model_len == 512


def test_yarn_extends_the_context_as_vllm_derives_it(tmp_path):
    # Qwen's documented long-context setting: max_position_embeddings stays at the original
    # context, rope scaling yarn with factor 4
    scaling = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}
    path = write_test_model(tmp_path, "Qwen3ForCausalLM", rope_scaling=scaling, max_position_embeddings=2048)
    assert load(path).max_model_len == 8192
    assert load(path, max_model_len=3000).max_model_len == 3000
