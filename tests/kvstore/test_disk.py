"""Disk tier: one file per block, least recently used out within its capacity, found again after
a restart in the same order, bad files are misses (and removed), a full file system stops writes."""

from __future__ import annotations

import errno
import os

import torch

from tandem.kvstore import disk as disk_module
from tandem.kvstore.disk import DiskTier
from tandem.kvstore.frame import HEADER_BYTES
from tandem.kvstore.keys import KeySpace

NB = 32
SPACE = "0123456789abcdef"


def _keys(*hashes):
    return KeySpace(SPACE).keys(hashes, (), 16)


def _rows(n, start=0):
    return torch.arange(start, start + n, dtype=torch.uint8).repeat_interleave(NB).view(n, NB)


def _read(tier, keys):
    dst = [torch.empty(NB, dtype=torch.uint8) for _ in keys]
    n = tier.read(keys, dst)
    return n, [d[0].item() for d in dst[:n]]


def test_eviction_order_capacity_and_restart(tmp_path):
    size = HEADER_BYTES + NB
    tier = DiskTier(tmp_path, 3 * size, SPACE, NB)
    a, b, c, d = _keys(1, 2, 3, 4)
    assert tier.write([a, b, c], _rows(3)) == 3
    os.utime(tier.path(a), (1, 1000)); os.utime(tier.path(b), (1, 1001)); os.utime(tier.path(c), (1, 1002))
    assert _read(tier, [a]) == (1, [0])          # a becomes the most recently used
    assert tier.write([d], _rows(1, start=3)) == 1
    assert tier.keys() == [c, a, d]              # b went: least recently used
    assert not tier.path(b).exists() and tier.used_bytes == 3 * size
    assert tier.counters.evicted == 1
    # a restart finds c, a, d, oldest modification first (a was read after c was written)
    os.utime(tier.path(c), (1, 2000)); os.utime(tier.path(a), (1, 2001)); os.utime(tier.path(d), (1, 2002))
    again = DiskTier(tmp_path, 3 * size, SPACE, NB)
    assert again.keys() == [c, a, d]
    assert _read(again, [c, a, d]) == (3, [2, 0, 3])
    # a smaller capacity at restart trims the oldest
    os.utime(tier.path(c), (1, 3000)); os.utime(tier.path(a), (1, 3001)); os.utime(tier.path(d), (1, 3002))
    small = DiskTier(tmp_path, 2 * size, SPACE, NB)
    assert small.keys() == [a, d] and not small.path(c).exists()
    # another key space (another model or layout) sees none of them
    assert DiskTier(tmp_path, 3 * size, "f" * 16, NB).keys() == []


def test_corrupt_truncated_and_foreign_files_are_misses(tmp_path):
    tier = DiskTier(tmp_path, 1 << 20, SPACE, NB)
    a, b, c = _keys(1, 2, 3)
    tier.write([a, b, c], _rows(3))
    raw = bytearray(tier.path(a).read_bytes())
    raw[-1] ^= 0xFF                                   # a flipped bit in the payload
    tier.path(a).write_bytes(bytes(raw))
    assert _read(tier, [a]) == (0, [])
    assert not tier.contains(a) and not tier.path(a).exists() and tier.counters.corrupt == 1
    tier.path(b).write_bytes(tier.path(b).read_bytes()[:-5])   # truncated
    assert _read(tier, [b]) == (0, []) and tier.counters.corrupt == 2
    os.replace(tier.path(c), tier.path(a))            # a value stored under another key
    tier._files[a] = HEADER_BYTES + NB
    assert _read(tier, [a]) == (0, []) and tier.counters.corrupt == 3


def test_a_full_file_system_stops_writes_and_reads_go_on(tmp_path, monkeypatch, caplog):
    now = [100.0]
    tier = DiskTier(tmp_path, 1 << 20, SPACE, NB, retry_s=5.0, clock=lambda: now[0])
    a, b, c = _keys(1, 2, 3)
    tier.write([a], _rows(1))
    real_replace = os.replace

    def full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(disk_module.os, "replace", full)
    assert tier.write([b, c], _rows(2)) == 0
    assert tier.counters.errors == 1 and tier.counters.skipped == 2
    assert "file system is full" in caplog.text
    assert not list(tmp_path.rglob("*.tmp"))          # no half-written file left
    monkeypatch.setattr(disk_module.os, "replace", real_replace)
    now[0] = 103.0
    assert tier.write([b], _rows(1)) == 0 and tier.counters.skipped == 3   # still paused
    assert _read(tier, [a]) == (1, [0])               # serving goes on
    now[0] = 105.5
    assert tier.write([b], _rows(1)) == 1             # writes resume after retry_s
