"""The tiers' table (tandem/kvstore/registry.py) is what the config asks for: each tier's settings
alone build that tier and nothing else, all of them build the stack in the table's order, and the
names are the stats' labels."""

from __future__ import annotations

import socket

import pytest

from tandem.config import EngineConfig, KVStoreConfig, ModelConfig
from tandem.kv.layout import KVLayout
from tandem.kvstore.factory import make_tiers
from tandem.kvstore.keys import KeySpace
from tandem.kvstore.registry import TIERS
from tandem.types import KV_TIERS

LAYOUT = KVLayout(model="m", dtype="float32", block_size=4, num_layers=2, num_kv_heads=2, head_dim=8)


def _unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def settings(tmp_path):
    """Each tier's settings in KVStoreConfig (the store's master is not there: it stays unavailable)."""
    return {"host": dict(host_bytes=8 * LAYOUT.block_nbytes),
            "disk": dict(disk_dir=str(tmp_path / "disk"), disk_bytes=1 << 20),
            "store": dict(store_url=f"mooncake://127.0.0.1:{_unused_port()}", retry_s=0.05)}


def _stack(**store):
    config = EngineConfig(ModelConfig("unused"), kv_store=KVStoreConfig(**store))
    return config.kv_store.enabled, make_tiers(config, LAYOUT, KeySpace.of(LAYOUT, 0), on_cuda=False)


def _close(stack):
    for tier in stack.tiers:
        tier.close()


def test_the_names_are_the_stats_labels():
    assert tuple(TIERS) == KV_TIERS


def test_no_settings_no_tier():
    enabled, stack = _stack()
    assert not enabled and stack.tiers == []


@pytest.mark.parametrize("name", list(TIERS))
def test_a_tiers_settings_build_that_tier_alone(name, settings):
    assert name in settings, f"give the {name} tier its settings here"
    enabled, stack = _stack(**settings[name])
    try:
        assert enabled and [t.name for t in stack.tiers] == [name]
        assert stack[name].block_nbytes == LAYOUT.block_nbytes
    finally:
        _close(stack)


def test_every_tier_in_the_tables_order(settings):
    enabled, stack = _stack(**{k: v for s in settings.values() for k, v in s.items()})
    try:
        assert enabled and [t.name for t in stack.tiers] == list(TIERS)
    finally:
        _close(stack)
