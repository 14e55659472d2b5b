"""Disaggregated serving between parallel workers, as processes behind a gateway: a prefill worker
with --tensor-parallel-size 2 hands a dense model's KV to a decode worker with
--tensor-parallel-size 2 (tcp), and to a one-process decode worker (shm); the text equals one
process's, and no block stays held on any worker. A parallel worker whose rank dies goes down by
itself while the gateway serves every request on the other worker."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tandem.launcher.cluster import LocalCluster, ProcSpec, free_port, gateway_proc, worker_proc
from tests.e2e.test_gateway_e2e import (CORES, GATEWAY_ARGS, PROMPT, WORKER_ARGS, assert_no_blocks_held,
                                        complete, running, text_of, url)

pytestmark = pytest.mark.timeout(300)


def _cluster(model: str) -> LocalCluster:
    workers = [("w0", "prefill", ("--tensor-parallel-size", "2", "--kv-transport", "tcp")),
               ("w1", "decode", ("--tensor-parallel-size", "2", "--kv-transport", "tcp")),
               ("w2", "both", ()),
               ("w3", "prefill", ("--tensor-parallel-size", "2", "--kv-transport", "shm", "--device", "cpu")),
               ("w4", "decode", ("--kv-transport", "shm", "--device", "cpu"))]   # shm: host-memory KV
    taken: set[int] = set()
    procs: list[ProcSpec] = []
    for i, (name, role, extra) in enumerate(workers):
        port = free_port(avoid=taken)
        taken.add(port)
        procs.append(worker_proc(name, model, role, "127.0.0.1", port, (CORES[i % len(CORES)],),
                                 WORKER_ARGS + extra, "warning"))
    for name, idx in (("g22", [0, 1]), ("g21", [3, 4])):
        port = free_port(avoid=taken)
        taken.add(port)
        g = gateway_proc(model, "127.0.0.1", port, [procs[i] for i in idx], "default", GATEWAY_ARGS)
        procs.append(ProcSpec(name, g.cmd, g.url, None))
    return LocalCluster(procs)


def test_tp2_prefill_hands_over_to_tp2_and_tp1_decode_workers(llama_dir):
    c = _cluster(str(llama_dir))
    with running(c):
        for prompt in (PROMPT, "x" * 37 + " tail"):
            one = text_of(complete(url(c, "w2"), prompt, 32))
            for gateway, pair in (("g22", ("w0", "w1")), ("g21", ("w3", "w4"))):
                r = complete(url(c, gateway), prompt, 32)
                assert (r.headers["x-tandem-prefill"], r.headers["x-tandem-decode"]) \
                    == (url(c, pair[0]), url(c, pair[1]))
                assert text_of(r) == one
        assert_no_blocks_held(c)


def _rank_children(pid: int) -> list[int]:
    """The worker's rank processes (multiprocessing spawn children, not its resource tracker)."""
    out = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            for child in f.read().split():
                with open(f"/proc/{child}/cmdline", "rb") as cmd:
                    argv = cmd.read().replace(b"\0", b" ")
                if b"spawn_main" in argv and b"resource_tracker" not in argv:
                    out.append(int(child))
    return out


def test_a_dead_rank_takes_its_worker_down_and_the_gateway_routes_around_it(llama_dir):
    """SIGKILL of a TP 2 worker's second rank: the worker exits by itself (no hang on a
    collective), and every request sent through the gateway meanwhile and after is answered 200
    by the other worker with the same greedy text."""
    model = str(llama_dir)
    taken: set[int] = set()
    procs: list[ProcSpec] = []
    for i, extra in enumerate((("--tensor-parallel-size", "2"), ())):
        port = free_port(avoid=taken)
        taken.add(port)
        procs.append(worker_proc(f"w{i}", model, "both", "127.0.0.1", port, (CORES[i % len(CORES)],),
                                 WORKER_ARGS + extra, "warning"))
    port = free_port(avoid=taken)
    g = gateway_proc(model, "127.0.0.1", port, procs, "round_robin", GATEWAY_ARGS)
    c = LocalCluster([*procs, ProcSpec("g", g.cmd, g.url, None)])
    with running(c):
        want = text_of(complete(url(c, "w1"), PROMPT, 16))
        served = {complete(url(c, "g"), PROMPT, 16).headers["x-tandem-decode"] for _ in range(2)}
        assert served == {url(c, "w0"), url(c, "w1")}       # both take traffic before the death
        (rank1,) = _rank_children(c.running["w0"].pid)
        os.kill(rank1, signal.SIGKILL)
        deadline = time.monotonic() + 60
        answers = []
        while "w0" not in c.exited() and time.monotonic() < deadline:
            answers.append(complete(url(c, "g"), PROMPT, 16))   # 200 asserted inside
        assert "w0" in c.exited(), "the worker outlived its dead rank"
        answers += [complete(url(c, "g"), PROMPT, 16) for _ in range(4)]
        assert all(text_of(r) == want for r in answers)
        assert {r.headers["x-tandem-decode"] for r in answers[-4:]} == {url(c, "w1")}
        c.forget("w0")
        assert_no_blocks_held(c)
