from __future__ import annotations

import os

import pytest
import torch

from tandem.kv.layout import KVLayout
from tandem.transfer import TransferConfig, TransferError, TransferSizeMismatch, allocate_kv, make_transport
from tandem.transfer.shards import ShardedKV
from tandem.transfer.shm import PREFIX, ShmSinkPlane, find_shm_file, remove_stale_files

LAYOUT = KVLayout(model="m", dtype="float32", block_size=2, num_layers=1, num_kv_heads=1, head_dim=4)


def test_allocate_shm_kv_is_a_shared_file(tmp_path):
    kv = allocate_kv(LAYOUT, 4, "shm", config=TransferConfig(shm_dir=str(tmp_path)))
    assert kv.shape == (4, *LAYOUT.block_shape) and torch.all(kv == 0)
    path, offset = find_shm_file(kv, str(tmp_path))
    assert os.path.basename(path).startswith(f"{PREFIX}{os.getpid()}-") and offset == 0
    assert os.path.getsize(path) == 4 * LAYOUT.block_nbytes
    kv[2] = 7.0
    other = torch.from_file(path, shared=True, size=kv.numel(), dtype=torch.float32)
    assert torch.all(other.view(kv.shape)[2] == 7.0)
    assert find_shm_file(LAYOUT.allocate(2), str(tmp_path)) is None


def test_stale_files_of_dead_processes_are_removed(tmp_path):
    dead = tmp_path / f"{PREFIX}999999999-abc"
    mine = tmp_path / f"{PREFIX}{os.getpid()}-abc"
    other = tmp_path / "unrelated"
    for f in (dead, mine, other):
        f.write_bytes(b"x")
    remove_stale_files(str(tmp_path))
    assert not dead.exists() and mine.exists() and other.exists()


def test_source_close_removes_the_file(tmp_path):
    cfg = TransferConfig(shm_dir=str(tmp_path))
    kv = allocate_kv(LAYOUT, 2, "shm", config=cfg)
    path, _ = find_shm_file(kv, str(tmp_path))
    t = make_transport("shm", kv, LAYOUT, cfg)
    t.source.start()
    t.close()
    assert not os.path.exists(path)


def test_shm_transport_needs_a_shared_tensor():
    with pytest.raises(ValueError, match="kind='shm'"):
        make_transport("shm", LAYOUT.allocate(2), LAYOUT, TransferConfig())


def test_sink_checks_the_file(tmp_path):
    cfg = TransferConfig(shm_dir=str(tmp_path))
    src = allocate_kv(LAYOUT, 2, "shm", config=cfg)
    path, _ = find_shm_file(src, str(tmp_path))
    sink = ShmSinkPlane(ShardedKV.single(LAYOUT.allocate(4), LAYOUT), str(tmp_path))
    reply = {"shm_path": path, "shm_offset": 0, "block_nbytes": LAYOUT.block_nbytes}
    with pytest.raises(TransferSizeMismatch, match="blocks need"):
        sink.receive(None, reply, [0, 3], [0, 1])
    with pytest.raises(TransferError, match="one host"):
        sink.receive(None, {**reply, "shm_path": str(tmp_path / f"{PREFIX}1-gone")}, [0], [0])
    with pytest.raises(TransferError, match="not a tandem KV file"):
        sink.receive(None, {**reply, "shm_path": "/etc/passwd"}, [0], [0])
    with pytest.raises(TransferError, match="not a tandem KV file"):
        sink.receive(None, {**reply, "shm_path": f"/etc/{PREFIX}1-x"}, [0], [0])
