"""A checkpoint's weights fingerprint: equal for equal bytes, different for another checkpoint of
the same shape, and carried by the KV layout, so that the handoff and the storage tiers never mix
KV of two checkpoints."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from tandem.config import CacheConfig, ModelConfig
from tandem.kvstore.keys import KeySpace
from tandem.models.fingerprint import weights_fingerprint
from tandem.models.kv_layout import layout_of
from tandem.models.loader import load_model, safetensors_files
from tandem.testing.tiny_model import write_test_model


def _fp(path: Path) -> str:
    return weights_fingerprint(safetensors_files(Path(path)))


def test_equal_checkpoints_agree_and_another_seed_differs(tmp_path):
    a = write_test_model(tmp_path / "a", seed=1)
    a_again = write_test_model(tmp_path / "a2", seed=1)
    b = write_test_model(tmp_path / "b", seed=2)
    assert _fp(a) == _fp(a_again)
    assert len(_fp(a)) == 16 and _fp(a) != _fp(b)


def test_one_retrained_tensor_changes_it(tmp_path):
    """A fine-tune that trained a single small tensor (one layer's norm) still gets a new name."""
    path = write_test_model(tmp_path / "m", seed=3)
    (file,) = safetensors_files(Path(path))
    before = _fp(path)
    weights = load_file(file)
    name = "model.layers.1.post_attention_layernorm.weight"
    weights[name] = weights[name] * 1.01
    save_file(weights, file, metadata={"format": "pt"})
    assert _fp(path) != before


def test_the_kv_layout_and_store_keys_name_the_weights(tmp_path):
    cache = CacheConfig()
    load = lambda p: load_model(ModelConfig(path=str(p), show_progress=False))  # noqa: E731
    a, a_again, b = (load(write_test_model(tmp_path / n, seed=s)) for n, s in
                     (("a", 1), ("a2", 1), ("b", 2)))
    la, lb = layout_of(a, cache), layout_of(b, cache)
    assert la == layout_of(a_again, cache)
    assert la.model != lb.model and la.model.endswith(f"/W{a.weights_id}")
    assert KeySpace.of(la, 0) != KeySpace.of(lb, 0)     # a shared store or disk dir: a miss, not b's KV
    assert torch.equal(next(a.model.parameters()), next(a_again.model.parameters()))
