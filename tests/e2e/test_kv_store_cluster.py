"""`tandem up --kv-store auto` as child processes: the supervisor starts a mooncake_master, every
worker is its client, a prompt computed on one worker is a cache hit on the other, and the
master is stopped with the cluster; a master killed and started again serves again."""

from __future__ import annotations

import time

import httpx
import pytest

from tandem.launcher.cluster import ClusterSpec, LocalCluster, kv_store_proc, plan

pytestmark = pytest.mark.timeout(300)


def _complete(base: str, prompt: list[int]) -> dict:
    body = {"model": "m", "prompt": prompt, "max_tokens": 4, "temperature": 0, "ignore_eos": True}
    r = httpx.post(base + "/v1/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def test_up_with_an_auto_store_shares_prefixes_between_workers(llama_dir):
    spec = ClusterSpec(model=str(llama_dir), colocated=2, port=0, kv_store="auto",
                       worker_args=("--kv-cache-memory", "16MiB", "--dtype", "float32",
                                    "--served-model-name", "m", "--block-size", "4",
                                    "--kv-host-memory", "4MiB", "--kv-tier-no-cost-check"),
                       gateway_args=("--served-model-name", "m"))
    spec, master = kv_store_proc(spec)
    assert master is not None and master.kind == "store"
    procs = plan(spec)
    workers = [p for p in procs if p.role is not None]
    assert all(f"--kv-store={master.url}" in p.cmd for p in workers)
    cluster = LocalCluster([master, *workers])   # no gateway needed here
    try:
        cluster.start()
        cluster.wait_ready(120)
        prompt = list(range(20, 61))                 # 41 tokens: 10 full blocks before the last
        first = _complete(workers[0].url, prompt)
        assert first["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0) == 0
        # the first worker writes its blocks behind the answer (milliseconds); the second, which
        # never saw the prompt, loads them from the store (one try: a retry would hit its device)
        time.sleep(1.0)
        second = _complete(workers[1].url, prompt)
        cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert cached == 40
        assert second["choices"][0]["text"] == first["choices"][0]["text"]

        # the master killed and started again (empty, same port): the workers' store clients
        # find it again within seconds and share new prefixes through it
        cluster.kill(master.name)
        cluster.start(master.name)
        cluster.wait_ready(30)
        deadline, shared = time.monotonic() + 30, 0
        for i in range(30):
            again = [70 + (7 * i + k) % 200 for k in range(41)]   # a prefix no worker has seen
            _complete(workers[0].url, again)
            time.sleep(1.0)
            shared = _complete(workers[1].url, again)["usage"]["prompt_tokens_details"]["cached_tokens"]
            if shared == 40 or time.monotonic() > deadline:
                break
        assert shared == 40, "the store did not serve again after its master restarted"
        store = cluster.running[master.name]
    finally:
        cluster.stop()
    assert store.poll() is not None   # stopped with the cluster
