"""Token space of synthetic prompts: read from a model directory, specials excluded."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tandem.bench.vocab import TokenSpace


def test_from_model_dir_excludes_added_and_special_ids(tmp_path):
    vocab = {f"t{i}": i for i in range(100)}
    (tmp_path / "tokenizer.json").write_text(json.dumps({
        "model": {"type": "BPE", "vocab": vocab},
        "added_tokens": [{"id": 100, "content": "<eos>"}, {"id": 5, "content": "<x>"}]}))
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 128, "bos_token_id": 1,
                                                      "eos_token_id": [2, 100]}))
    space = TokenSpace.from_model_dir(tmp_path)
    assert (space.low, space.high) == (0, 100)
    allowed = space.allowed()
    assert allowed.size == 97 and not np.isin([1, 2, 5], allowed).any()


def test_parse_range():
    assert TokenSpace.parse_range("10:20").allowed().tolist() == list(range(10, 20))
    with pytest.raises(ValueError):
        TokenSpace.parse_range("20:10")


def test_tiny_test_model_has_a_usable_space(llama_dir):
    space = TokenSpace.from_model_dir(llama_dir)
    assert space.allowed().size > 10
