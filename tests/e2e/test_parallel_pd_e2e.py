"""Disaggregated serving between parallel workers, as processes behind a gateway: a prefill worker
with --tensor-parallel-size 2 hands a dense model's KV to a decode worker with
--tensor-parallel-size 2 (tcp), and to a one-process decode worker (shm); the text equals one
process's, and no block stays held on any worker."""

from __future__ import annotations

import pytest

from tandem.launcher.cluster import LocalCluster, ProcSpec, free_port, gateway_proc, worker_proc
from tests.e2e.test_gateway_e2e import (CORES, GATEWAY_ARGS, PROMPT, WORKER_ARGS, assert_no_blocks_held,
                                        complete, running, text_of, url)

pytestmark = pytest.mark.timeout(300)


def _cluster(model: str) -> LocalCluster:
    workers = [("w0", "prefill", ("--tensor-parallel-size", "2", "--kv-transport", "tcp")),
               ("w1", "decode", ("--tensor-parallel-size", "2", "--kv-transport", "tcp")),
               ("w2", "both", ()),
               ("w3", "prefill", ("--tensor-parallel-size", "2", "--kv-transport", "shm")),
               ("w4", "decode", ("--kv-transport", "shm"))]
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
