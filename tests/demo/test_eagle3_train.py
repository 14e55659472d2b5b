"""The training script end to end on a tiny target and a hand-made corpus: it writes a head that
loads against that target (and only that one) and records how it was trained and evaluated."""

from __future__ import annotations

import json

import torch

from tandem.config import ModelConfig
from tandem.models.loader import load_model
from tandem.spec.eagle3_loader import load_head
from tandem_demo.eagle3_train import main


def _corpus(path):
    path.mkdir()
    agent = [{"messages": [{"role": "user", "content": f"weather in city {i}?"},
                           {"role": "assistant", "content": f"it is sunny in city {i}, {i % 7} degrees"}],
              "tools": []} for i in range(12)]
    kjv = [{"ref": f"Gen {i}", "text": f"In the beginning {i} and the earth {i}."} for i in range(6)]
    for split in ("train", "heldout"):
        (path / f"agent.{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in agent))
        (path / f"kjv.{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kjv))
    return path


def test_train_writes_a_loadable_head(llama_dir, tmp_path):
    out = tmp_path / "head"
    main(["--target", str(llama_dir), "--corpus", str(_corpus(tmp_path / "corpus")), "--out", str(out),
          "--minutes", "0.02", "--depth", "2", "--max-len", "64", "--docs-per-step", "2", "--eval-docs", "3"])
    cfg = json.loads((out / "config.json").read_text())
    t = cfg["training"]
    assert t["steps"] >= 1 and t["tokens"] > 0 and t["heldout"]["positions"] > 0
    assert len(t["heldout"]["accepted_through_step"]) == 2
    assert t["command"].startswith("python -m tandem_demo.eagle3_train --target")
    assert json.loads((out / "train_log.json").read_text()) is not None
    target = load_model(ModelConfig(path=str(llama_dir), dtype="float32", show_progress=False))
    head = load_head(str(out), target.model, torch.float32, torch.device("cpu"))
    assert head.cfg.target.num_layers == target.arch.num_layers
