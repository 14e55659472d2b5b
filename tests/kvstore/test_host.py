"""Host tier: least recently used out, capacity in whole blocks, reads stop at the first miss."""

from __future__ import annotations

import pytest
import torch

from tandem.kvstore.host import HostTier


def _rows(n, nbytes=16, start=0):
    return torch.arange(start, start + n, dtype=torch.uint8).repeat_interleave(nbytes).view(n, nbytes)


def test_eviction_order_and_capacity():
    tier = HostTier(capacity_bytes=3 * 16 + 5, block_nbytes=16)   # room for 3 blocks
    assert tier.num_slots == 3 and tier.capacity_bytes == 48
    assert tier.write(["a", "b", "c"], _rows(3)) == 3
    out = [torch.empty(16, dtype=torch.uint8)]
    assert tier.read(["a"], out) == 1                # a is now the most recently used
    assert tier.write(["d"], _rows(1, start=9)) == 1  # evicts b, the least recently used
    assert tier.keys() == ["c", "a", "d"]
    assert tier.used_bytes == 48 and tier.counters.evicted == 1
    assert tier.write(["a"], _rows(1, start=7)) == 0  # held already: not rewritten
    assert tier.keys() == ["c", "d", "a"]
    rows = [torch.empty(16, dtype=torch.uint8) for _ in range(3)]
    assert tier.read(["a", "b", "d"], rows) == 1      # stops at b
    assert rows[0].tolist() == [0] * 16


def test_contents_round_trip_and_remove():
    tier = HostTier(capacity_bytes=64, block_nbytes=16)
    src = torch.randint(0, 255, (4, 16), dtype=torch.uint8)
    tier.write(list("wxyz"), src)
    dst = [torch.empty(16, dtype=torch.uint8) for _ in range(4)]
    assert tier.read(list("wxyz"), dst) == 4
    assert torch.equal(torch.stack(dst), src)
    tier.remove(["x", "nope"])
    assert tier.keys() == ["w", "y", "z"] and not tier.contains("x")
    assert tier.counters.read_bytes == 64 and tier.counters.write_bytes == 64


def test_too_small_for_one_block():
    with pytest.raises(ValueError, match="holds no block"):
        HostTier(capacity_bytes=10, block_nbytes=16)
