"""The engine's assembly (tandem/engine/assembly.py): the placement decides where the KV cache
lives and nothing else, the config's transport picks the default placement, and the parts are
wired to one another (the tiers report to the engine's KV events, the handoff serves the cache)."""

from __future__ import annotations

import dataclasses

import pytest

from tandem.config import KVStoreConfig
from tandem.engine.engine import Engine
from tandem.engine.kv_placement import DeviceKV, EngineKV, TransportKV, placement_for
from tests.conftest import assert_all_blocks_free, engine_config
from tests.engine.helpers import prompts, request, run, tokens


@dataclasses.dataclass
class Recording:
    """DeviceKV's cache, and what the assembly asked for."""

    asked: list = dataclasses.field(default_factory=list)

    def allocate(self, config, loaded, layout, num_blocks) -> EngineKV:
        self.asked.append((layout, num_blocks))
        return DeviceKV().allocate(config, loaded, layout, num_blocks)


@pytest.mark.parametrize("role,transport,expected", [
    ("both", None, DeviceKV()),
    ("prefill", None, TransportKV("tcp")),
    ("decode", "shm", TransportKV("shm")),
    ("both", "tcp", TransportKV("tcp")),
])
def test_the_config_picks_the_placement(llama_dir, role, transport, expected):
    cfg = dataclasses.replace(engine_config(llama_dir, role=role), kv_transport=transport)
    assert placement_for(cfg) == expected


def test_the_placement_allocates_the_budgeted_cache(llama_dir, make_engine):
    prompt = prompts(1, seed=3, min_len=10, max_len=10)[0]
    ref = tokens(run(make_engine(llama_dir), [r := request(prompt, max_tokens=5)])[r.request_id])
    placement = Recording()
    engine = Engine.from_config(engine_config(llama_dir, num_blocks=40), kv=placement)
    try:
        [(layout, num_blocks)] = placement.asked
        assert (layout, num_blocks) == (engine.layout, 40) and engine.num_blocks == 40
        assert engine.connector is None and engine.transport_address is None
        assert tokens(run(engine, [r := request(prompt, max_tokens=5)])[r.request_id]) == ref
        assert_all_blocks_free(engine)
    finally:
        engine.shutdown()


def test_handoff_and_tiers_are_wired_to_the_engine(llama_dir):
    cfg = dataclasses.replace(engine_config(llama_dir, role="prefill"),
                              kv_store=KVStoreConfig(host_bytes=1 << 20, prefill_s_per_token=1.0))
    engine = Engine.from_config(cfg)
    try:
        _, tiers = engine.connector.worker.parts          # the handoff first
        assert tiers.events is engine.events            # the store's blocks become KV events
        assert engine.transport_address is not None     # the handoff's source serves the cache
        assert engine.connector.scheduler.hands_over
    finally:
        engine.shutdown()
