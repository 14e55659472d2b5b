"""KV blocks between workers whose ranks split them differently: pieces land in the right rank's
tensor, replicas all get written, bad splits are refused, and a pull over tcp or shm between a
split worker and a whole one moves exactly the selected blocks."""

from __future__ import annotations

import pytest
import torch

from tandem.kv.layout import KVLayout
from tandem.transfer import TransferConfig
from tandem.transfer.factory import make_sharded_transport
from tandem.transfer.shards import KVShard, ShardedKV, copy_blocks
from tandem.transfer.shm import allocate_shm_kv
from tandem.types import KVHandle

torch.set_num_threads(1)

LAYOUT = KVLayout(model="m", dtype="float32", block_size=2, num_layers=4, num_kv_heads=4, head_dim=3)
N = 8


def _whole(seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn((N, *LAYOUT.block_shape), generator=g)     # [N, 4 layers, 2, 2, 4 heads, 3]


def _split(whole: torch.Tensor, shards: list[KVShard], shm_dir: str | None = None) -> ShardedKV:
    parts = []
    for s in shards:
        lay = s.layout(LAYOUT)
        t = allocate_shm_kv(lay, N, shm_dir) if shm_dir else lay.allocate(N)
        if whole is not None:
            t.copy_(whole[:, s.layers[0]:s.layers[1], :, :, s.heads[0]:s.heads[1]])
        parts.append((s, t))
    return ShardedKV(LAYOUT, tuple(parts))


TP2 = [KVShard((0, 4), (0, 2)), KVShard((0, 4), (2, 4))]
PP2 = [KVShard((0, 2), (0, 4)), KVShard((2, 4), (0, 4))]
TP2_PP2 = [KVShard((0, 3), (0, 2)), KVShard((0, 3), (2, 4)), KVShard((3, 4), (0, 2)), KVShard((3, 4), (2, 4))]


def _assembled(kv: ShardedKV) -> torch.Tensor:
    out = LAYOUT.allocate(N)
    copy_blocks(kv, range(N), ShardedKV.single(out, LAYOUT), range(N))
    return out


@pytest.mark.parametrize("src_shards", [TP2, PP2, TP2_PP2])
@pytest.mark.parametrize("dst_shards", [[KVShard.whole(LAYOUT)], TP2, PP2, TP2_PP2])
def test_blocks_keep_their_values_across_splits(src_shards, dst_shards):
    whole = _whole()
    src = _split(whole, src_shards)
    dst = _split(None, dst_shards)
    copy_blocks(src, [5, 6, 0], dst, [1, 2, 7])
    got = _assembled(dst)
    assert torch.equal(got[[1, 2, 7]], whole[[5, 6, 0]])
    assert torch.all(got[[0, 3, 4, 5, 6]] == 0)
    for s, t in dst.parts:   # each rank holds exactly its rectangle
        assert torch.equal(t[1], whole[5, s.layers[0]:s.layers[1], :, :, s.heads[0]:s.heads[1]])


def test_replicas_are_all_written_and_read_once():
    mla = KVLayout(model="m", dtype="float32", block_size=2, num_layers=2, num_kv_heads=1, head_dim=5, kind="mla")
    src = torch.randn((3, *mla.block_shape))
    reps = [mla.allocate(3), mla.allocate(3)]
    dst = ShardedKV(mla, tuple((KVShard.whole(mla), t) for t in reps))
    assert len(dst.sources) == 1 and dst.tensor is None
    copy_blocks(ShardedKV.single(src, mla), [2, 0], dst, [0, 1])
    for t in reps:
        assert torch.equal(t[[0, 1]], src[[2, 0]]) and torch.all(t[2] == 0)


@pytest.mark.parametrize("shards,match", [
    ([KVShard((0, 4), (0, 3)), KVShard((0, 4), (2, 4))], "overlap"),
    ([KVShard((0, 4), (0, 2)), KVShard((0, 3), (2, 4))], "do not cover"),
    ([KVShard((0, 5), (0, 4))], "outside"),
])
def test_bad_splits_are_refused(shards, match):
    with pytest.raises(ValueError, match=match):
        ShardedKV(LAYOUT, tuple((s, s.layout(LAYOUT).allocate(N)) for s in shards))


def test_parts_must_have_the_same_block_count():
    a, b = TP2
    with pytest.raises(ValueError, match="different block counts"):
        ShardedKV(LAYOUT, ((a, a.layout(LAYOUT).allocate(N)), (b, b.layout(LAYOUT).allocate(N - 1))))


def _pull(a, b, offered: list[int], indices: list[int], dst_ids: list[int]) -> None:
    """Transport a offers `offered`; b pulls offered[i] for i in indices into dst_ids."""
    a.source.start()
    a.source.offer("r", offered)
    handle = KVHandle(worker=a.source.address, request_id="r", block_ids=tuple(offered), num_tokens=8,
                      layout=LAYOUT.to_dict())
    b.sink.pull(handle, dst_ids, indices)
    assert a.source.poll_released() == ["r"] and a.source.num_pinned() == 0


@pytest.mark.parametrize("kind", ["tcp", "shm"])
def test_pull_from_a_split_worker_into_a_whole_one_and_back(kind, tmp_path):
    whole = _whole(3)
    shm = str(tmp_path) if kind == "shm" else None
    cfg = TransferConfig(shm_dir=str(tmp_path))
    src, dst, back = _split(whole, TP2_PP2, shm), _split(None, [KVShard.whole(LAYOUT)], shm), _split(None, TP2, shm)
    ts = [make_sharded_transport(kind, kv, cfg) for kv in (src, dst, back)]
    try:
        _pull(ts[0], ts[1], [4, 5, 6, 0], [0, 1, 3], [1, 2, 7])     # blocks 4, 5, 0 into 1, 2, 7
        got = _assembled(dst)
        assert torch.equal(got[[1, 2, 7]], whole[[4, 5, 0]]) and torch.all(got[[0, 3, 4, 5, 6]] == 0)
        _pull(ts[1], ts[2], [1, 2, 7, 3], [0, 1, 2], [0, 5, 6])     # whole -> split
        again = _assembled(back)
        assert torch.equal(again[[0, 5, 6]], whole[[4, 5, 0]]) and torch.all(again[[1, 2, 3, 4, 7]] == 0)
    finally:
        for t in ts:
            t.close()


def test_mooncake_refuses_a_split_worker():
    with pytest.raises(ValueError, match="tcp or shm"):
        make_sharded_transport("mooncake", _split(_whole(), TP2), TransferConfig())
