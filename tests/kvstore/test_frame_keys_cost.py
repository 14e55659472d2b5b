"""Value framing, key naming and the load-or-recompute rule."""

from __future__ import annotations

import hashlib

import pytest
import torch

from tandem.kv.layout import KVLayout
from tandem.kvstore.cost import CostModel
from tandem.kvstore.frame import HEADER_BYTES, CorruptValue, check_frame, write_frame
from tandem.kvstore.keys import KeySpace, block_hash_of
from tandem.kvstore.stack import LoadPlan


def test_frame_round_trip_and_every_check():
    payload = torch.randint(0, 255, (64,), dtype=torch.uint8)
    frame = torch.empty(HEADER_BYTES + 64, dtype=torch.uint8)
    write_frame(frame, "s/t/00000000000000aa", payload)
    assert torch.equal(check_frame(frame, "s/t/00000000000000aa", 64), payload)
    with pytest.raises(CorruptValue, match="another key"):
        check_frame(frame, "s/t/00000000000000ab", 64)
    with pytest.raises(CorruptValue, match="bytes"):
        check_frame(frame[:-1], "s/t/00000000000000aa", 64)
    bad = frame.clone()
    bad[HEADER_BYTES + 3] ^= 1
    with pytest.raises(CorruptValue, match="checksum"):
        check_frame(bad, "s/t/00000000000000aa", 64)
    bad = frame.clone()
    bad[0] = 0
    with pytest.raises(CorruptValue, match="magic"):
        check_frame(bad, "s/t/00000000000000aa", 64)


def test_keys_name_layout_seed_and_tenant():
    layout = KVLayout(model="m", dtype="float32", block_size=4, num_layers=2, num_kv_heads=2, head_dim=8)
    ks = KeySpace.of(layout, hash_seed=0)
    assert ks == KeySpace.of(layout, 0)
    assert ks != KeySpace.of(layout, 1)
    other = KVLayout(model="m", dtype="bfloat16", block_size=4, num_layers=2, num_kv_heads=2, head_dim=8)
    assert ks != KeySpace.of(other, 0)
    plain, salted = ks.keys([0xABC], (), 4), ks.keys([0xABC], ("tenant-a",), 4)
    assert plain[0] == f"{ks.space}/-/0000000000000abc" and plain != salted
    assert block_hash_of(salted[0]) == 0xABC
    # a salt alone keeps its key of earlier versions; a tenant's partition is named apart
    assert salted[0] == f"{ks.space}/{hashlib.blake2b(b'tenant-a', digest_size=8).hexdigest()}/0000000000000abc"
    tenants = {ks.keys([0xABC], p, 4)[0] for p in ((("tenant", "key-0"),), (("tenant", "key-1"),),
                                                 ("tenant-a", ("tenant", "key-0")))}
    assert len(tenants | {plain[0], salted[0]}) == 5


def test_cost_model_takes_the_prefix_with_the_largest_savings():
    cost = CostModel(prefill_s_per_token=1e-3, block_size=4, block_nbytes=1, alpha=1.0)  # 4 ms a block
    cost.observe("host", 10, 10e-6)       # 1 us a block
    cost.observe("disk", 2, 2e-3)         # 1 ms a block
    cost.observe("store", 1, 10e-3)       # 10 ms a block: slower than recomputing
    assert cost.prefix_to_load(["host", "disk", "disk"]) == 3
    assert cost.prefix_to_load(["store", "store"]) == 0
    # a slow block is taken only when enough fast blocks follow it
    assert cost.prefix_to_load(["host", "store", "host"]) == 1   # 4 ms, then -2, then 2: stop at 1
    assert cost.prefix_to_load(["store"] + ["host"] * 3) == 4   # -6 + 3 * 4 = 6 ms saved
    assert CostModel(1e-3, 4, 1, enabled=False).prefix_to_load(["store"] * 3) == 3
    # what the worker reports to the gateway: each tier's block read against its block's compute
    assert cost.weights(("host", "disk", "store")) == pytest.approx((0.00025, 0.25, 2.5))
    assert CostModel(1e-3, 4, 1, enabled=False).weights(("host",)) == ()


def test_load_plan_runs():
    plan = LoadPlan(("a", "b", "c", "d"), ("host", "host", "store", "host"))
    assert plan.runs() == [("host", 0, 2), ("store", 2, 3), ("host", 3, 4)] and plan.is_async
    assert not LoadPlan(("a",), ("host",)).is_async


def test_a_tier_not_measured_for_a_while_is_tried_once():
    now = [0.0]
    cost = CostModel(prefill_s_per_token=1e-9, block_size=4, block_nbytes=1 << 20, explore_s=30.0,
                     clock=lambda: now[0])
    assert cost.prefix_to_load(["store", "store"]) == 2   # never measured: explored
    assert cost.prefix_to_load(["store", "store"]) == 0   # once
    cost.observe("store", 2, 2e-3)                        # the load measured it: too slow
    now[0] = 29.0
    assert cost.prefix_to_load(["store"]) == 0
    now[0] = 31.0
    assert cost.prefix_to_load(["disk", "store"]) == 2    # 31 s since: both tried again
    assert cost.prefix_to_load(["disk", "store"]) == 0
