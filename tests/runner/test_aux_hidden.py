"""The auxiliary hidden-state seam: off by default (the runner calls the plain forward), and with
a tap installed the sampled tokens are unchanged while the tap receives, for every row the runner
computed, the residual stream after the chosen layers at that row's position."""

from __future__ import annotations

import torch

from tandem.layers.attention_batch import AttentionBatch, SeqSlice
from tests.engine.helpers import prompts, request, run, tokens


class RecordingTap:
    def __init__(self, layers):
        self.layers = layers
        self.steps = []

    def deliver(self, step):
        self.steps.append(step)


def test_forward_aux_matches_forward(make_engine, llama_dir):
    engine = make_engine(llama_dir, device="cpu")   # driven below with CPU tensors
    model = engine.loaded.model
    n = model.arch.num_layers
    ids = torch.tensor(prompts(1, seed=3, min_len=9, max_len=9)[0])
    pos = torch.arange(len(ids))
    kv = engine.layout.allocate(8)
    batch = AttentionBatch.build([SeqSlice([0, 1, 2], 0, len(ids))], engine.layout.block_size, "cpu")
    plain = model(ids, pos, batch, kv)
    hidden, aux = model.forward_aux(ids, pos, batch, kv, (0, n - 1))
    assert torch.equal(hidden, plain)                       # capturing reads the stream only
    assert aux.shape == (len(ids), 2, model.arch.hidden_size)
    assert torch.allclose(model.model.norm(aux[:, 1]), hidden, atol=1e-6)   # the top layer's stream, pre-norm
    assert not torch.allclose(aux[:, 0], aux[:, 1])


def test_no_tap_no_capture(make_engine, llama_dir, monkeypatch):
    engine = make_engine(llama_dir)
    model = engine.loaded.model
    assert model.aux_tap is None

    def refuse(*a, **k):
        raise AssertionError("forward_aux called with no tap installed")

    monkeypatch.setattr(model, "forward_aux", refuse)
    run(engine, [request(p, max_tokens=4) for p in prompts(3, seed=4)])


def test_a_tap_changes_no_token_and_sees_every_row(make_engine, llama_dir):
    batch = prompts(5, seed=11, min_len=4, max_len=50)
    ref = run(make_engine(llama_dir), reqs := [request(p, max_tokens=10) for p in batch])
    engine = make_engine(llama_dir, max_num_batched_tokens=32)   # prompts over several chunks
    tap = RecordingTap((0, 1))
    engine.loaded.model.aux_tap = tap
    try:
        res = run(engine, again := [request(p, max_tokens=10) for p in batch])
    finally:
        engine.loaded.model.aux_tap = None
    assert [tokens(res[a.request_id]) for a in again] == [tokens(ref[r.request_id]) for r in reqs]
    seen: dict[str, list[int]] = {}
    for step in tap.steps:
        assert step.hidden.shape[1:] == (2, engine.loaded.arch.hidden_size)
        assert sum(s.num_rows for s in step.spans) == step.hidden.shape[0]
        for s in step.spans:
            seen.setdefault(s.request.request_id, []).extend(range(s.first_position, s.first_position + s.num_rows))
    for a, p in zip(again, batch):
        # every position but the last sampled token's, each once, in order
        assert seen[a.request_id] == list(range(len(p) + 10 - 1))
