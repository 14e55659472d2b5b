"""The test-model writer produces Hub-format checkpoints that transformers loads as written."""

from __future__ import annotations

import json

import pytest
import torch

from tandem.testing.tiny_model import write_test_model
from tandem.testing.tiny_tokenizer import trained_tokenizer_json

transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("arch", ["LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"])
def test_loads_in_transformers(tmp_path, arch):
    path = write_test_model(tmp_path, arch, num_layers=1, dtype="bfloat16", tie_word_embeddings=True)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(path))
    assert type(model).__name__ == arch
    assert model.dtype == torch.bfloat16
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    tok = transformers.AutoTokenizer.from_pretrained(str(path))
    assert tok.eos_token in ("<|eos|>", "<|im_end|>")
    gen = json.loads((path / "generation_config.json").read_text())
    assert tok.convert_tokens_to_ids("<|im_end|>") in gen["eos_token_id"]


def test_tokenizer_training_is_deterministic():
    first = trained_tokenizer_json(600, "qwen")
    trained_tokenizer_json.cache_clear()
    assert trained_tokenizer_json(600, "qwen") == first
    assert trained_tokenizer_json(600, "llama") != first


def test_tokenizer_vocab_size_respected(tmp_path):
    path = write_test_model(tmp_path, vocab_size=400)
    vocab = json.loads((path / "tokenizer.json").read_text())
    n = len(vocab["model"]["vocab"]) + len([t for t in vocab["added_tokens"]
                                            if t["content"] not in vocab["model"]["vocab"]])
    assert n <= 400


def test_seed_changes_weights(tmp_path):
    from safetensors.torch import load_file
    a = load_file(str(write_test_model(tmp_path / "a", seed=1) / "model.safetensors"))
    b = load_file(str(write_test_model(tmp_path / "b", seed=2) / "model.safetensors"))
    assert not torch.equal(a["model.layers.0.self_attn.q_proj.weight"], b["model.layers.0.self_attn.q_proj.weight"])
