"""CUDA graphs of decode steps, what the CPU can check: graphs asked for where they cannot run
fall back to eager decoding with one warning, and the replay's buffers (rows copied in from
several decode buckets, padding rows that repeat row 0) give the same greedy tokens as eager
steps, with a stand-in graph that runs the forward on the static buffers."""

from __future__ import annotations

import dataclasses

import torch

from tandem.engine.engine import Engine
from tandem.layers.attention_batch import AttentionBatch, SeqSlice
from tandem.runner.cuda_graphs import DecodeGraphs
from tests.conftest import TEST_DEVICE, assert_all_blocks_free, engine_config
from tests.engine.helpers import prompts, request, run, tokens


class EagerGraphs(DecodeGraphs):
    """DecodeGraphs whose "graph" runs the captured step eagerly on the static buffers at replay."""

    replays: list[int]   # the sizes replayed, in order

    def _capture(self, size, pool):
        batch = self._batch(size)
        out = torch.empty(size, self.model.arch.hidden_size, dtype=self.kv_cache.dtype, device=self.device)
        graphs = self
        graphs.replays = []

        class Replay:
            def replay(self):
                graphs.replays.append(size)
                out.copy_(graphs.model(graphs.input_ids[:size], graphs.positions[:size], batch, graphs.kv_cache))

        self._graphs[size], self._outputs[size] = Replay(), out
        return pool


def _engine(model_dir, device=TEST_DEVICE, **model):
    cfg = engine_config(model_dir, max_num_batched_tokens=64, device=device)
    return Engine.from_config(dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, **model)))


def test_graphs_asked_for_on_the_cpu_warn_once_and_decode_eagerly(llama_dir, caplog):
    engine = _engine(llama_dir, "cpu", cuda_graph_sizes=(1, 2, 4))
    assert engine.runner.graphs is None
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        "CUDA graphs off, decoding eagerly: CUDA graphs need a CUDA device; this worker computes on cpu"]
    engine.shutdown()
    caplog.clear()
    eager = _engine(llama_dir, "cpu", cuda_graph_sizes=(1, 2, 4), enforce_eager=True)
    assert eager.runner.graphs is None and eager.runner.loaded.cuda_graph_sizes == ()
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
    eager.shutdown()


def test_replayed_buffers_decode_as_eager_steps(llama_dir):
    # contexts from 5 to 90 tokens: several decode buckets (rows copied in from each group)
    ps = prompts(5, seed=6, min_len=5, max_len=90)
    outs = []
    for graphs in (False, True):
        engine = _engine(llama_dir)
        runner = engine.runner
        if graphs:
            runner.graphs = EagerGraphs(runner.model, runner.kv_cache, (1, 2, 4, 8), engine.layout.block_size,
                                        runner.loaded.max_model_len, runner.device)
            runner.graphs.capture()
            assert runner.graphs.sizes == (1, 2, 4, 8)
        reqs = [request(p, max_tokens=7) for p in ps]
        out = run(engine, reqs[:3])
        out.update(run(engine, reqs[3:]))
        outs.append([tokens(out[r.request_id]) for r in reqs])
        if graphs:   # decode steps of 3 sequences replay size 4: padded by one row
            assert runner.graphs.replays.count(4) >= 4 and set(runner.graphs.replays) <= {1, 2, 4}
        assert_all_blocks_free(engine)
        engine.shutdown()
    assert outs[0] == outs[1]


def test_a_step_with_a_prefill_or_too_many_rows_runs_eagerly(llama_dir):
    engine = _engine(llama_dir)
    r = engine.runner
    graphs = EagerGraphs(r.model, r.kv_cache, (2,), engine.layout.block_size, r.loaded.max_model_len, r.device)
    graphs.capture()
    decode3 = AttentionBatch.build([SeqSlice([1], 2, 1)] * 3, 4)
    with_prefill = AttentionBatch.build([SeqSlice([1], 0, 2)], 4)
    assert graphs.replay_size(AttentionBatch.build([SeqSlice([1], 2, 1)], 4), None) == 2
    assert graphs.replay_size(decode3, None) is None and graphs.replay_size(with_prefill, None) is None
    assert graphs.replay_size(AttentionBatch.build([SeqSlice([1], 2, 1)], 4), object()) is None
    engine.shutdown()
