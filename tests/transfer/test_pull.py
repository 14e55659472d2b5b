"""Cross-process KV pulls: a prefill peer and a decode peer (spawned processes) for each transport kind."""

from __future__ import annotations

import importlib.util
import multiprocessing as mp
import os
import signal
import time

import pytest
import torch

from tests.transfer.kv_peer import as_bytes, pattern, peer_main
from tests.transfer.stalled_reader import stalled_reader_main
from tandem.kv.layout import KVLayout
from tandem.transfer import TransferConfig, TransferConnectionError, UnknownTransfer, make_transport
from tandem.types import KVHandle

torch.set_num_threads(1)

HAS_MOONCAKE = importlib.util.find_spec("mooncake") is not None
KINDS = ["tcp", "shm", pytest.param("mooncake", marks=pytest.mark.skipif(
    not HAS_MOONCAKE, reason="mooncake-transfer-engine-non-cuda not installed"))]
NUM_BLOCKS = 16


def layout(dtype: str = "float32", block_size: int = 4) -> KVLayout:
    return KVLayout(model="tiny-llama", dtype=dtype, block_size=block_size, num_layers=2, num_kv_heads=2,
                    head_dim=8)


class Peer:
    """A spawned process running kv_peer.peer_main; every call is bounded in time."""

    def __init__(self, ctx) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=peer_main, args=(child,), daemon=True)
        self.proc.start()

    def __call__(self, *cmd, timeout: float = 60.0):
        self.conn.send(cmd)
        assert self.conn.poll(timeout), f"peer did not answer {cmd[0]} within {timeout}s"
        reply = self.conn.recv()
        if isinstance(reply, tuple) and reply and reply[0] == "error" and cmd[0] != "pull":
            raise AssertionError(f"peer failed {cmd}: {reply}")
        return reply

    def stop(self) -> None:
        if self.proc.is_alive():
            self.conn.send(("exit",))
            self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)


@pytest.fixture(scope="module")
def ctx():
    return mp.get_context("spawn")


@pytest.fixture(scope="module")
def peers(ctx):
    prefill, decode = Peer(ctx), Peer(ctx)
    yield prefill, decode
    prefill.stop()
    decode.stop()


_names = iter(range(10**6))


def open_pair(peers, kind: str, lay: KVLayout, decode_layout: KVLayout | None = None, **cfg):
    """Fresh transports on both peers; returns (name, source address)."""
    prefill, decode = peers
    name = f"{kind}-{next(_names)}"
    cfg.setdefault("pin_timeout_s", 30.0)
    addr = prefill("open", name, kind, lay.to_dict(), NUM_BLOCKS, cfg)
    decode("open", name, kind, (decode_layout or lay).to_dict(), NUM_BLOCKS, cfg)
    return name, addr


def handle(addr: str, rid: str, block_ids, lay: KVLayout, kind: str) -> dict:
    return KVHandle(addr, rid, tuple(block_ids), len(block_ids) * lay.block_size, lay.to_dict(),
                    transport=kind).to_dict()


def wait_released(peer, name: str, rid: str, within_s: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < within_s:
        released = peer("poll", name)
        if released:
            assert released == [rid]
            return time.monotonic() - t0
        time.sleep(0.05)
    raise AssertionError(f"{rid} not released within {within_s}s")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("kind", KINDS)
def test_pull_subset_into_other_blocks_then_release(peers, kind, dtype):
    prefill, decode = peers
    lay = layout(dtype)
    name, addr = open_pair(peers, kind, lay)
    src = [3, 7, 8, 9, 1]
    prefill("offer", name, "req-1", src, 11)
    h = handle(addr, "req-1", src, lay, kind)
    # the decode side already holds block 0 of the sequence: pull indices 1..4 into non-matching ids
    dst = [10, 2, 3, 0]
    assert decode("pull", name, h, dst, [1, 2, 3, 4]) is None
    assert decode("bytes", name, dst) == prefill("bytes", name, src[1:])
    assert decode("bytes", name, dst) == as_bytes(pattern(lay, 11, 5)[1:])
    assert decode("bytes", name, [1, 4, 5]) == bytes(3 * lay.block_nbytes)   # untouched blocks stay zero
    # confirm released every block of the request, exactly once
    assert prefill("poll", name) == ["req-1"]
    assert prefill("poll", name) == []
    assert prefill("state", name)[:2] == (0, 0)
    err = decode("pull", name, h, dst, [1, 2, 3, 4])
    assert err[:2] == ("error", "UnknownTransfer") and "req-1" in err[2]


@pytest.mark.parametrize("kind", KINDS)
def test_layout_mismatch_names_the_field_and_writes_nothing(peers, kind):
    prefill, decode = peers
    lay, other = layout(block_size=4), layout(block_size=8)
    name, addr = open_pair(peers, kind, lay, decode_layout=other)
    prefill("offer", name, "req-m", [0, 1], 5)
    # honest handle: the decode side refuses before connecting
    err = decode("pull", name, handle(addr, "req-m", [0, 1], lay, kind), [0, 1], None)
    assert err[1] == "KVLayoutMismatch" and "block_size: 8 here vs 4 there" in err[2]
    # a handle that lies about the layout: the source's reply is checked too
    err = decode("pull", name, handle(addr, "req-m", [0, 1], other, kind), [0, 1], None)
    assert err[1] == "KVLayoutMismatch" and "block_size: 8 here vs 4 there" in err[2]
    assert decode("bytes", name, [0, 1]) == bytes(2 * other.block_nbytes)
    assert prefill("state", name)[:2] == (1, 0)    # still pinned: the timeout or a release frees it


def test_dtype_mismatch_is_named(peers):
    prefill, decode = peers
    name, addr = open_pair(peers, "tcp", layout("float32"), decode_layout=layout("bfloat16"))
    prefill("offer", name, "req-d", [2], 5)
    err = decode("pull", name, handle(addr, "req-d", [2], layout("bfloat16"), "tcp"), [0], None)
    assert err[1] == "KVLayoutMismatch" and "dtype: 'bfloat16' here vs 'float32' there" in err[2]


@pytest.mark.parametrize("kind", KINDS)
def test_unknown_request_is_a_clear_error(peers, kind):
    _, decode = peers
    lay = layout()
    name, addr = open_pair(peers, kind, lay)
    err = decode("pull", name, handle(addr, "never-offered", [0], lay, kind), [0], None)
    assert err[1] == "UnknownTransfer" and "'never-offered'" in err[2] and "pin timeout" in err[2]


def test_connection_refused_is_a_clear_error():
    lay = layout()
    kv = lay.allocate(4)
    t = make_transport("tcp", kv, lay, TransferConfig(connect_timeout_s=2))
    t.source.start()
    dead = t.source.address
    t.source.close()
    with pytest.raises(TransferConnectionError, match=f"cannot connect to KV source {dead}"):
        t.sink.pull(KVHandle(dead, "r", (0,), 4, lay.to_dict()), [1])
    t.close()


@pytest.mark.parametrize("kind", KINDS)
def test_pin_timeout_releases_when_no_pull_comes(peers, kind):
    prefill, decode = peers
    lay = layout()
    name, addr = open_pair(peers, kind, lay, pin_timeout_s=0.3)
    prefill("offer", name, "req-t", [4, 5], 3)
    assert prefill("poll", name) == []
    waited = wait_released(prefill, name, "req-t", within_s=5.0)
    assert waited < 5.0
    assert prefill("state", name)[0] == 0 and prefill("state", name)[2]["timeout"] == 1
    err = decode("pull", name, handle(addr, "req-t", [4, 5], lay, kind), [0, 1], None)
    assert err[1] == "UnknownTransfer"


@pytest.mark.parametrize("kind", KINDS)
def test_killed_decode_mid_pull_leaks_nothing(peers, ctx, kind):
    prefill, _ = peers
    lay = layout()
    name, addr = open_pair(peers, kind, lay, pin_timeout_s=0.5, io_timeout_s=30.0)
    conn, child = ctx.Pipe()
    victim = ctx.Process(target=stalled_reader_main, args=(child, addr, "req-k", lay.to_dict(), kind),
                         daemon=True)
    victim.start()
    try:
        assert conn.poll(60) and conn.recv() == "ready"
        prefill("offer", name, "req-k", list(range(NUM_BLOCKS)), 9)
        conn.send("go")
        assert conn.poll(60) and conn.recv() is True          # the read is open on the source
        time.sleep(1.0)                                        # past the pin timeout ...
        assert prefill("poll", name) == []                     # ... but an open read keeps the pins
        assert prefill("state", name)[:2] == (1, 1)
        os.kill(victim.pid, signal.SIGKILL)
        victim.join(10)
        wait_released(prefill, name, "req-k", within_s=5.0)
        assert prefill("state", name)[:2] == (0, 0)
    finally:
        if victim.is_alive():
            victim.kill()
            victim.join(5)


def test_sink_release_gives_blocks_back(peers):
    prefill, _ = peers
    lay = layout()
    name, addr = open_pair(peers, "tcp", lay)
    prefill("offer", name, "req-r", [1], 1)
    kv = lay.allocate(2)
    t = make_transport("tcp", kv, lay, TransferConfig())
    assert t.sink.release(KVHandle.from_dict(handle(addr, "req-r", [1], lay, "tcp"))) is True
    assert prefill("poll", name) == ["req-r"]
    assert prefill("state", name)[2]["withdrawn"] == 1
    t.close()


@pytest.mark.parametrize("kind", KINDS)
def test_pull_async_from_this_process(peers, kind):
    prefill, _ = peers
    lay = layout("bfloat16")
    name, addr = open_pair(peers, kind, lay)
    prefill("offer", name, "req-a", [5, 6, 7], 21)
    from tandem.transfer import allocate_kv
    kv = allocate_kv(lay, NUM_BLOCKS, kind)
    t = make_transport(kind, kv, lay, TransferConfig())
    try:
        fut = t.sink.pull_async(KVHandle.from_dict(handle(addr, "req-a", [5, 6, 7], lay, kind)), [9, 10, 11])
        assert fut.result(timeout=60) is None
        assert as_bytes(kv[[9, 10, 11]]) == as_bytes(pattern(lay, 21, 3))
        assert prefill("poll", name) == ["req-a"]
        bad = t.sink.pull_async(KVHandle.from_dict(handle(addr, "req-a", [5, 6, 7], lay, kind)), [0, 1, 2])
        with pytest.raises(UnknownTransfer):
            bad.result(timeout=60)
    finally:
        t.close()


def test_a_source_behind_a_relay_advertises_the_relay_and_binds_its_own_address():
    """advertise_host: KV handles name where decode workers reach the source (a relay, a NAT),
    while its control server binds `host`."""
    lay = layout()
    t = make_transport("tcp", lay.allocate(4), lay,
                       TransferConfig(host="127.0.0.1", advertise_host="10.0.0.9", port=0))
    t.source.start()
    try:
        host, port = t.source.address.rsplit(":", 1)
        assert host == "10.0.0.9" and int(port) > 0
        assert t.source._listener.getsockname()[0] == "127.0.0.1"
    finally:
        t.close()
