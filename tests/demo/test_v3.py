"""The v3 recipe (`python -m tandem_demo v3`, scripts/train-demo-v3.sh) end to end at tiny scale on
the CPU, so the GPU run cannot fail on a typo: corpora from a seed, target and draft (loss falls,
shards, checksums), the EAGLE-3 head, the held-out evaluation on the card, and `tandem serve`
answers a request with the target and the head."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tandem.launcher.cluster import free_port
from tandem.models.checksums import verify_checkpoint
from tandem.testing.server_process import stop, wait_healthy
from tandem_demo.unseen_eval import EVAL_SEED
from tandem_demo.v3 import V3Config, run

REPO = Path(__file__).resolve().parents[2]
pytest.importorskip("transformers")


def test_eval_seed_is_never_a_training_seed():
    with pytest.raises(ValueError, match="must stay unseen"):
        V3Config(seed=EVAL_SEED - 1)


def test_v3_recipe_at_tiny_scale_trains_evaluates_and_serves(tmp_path, bible_text):
    (tmp_path / "kjv.txt").write_text(bible_text)
    cfg = V3Config(out_root=str(tmp_path / "models"), work=str(tmp_path / "work"), device="cpu",
                   tokenizer_dir=str(REPO / "models" / "tandem-demo-target"), bible_text=str(tmp_path / "kjv.txt"),
                   transcripts=(20, 30, 30, 10), heldout=3, target_size="tiny", draft_size="tiny", seq_len=512,
                   batch_size=2, lr=3e-3, steps=12, head_minutes=0.02, head_threads=1, head_max_len=64,
                   eval_transcripts=1, max_shard_mib=0.1)
    out = run(cfg)
    target = Path(cfg.out_root) / "tandem-demo-target"
    log = json.loads((target / "train_log.json").read_text())
    losses = [x for _, _, x in log["history"]["train"]]
    assert log["steps"] == 12 and sum(losses[-3:]) / 3 < losses[0] - 0.3
    shards = sorted(target.glob("model-*.safetensors"))
    assert len(shards) >= 2 and (target / "model.safetensors.index.json").is_file()
    from safetensors import safe_open
    for f in shards:   # at most the limit, unless one tensor alone is larger (the tiny embedding is)
        with safe_open(str(f), "pt") as h:
            assert f.stat().st_size <= 0.1 * 2**20 + 4096 or len(h.keys()) == 1, f
    for role in ("target", "draft", "eagle3"):
        assert verify_checkpoint(Path(cfg.out_root) / f"tandem-demo-{role}").files >= 2, role
    ev = out["eval"]
    assert ev["seed"] == EVAL_SEED and ev["call_turns"] > 10
    for key in ("valid_share", "required_args_equal_share", "quotes_result_share", "english_share"):
        assert 0.0 <= ev[key] <= 1.0, key
    card = (target / "README.md").read_text()
    assert "## Held-out evaluation (v3)" in card and "python -m tandem_demo v3 " in card
    assert json.loads((target / "eval_v3.json").read_text())["call_turns"] == ev["call_turns"]

    port = free_port()
    spec = {"method": "eagle3", "model": str(Path(cfg.out_root) / "tandem-demo-eagle3"), "num_speculative_tokens": 2}
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "tandem", "serve", "--model", str(target), "--port", str(port),
                             "--dtype", "float32", "--threads", "1", "--kv-cache-memory", "16MiB",
                             "--served-model-name", "v3", "--log-level", "warning",
                             "--speculative-config", json.dumps(spec)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, timeout_s=120)
        r = httpx.post(url + "/v1/chat/completions", timeout=60, json={
            "model": "v3", "max_tokens": 8, "temperature": 0.0,
            "messages": [{"role": "user", "content": "Hello!"}]})
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] >= 1
    finally:
        stop(proc)


def test_the_gpu_script_passes_only_flags_the_recipe_knows():
    import argparse
    import re

    from tandem_demo.v3 import add_args, config_from_args
    script = (REPO / "scripts" / "train-demo-v3.sh").read_text()
    call = script[script.rindex("-m tandem_demo v3"):]   # the command, not the comment
    flags = set(re.findall(r"(--[a-z][a-z0-9-]+)", call))
    p = argparse.ArgumentParser()
    add_args(p)
    known = {s for a in p._actions for s in a.option_strings}
    assert flags and flags <= known, flags - known
    cfg = config_from_args(p.parse_args(["--device", "cuda", "--target-minutes", "3.5", "--transcripts", "1,2,3,4"]))
    assert cfg.transcripts == (1, 2, 3, 4) and cfg.target_minutes == 3.5 and cfg.seq_len >= 16384


def test_the_recipe_never_writes_over_existing_models(tmp_path):
    from tandem_demo.v3 import prepare
    (tmp_path / "models" / "tandem-demo-draft").mkdir(parents=True)
    (tmp_path / "models" / "tandem-demo-draft" / "model.safetensors").write_text("v2")
    with pytest.raises(ValueError, match="tandem-demo-draft is not empty"):
        prepare(V3Config(out_root=str(tmp_path / "models"), work=str(tmp_path / "work")))


def test_preflight_names_a_missing_cuda_device_before_any_work(tmp_path, monkeypatch):
    import torch

    from tandem_demo.v3 import preflight
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="sees no CUDA device"):
        preflight(V3Config(device="cuda", work=str(tmp_path)))
    preflight(V3Config(device="cpu", work=str(tmp_path)))
