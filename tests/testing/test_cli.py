"""`tandem model make-test` and `tandem model info` through the models CLI module."""

from __future__ import annotations

import argparse
import json

import torch

from tandem.config import ModelConfig
from tandem.cli import model as cli
from tandem.models.loader import load_model


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="verb", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_make_test_writes_loadable_model(tmp_path, capsys):
    out = tmp_path / "q3"
    assert run(["model", "make-test", str(out), "--arch", "Qwen3ForCausalLM", "--hidden-size", "32",
                "--layers", "3", "--dtype", "bfloat16", "--vocab-size", "400", "--seed", "7"]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    loaded = load_model(ModelConfig(path=str(out), show_progress=False))
    assert loaded.arch.architecture == "Qwen3ForCausalLM"
    assert (loaded.arch.hidden_size, loaded.arch.num_layers, loaded.arch.vocab_size) == (32, 3, 400)
    assert loaded.arch.intermediate_size == 64 and loaded.dtype == torch.bfloat16
    assert {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"} <= {
        p.name for p in out.iterdir()}


def test_make_test_is_deterministic(tmp_path):
    for name in ("a", "b"):
        assert run(["model", "make-test", str(tmp_path / name), "--seed", "3"]) == 0
    for f in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f


def test_make_test_rejects_tiny_vocab(tmp_path, capsys):
    assert run(["model", "make-test", str(tmp_path / "x"), "--vocab-size", "100"]) == 2
    assert "vocab_size must be at least" in capsys.readouterr().err


def test_info(tmp_path, capsys):
    run(["model", "make-test", str(tmp_path / "m")])
    capsys.readouterr()
    assert run(["model", "info", str(tmp_path / "m")]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["architecture"] == "LlamaForCausalLM" and info["num_kv_heads"] == 2
    assert run(["model", "info", str(tmp_path / "none")]) == 2
