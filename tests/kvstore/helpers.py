"""Engines with KV tiers for the kvstore tests, and ways to drain their background work."""

from __future__ import annotations

import dataclasses
import time

from tandem.config import KVStoreConfig
from tandem.engine.engine import Engine
from tests.conftest import engine_config


def tiered_engine(model_dir, store: KVStoreConfig, **kw) -> Engine:
    """An engine with `store`'s tiers; prefill cost pinned high unless given, so every hit loads."""
    if store.prefill_s_per_token is None:
        store = dataclasses.replace(store, prefill_s_per_token=1.0)
    cfg = dataclasses.replace(engine_config(model_dir, **kw), kv_store=store)
    return Engine.from_config(cfg)


def tiers_of(engine):
    """The tiered connector's worker (the only connector, or the last of a set)."""
    worker = engine.connector.worker
    return worker.parts[-1] if hasattr(worker, "parts") else worker


def settle(engine, timeout_s: float = 20.0) -> None:
    """Step until nothing is left to do: requests done, saves copied and written, kept blocks freed."""
    worker = tiers_of(engine)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if engine.has_work() or engine.kv_io_in_flight():
            engine.step()
            time.sleep(0.001)
            continue
        if worker.wait_idle(timeout_s=0.01) and not engine.kv_io_in_flight():
            engine.step()   # collect the last releases
            if not engine.has_work() and not engine.kv_io_in_flight():
                return
    raise AssertionError("the engine's KV I/O did not settle")


def wait_store(engine, timeout_s: float = 20.0) -> None:
    """Until the engine's store client is connected."""
    store = tiers_of(engine).stack["store"]
    deadline = time.monotonic() + timeout_s
    while not store.available:
        if time.monotonic() > deadline:
            raise AssertionError("the store client did not connect")
        time.sleep(0.02)
