"""The engine with KV connectors: loads (synchronous and asynchronous) give the same greedy output
as computing, failed loads recompute, kept blocks are freed once released, and two connectors
run at once (a decode worker pulling from a prefill worker while saving to a second one)."""

from __future__ import annotations

import dataclasses
import time

import pytest

from tandem.engine.engine import Engine
from tandem.models.kv_layout import layout_of
from tandem.kv.connector_set import connector_set
from tandem.models.loader import load_model
from tandem.tokenization.tokenizer import Tokenizer
from tandem.transfer.factory import make_transport
from tandem.transfer.handoff import handoff_connector
from tandem.types import EngineRequest
from tests.conftest import assert_all_blocks_free, engine_config
from tests.engine.helpers import prompts, request, run, tokens
from tests.engine.host_copy_connector import host_copy_connector


def _engine(model_dir, make_connectors, **kw):
    """An engine whose connectors are built over its KV tensor: make_connectors(kv, layout)."""
    cfg = engine_config(model_dir, **kw)
    loaded = load_model(cfg.model)
    layout = layout_of(loaded, cfg.cache)
    kv = layout.allocate(cfg.cache.num_blocks, cfg.model.device)
    connectors, address = make_connectors(kv, layout, cfg)
    return Engine(cfg, loaded, Tokenizer.from_dir(model_dir), kv, connector_set(connectors),
                  transport_address=address)


def _host(load_async):
    def make(kv, layout, cfg):
        return [host_copy_connector(kv, layout.block_size, cfg.cache.hash_seed, load_async)], None
    return make


def _drain(engine, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while engine.has_work() and time.monotonic() < deadline:
        engine.step()
        time.sleep(0.002)


@pytest.mark.parametrize("load_async", [False, True])
def test_loaded_prefix_gives_the_computed_output(llama_dir, make_engine, load_async):
    batch = prompts(3, seed=50, min_len=17, max_len=40)
    single = make_engine(llama_dir)
    engine = _engine(llama_dir, _host(load_async))
    try:
        for prompt in batch:
            ref = tokens(run(single, [r := request(prompt, max_tokens=7)])[r.request_id])
            run(engine, [request(prompt, max_tokens=7)])
            _drain(engine)                          # the save is released: blocks free
            assert engine.kv.pool.reset_cache()     # the device forgets the prefix
            out = run(engine, [r := request(prompt, max_tokens=7)])[r.request_id]
            assert tokens(out) == ref
            # every full block but the one holding the last prompt token came from the connector
            assert out[-1].num_cached_tokens == (len(prompt) - 1) // 4 * 4
        _drain(engine)
        assert engine.connector.worker.loads, "nothing was loaded"
        assert_all_blocks_free(engine)
    finally:
        engine.shutdown()


@pytest.mark.parametrize("load_async", [False, True])
def test_a_failed_load_recomputes(llama_dir, make_engine, load_async):
    prompt = prompts(1, seed=51, min_len=30, max_len=30)[0]
    ref = tokens(run(make_engine(llama_dir), [r := request(prompt, max_tokens=6)])[r.request_id])
    engine = _engine(llama_dir, _host(load_async))
    try:
        run(engine, [request(prompt, max_tokens=6)])
        _drain(engine)
        assert engine.kv.pool.reset_cache()
        engine.connector.worker.fail_loads = 1
        out = run(engine, [r := request(prompt, max_tokens=6)])[r.request_id]
        assert tokens(out) == ref and out[-1].num_cached_tokens == 0
        assert len(engine.connector.worker.loads) == 1   # not retried after the failure
        _drain(engine)
        assert_all_blocks_free(engine)
    finally:
        engine.shutdown()


def test_decode_worker_pulls_from_prefill_and_saves_to_a_second_connector(llama_dir, make_engine):
    def prefill_side(kv, layout, cfg):
        transport = make_transport("tcp", kv, layout, cfg.transfer)
        transport.source.start()
        return [handoff_connector(transport, layout)], transport.source.address

    def decode_side(kv, layout, cfg):
        transport = make_transport("tcp", kv, layout, cfg.transfer)
        transport.source.start()
        host = host_copy_connector(kv, layout.block_size, cfg.cache.hash_seed)
        return [handoff_connector(transport, layout), host], transport.source.address

    prompt = prompts(1, seed=52, min_len=26, max_len=26)[0]
    ref = tokens(run(make_engine(llama_dir), [r := request(prompt, max_tokens=8)])[r.request_id])
    prefill = _engine(llama_dir, prefill_side, role="prefill")
    decode = _engine(llama_dir, decode_side, role="decode")
    try:
        first = request(prompt, max_tokens=8, prefill_only=True)
        pre = run(prefill, [first])[first.request_id][0]
        second = EngineRequest("d1", list(prompt), first.sampling, kv_handle=pre.kv_handle,
                               resume_output_ids=list(pre.new_token_ids))
        out = run(decode, [second])[second.request_id]
        assert pre.new_token_ids + tokens(out) == ref
        _drain(prefill)
        _drain(decode)
        host = decode.connector.worker.parts[1]
        assert len(host.store) == (len(prompt) + 8 - 1) // 4   # the decode side saved its blocks
        # a later turn on the decode worker, its device cache gone, loads from the second connector
        assert decode.kv.pool.reset_cache()
        third = dataclasses.replace(request(prompt, max_tokens=8), request_id="d2")
        again = run(decode, [third])[third.request_id]
        assert tokens(again) == ref and again[-1].num_cached_tokens == (len(prompt) - 1) // 4 * 4
        _drain(decode)
        assert_all_blocks_free(prefill)
        assert_all_blocks_free(decode)
    finally:
        prefill.shutdown()
        decode.shutdown()
