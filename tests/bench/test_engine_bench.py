"""Smoke test of the engine microbenchmark on the tiny test model: a few requests, every part,
the report has its fields and sane values."""

from __future__ import annotations

import argparse
import json
import math

import pytest
import torch

from tandem.bench.engine_bench import ModelShape, count_params, main, register_engine
from tandem.bench.engine_measure import left_padded, offline_workload

pytest.importorskip("transformers")


def test_param_count_matches_the_checkpoint(llama_dir):
    # tiny model defaults of write_test_model: hidden 64, 2 layers, 4 heads, 2 KV heads, 128, 512
    shape = ModelShape(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                       intermediate_size=128, vocab_size=512)
    assert shape.num_params() == count_params(str(llama_dir))
    assert ModelShape().num_params() == 124_668_672


def test_workload_lengths_fixed_tokens_vary_with_seed():
    a = offline_workload(6, (4, 9), (2, 5), 512, lengths_seed=0, tokens_seed=1)
    b = offline_workload(6, (4, 9), (2, 5), 512, lengths_seed=0, tokens_seed=2)
    assert [len(p) for p in a.prompts] == [len(p) for p in b.prompts]
    assert a.output_lens == b.output_lens
    assert a.prompts != b.prompts
    assert all(4 <= len(p) <= 9 for p in a.prompts) and all(2 <= n <= 5 for n in a.output_lens)
    assert all(16 <= t < 512 for p in a.prompts for t in p)


def test_left_padding():
    ids, mask = left_padded([[5, 6, 7], [8]], pad_token_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]


def test_register_engine_adds_the_verb():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="bench_command", required=True)
    register_engine(sub)
    args = parser.parse_args(["engine", "--threads", "1", "--parts", "decode"])
    assert callable(args.func) and args.threads == 1 and args.parts == "decode"


def test_engine_bench_report(llama_dir, tmp_path, capsys):
    threads = torch.get_num_threads()
    try:
        rc = main(["--model-dir", str(llama_dir), "--dtypes", "float32", "--threads", "1",
                   "--repeats", "1", "--num-requests", "5", "--prompt-range", "8:24",
                   "--output-range", "2:6", "--hf-batch-sizes", "2,4", "--decode-prompt", "12",
                   "--decode-tokens", "5", "--decode-repeats", "3", "--cold", "warm", "--no-hf-cold-start",
                   "--out", str(tmp_path)])
    finally:
        torch.set_num_threads(threads)
    assert rc == 0
    report = json.loads((tmp_path / "engine_bench.json").read_text())
    assert report["schema"] == "tandem.bench.engine/1"
    meta = report["meta"]
    assert meta["threads"] == 1 and meta["machine"]["nproc"] >= 1 and meta["machine"]["torch"]
    assert meta["commit"].split("+")[0].isalnum() and len(meta["commit"]) >= 7   # this checkout
    assert report["model"]["num_params"] == count_params(str(llama_dir))
    r = report["results"]["float32"]

    t = r["throughput"]
    wl = t["workload"]
    assert wl["num_requests"] == 5
    assert 5 * 8 <= wl["prompt_tokens"] <= 5 * 24 and 5 * 2 <= wl["output_tokens"] <= 5 * 6
    assert t["tandem"]["output_tokens"] == wl["output_tokens"] == t["transformers"]["output_tokens"]
    assert t["tandem"]["cached_tokens"] == 0          # fresh token ids: no prefix-cache hits
    assert t["transformers"]["batch_size"] in (2, 4) and t["transformers"]["order"] in ("sorted", "arrival")
    assert set(t["transformers_by_setting"]) == {"sorted/2", "sorted/4", "arrival/2", "arrival/4"}
    # the goal's baseline is the fastest transformers setting of all
    assert t["transformers"]["output_tps"] == max(o["output_tps"] for o in t["transformers_by_order"].values())
    assert t["ratio_output_tps_by_order"][t["transformers"]["order"]] == t["ratio_output_tps"]
    # padded batches compute at least the useful tokens
    assert t["transformers"]["computed_tokens"] >= wl["prompt_tokens"] + wl["output_tokens"]
    for side in ("tandem", "transformers"):
        assert t[side]["seconds"] > 0
        assert t[side]["total_tps"] > t[side]["output_tps"] > 0
    assert math.isclose(t["ratio_output_tps"], t["tandem"]["output_tps"] / t["transformers"]["output_tps"])
    assert isinstance(t["goal_met"], bool)

    d = r["decode"]
    for side in ("tandem", "transformers"):
        assert d[side]["num_tokens"] == 5 and d[side]["repeats"] == 3 and len(d[side]["runs"]) == 3
        assert d[side]["tpot_s"] == sorted(r["tpot_s"] for r in d[side]["runs"])[1]   # the median
        assert 0 < d[side]["tpot_s"] < 10 and 0 < d[side]["ttft_s"] < 10
    # float32, batch 1: tandem's greedy tokens equal transformers'
    assert d["greedy_tokens_matching"] == [5, 5, 5]
    assert d["ratio_tpot"] > 0

    c = r["cold_start"]
    assert set(c) == {"warm"}
    w = c["warm"]
    assert w["ready_s"] > w["python_s"] > 0 and w["read_s"] > 0 and w["import_torch_s"] > 0
    assert w["child"]["load_s"] > 0 and w["child"]["first_request_s"] > 0
    assert w["bound_s"] == pytest.approx(2 * w["read_s"] + w["import_torch_s"])
    assert "hf_ready_s" not in w

    md = (tmp_path / "engine_bench.md").read_text()
    assert "offline output tok/s" in md and "batch-1 decode ms/token" in md and "start to first token" in md
    assert "engine_bench.json" in capsys.readouterr().out


def test_hf_batches_in_arrival_order_compute_more_padding_than_sorted():
    from tandem.bench.engine_measure import hf_throughput

    class Echo:  # stands in for a transformers model: generate appends zeros, shapes are real
        def generate(self, input_ids, attention_mask, max_new_tokens, **kw):
            return torch.cat([input_ids, torch.zeros(input_ids.shape[0], max_new_tokens, dtype=torch.long)], 1)

    wl = offline_workload(8, (4, 9), (1, 30), 512, lengths_seed=3, tokens_seed=1)
    sorted_run = hf_throughput(Echo(), wl, 4, 0, "sorted")
    arrival = hf_throughput(Echo(), wl, 4, 0, "arrival")
    assert sorted_run.output_tokens == arrival.output_tokens == wl.output_tokens
    assert sorted_run.computed_tokens < arrival.computed_tokens
    with pytest.raises(ValueError):
        hf_throughput(Echo(), wl, 4, 0, "random")
