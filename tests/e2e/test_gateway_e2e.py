"""Gateway end to end: real worker processes (tiny test model, 1 thread each) behind real gateways.

Each test starts its own small cluster on free 127.0.0.1 ports and stops it; every test ends by
checking that no KV block is held on any live worker.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time

import httpx
import pytest

from tandem.launcher.cluster import LocalCluster, ProcSpec, free_port, gateway_proc, worker_proc

pytestmark = pytest.mark.timeout(300)

WORKER_ARGS = ("--kv-cache-memory", "16MiB", "--dtype", "float32", "--served-model-name", "m")
GATEWAY_ARGS = ("--poll-interval", "0.2", "--unhealthy-after", "2", "--served-model-name", "m")
CORES = sorted(os.sched_getaffinity(0))
LONG = 600  # tokens for streams that must still run when a worker is killed


def build(model: str, roles: list[str], gateways: dict[str, tuple],
          worker_args: tuple[str, ...] = ()) -> LocalCluster:
    """Workers `roles` (named w0, w1, ...; "prefill:shm" picks a KV transport) and gateways
    {name: (worker indexes, policy[, extra gateway args])}."""
    taken: set[int] = set()
    procs: list[ProcSpec] = []
    for i, spec in enumerate(roles):
        role, _, transport = spec.partition(":")
        extra = WORKER_ARGS + worker_args + (("--kv-transport", transport) if transport else ())
        if transport == "shm":    # host-memory KV: on the CPU also where --device auto would pick a GPU
            extra += ("--device", "cpu")
        port = free_port(avoid=taken)
        taken.add(port)
        procs.append(worker_proc(f"w{i}", model, role, "127.0.0.1", port, (CORES[i % len(CORES)],),
                                 extra, "warning"))
    for name, (idx, policy, *extra) in gateways.items():
        port = free_port(avoid=taken)
        taken.add(port)
        g = gateway_proc(model, "127.0.0.1", port, [procs[i] for i in idx], policy,
                         GATEWAY_ARGS + tuple(*extra))
        procs.append(ProcSpec(name, g.cmd, g.url, None))
    return LocalCluster(procs)


@contextlib.contextmanager
def running(cluster: LocalCluster):
    try:
        cluster.start()
        cluster.wait_ready(120)
        yield cluster
    finally:
        cluster.stop()


def url(cluster: LocalCluster, name: str) -> str:
    return cluster.spec(name).url


def complete(base: str, prompt: str, max_tokens: int, headers=None, **extra) -> httpx.Response:
    body = {"model": "m", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, **extra}
    r = httpx.post(base + "/v1/completions", json=body, headers=headers or {}, timeout=120)
    assert r.status_code == 200, r.text
    return r


def text_of(r: httpx.Response) -> str:
    return r.json()["choices"][0]["text"]


def stream_chunks(base: str, prompt: str, max_tokens: int, on_chunk=None):
    """(headers, text chunks, usage) of a streamed completion; on_chunk(i, text) after each."""
    body = {"model": "m", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    chunks, usage = [], None
    with httpx.stream("POST", base + "/v1/completions", json=body, timeout=120) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            assert "error" not in event, event
            if event.get("usage"):
                usage = event["usage"]
            for c in event.get("choices", []):
                if c.get("text"):
                    chunks.append(c["text"])
                    if on_chunk is not None:
                        on_chunk(len(chunks), r.headers)
        return r.headers, chunks, usage


def metric(base: str, name: str) -> float:
    total = 0.0
    for line in httpx.get(base + "/metrics", timeout=10).text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def assert_no_blocks_held(cluster: LocalCluster, timeout_s: float = 40.0) -> None:
    """Idle invariant on every live worker: all KV blocks free (cached ones are evictable)."""
    deadline = time.monotonic() + timeout_s
    for p in cluster.procs:
        if p.role is None or p.name not in cluster.running:
            continue
        while True:
            with cluster.http_client(10) as client:   # presents the cluster's secret, if any
                s = client.get(p.url + "/internal/stats").json()
            if s["num_blocks_free"] == s["num_blocks_total"] and s["num_running"] == 0 \
                    and s["num_waiting"] == 0:
                break
            assert time.monotonic() < deadline, f"{p.name} ({p.role}) still holds blocks: {s}"
            time.sleep(0.2)


def worker_name(cluster: LocalCluster, worker_url: str) -> str:
    return next(p.name for p in cluster.procs if p.url == worker_url)


PROMPT = "The quick brown fox jumps over the lazy dog. " * 3


@pytest.fixture(scope="module")
def model(llama_dir):
    return str(llama_dir)


def test_greedy_identity_one_engine_colocated_disaggregated(model):
    c = build(model, ["prefill:tcp", "decode:tcp", "both", "prefill:shm", "decode:shm"],
              {"gpd": ([0, 1], "default"), "gco": ([2], "default"), "gshm": ([3, 4], "default")})
    with running(c):
        prompts = [PROMPT, "Hello", "x" * 37 + " tail"]
        for prompt in prompts:
            one = text_of(complete(url(c, "w2"), prompt, 48))
            colocated = complete(url(c, "gco"), prompt, 48)
            pd = complete(url(c, "gpd"), prompt, 48)
            assert text_of(colocated) == one and text_of(pd) == one
            assert text_of(complete(url(c, "gshm"), prompt, 48)) == one
            assert colocated.headers["x-tandem-prefill"] == colocated.headers["x-tandem-decode"] \
                == url(c, "w2")
            assert (pd.headers["x-tandem-prefill"], pd.headers["x-tandem-decode"]) \
                == (url(c, "w0"), url(c, "w1"))
            assert pd.json()["usage"]["completion_tokens"] == 48
        # echo with logprobs: the prefill worker scores the prompt; the gateway passes it on
        scored = {name: complete(url(c, name), PROMPT, 4, echo=True, logprobs=2).json()["choices"][0]
                  for name in ("w2", "gco", "gpd", "gshm")}
        want = scored["w2"]["logprobs"]
        assert want["token_logprobs"][0] is None and len(want["tokens"]) > 4
        for name in ("gco", "gpd", "gshm"):
            got = scored[name]["logprobs"]
            assert scored[name]["text"] == scored["w2"]["text"] and got["tokens"] == want["tokens"]
            assert got["token_logprobs"][1:] == pytest.approx(want["token_logprobs"][1:], abs=1e-5)
        # streaming through the PD gateway: the first token is stitched in, same text
        headers, chunks, usage = stream_chunks(url(c, "gpd"), PROMPT, 48)
        assert "".join(chunks) == text_of(complete(url(c, "w2"), PROMPT, 48))
        assert usage["completion_tokens"] == 48 and usage["prompt_tokens"] > 0
        # the second PD request with the same prompt found it in the prefill worker's cache
        assert usage["prompt_tokens_details"]["cached_tokens"] > 0
        assert_no_blocks_held(c)


def test_local_prefill_serves_short_prompts_on_the_decode_worker(model):
    """--local-prefill-tokens: a prompt its decode worker lacks at most N tokens of is served
    whole there; longer ones still go prefill -> decode; the output is the same either way."""
    c = build(model, ["prefill", "decode", "both"],
              {"g": ([0, 1], "default", ("--local-prefill-tokens", "8"))})
    with running(c):
        g = url(c, "g")
        short = complete(g, "Hello", 24)
        assert short.json()["usage"]["prompt_tokens"] <= 8
        assert short.headers["x-tandem-prefill"] == short.headers["x-tandem-decode"] == url(c, "w1")
        assert text_of(short) == text_of(complete(url(c, "w2"), "Hello", 24))
        headers, chunks, usage = stream_chunks(g, PROMPT + " once more", 24)
        assert usage["prompt_tokens"] > 8
        assert (headers["x-tandem-prefill"], headers["x-tandem-decode"]) == (url(c, "w0"), url(c, "w1"))
        assert "".join(chunks) == text_of(complete(url(c, "w2"), PROMPT + " once more", 24))
        assert metric(g, "tandem:gateway_local_prefills_total") == 1
        assert_no_blocks_held(c)


def test_decode_worker_killed_mid_stream_client_gets_identical_output(model):
    c = build(model, ["prefill", "decode", "decode"], {"g": ([0, 1, 2], "round_robin")})
    with running(c):
        g = url(c, "g")
        expected = text_of(complete(g, PROMPT, LONG))  # round robin: served by w1
        killed: list[str] = []

        def kill_decode(n, headers):
            if n == 20 and not killed:
                name = worker_name(c, headers["x-tandem-decode"])
                c.kill(name)  # SIGKILL
                killed.append(name)

        headers, chunks, usage = stream_chunks(g, PROMPT, LONG, on_chunk=kill_decode)
        assert killed == ["w2"]
        assert "".join(chunks) == expected
        assert usage["completion_tokens"] == LONG
        assert metric(g, "tandem:gateway_migrations_total") == 1
        assert_no_blocks_held(c)


def test_client_disconnect_mid_stream_aborts_the_request_on_the_worker(model):
    # the gateway keeps worker connections alive between requests; a stream the client leaves
    # must still close its worker connection, which is what aborts the request there
    c = build(model, ["both"], {"g": ([0], "default")})
    with running(c):
        g, w = url(c, "g"), url(c, "w0")
        body = {"model": "m", "prompt": PROMPT, "max_tokens": 1500, "temperature": 0,
                "ignore_eos": True, "stream": True}
        with httpx.stream("POST", g + "/v1/completions", json=body, timeout=120) as r:
            seen = 0
            for line in r.iter_lines():
                seen += line.startswith("data: {")
                if seen == 5:
                    break   # leaving the block closes the client's connection
        assert_no_blocks_held(c)   # waits until the worker runs nothing
        finished = 'tandem:request_success_total{finished_reason="%s",model_name="m"}'
        assert metric(w, finished % "abort") == 1
        assert metric(w, finished % "length") == 0
        assert text_of(complete(g, "Hello", 4))   # the gateway serves on
        assert metric(w, finished % "length") == 1


def test_prefill_worker_killed_request_succeeds_elsewhere(model):
    # placement remote: the decode worker holds PROMPT after the first request, so the default
    # policy would serve the repeats whole there whenever the rotation offers the uncached w1
    c = build(model, ["prefill", "prefill", "decode"],
              {"g": ([0, 1, 2], "round_robin", ("--prefill-placement", "remote"))})
    with running(c):
        g = url(c, "g")
        expected = text_of(complete(g, PROMPT, 16))        # prefill on w0
        c.kill("w1")                                       # the next in rotation
        results = [complete(g, PROMPT, 16) for _ in range(3)]
        assert all(text_of(r) == expected for r in results)
        assert all(r.headers["x-tandem-prefill"] == url(c, "w0") for r in results)
        # w1 refuses connections: the gateway gave it up at the poll that found it refused (0.2 s
        # here) or at the first request that did (retried on w0): either way it is now unhealthy
        workers = httpx.get(g + "/internal/workers", timeout=10).json()["workers"]
        assert [w["healthy"] for w in workers if w["url"] == url(c, "w1")] == [False]
        assert_no_blocks_held(c)


def test_prefill_blocks_freed_at_once_when_no_decode_worker_takes_them(model):
    # a pin timeout far beyond the test's wait: only the gateway's release can free the blocks
    c = build(model, ["prefill", "decode"], {"g": ([0, 1], "round_robin")},
              worker_args=("--kv-pin-timeout", "600"))
    with running(c):
        g = url(c, "g")
        complete(g, PROMPT, 4)
        c.kill("w1")
        body = {"model": "m", "prompt": PROMPT + "again", "max_tokens": 4, "temperature": 0}
        r = httpx.post(g + "/v1/completions", json=body, timeout=120)
        # the decode pool is gone: the prefill worker serves the request whole (the surviving pool
        # serves both roles), and the blocks it had kept for the dead decode worker are released
        # by the gateway, not by the 600 s pin timeout
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4
        assert_no_blocks_held(c, timeout_s=10)


def test_affinity_keeps_session_and_moves_it_when_worker_dies(model):
    c = build(model, ["both", "both"], {"g": ([0, 1], "default")})
    with running(c):
        g = url(c, "g")
        sessions = {}
        for s in ("alpha", "beta", "gamma", "delta"):
            served = {complete(g, f"{s}: {PROMPT}", 4, headers={"x-session-affinity": s})
                      .headers["x-tandem-decode"] for _ in range(3)}
            assert len(served) == 1, f"session {s} moved while its worker was healthy: {served}"
            sessions[s] = served.pop()
        home = sessions["alpha"]
        c.kill(worker_name(c, home))
        other = next(p.url for p in c.procs if p.role and p.url != home)
        moved = {complete(g, f"alpha: {PROMPT}", 4, headers={"x-session-affinity": "alpha"})
                 .headers["x-tandem-decode"] for _ in range(3)}
        assert moved == {other}
        assert_no_blocks_held(c)


@pytest.fixture(scope="module")
def pair(model):
    """Two role=both workers behind a token_aware gateway (gt) and a prefix_aware one (gp)."""
    c = build(model, ["both", "both"], {"gt": ([0, 1], "token_aware"), "gp": ([0, 1], "prefix_aware")})
    with running(c):
        yield c


def test_token_aware_balances_skewed_prompts(pair):
    """One stream with a long context on one worker, one with a short context on the other:
    request counts are equal (least_requests would alternate), token loads are not."""
    c, g = pair, url(pair, "gt")
    background = {"long": "Skewed load: one long agent context. " * 30,  # ~700 tokens
                  "short": "Hi"}
    placed: dict[str, str] = {}
    errors: list[BaseException] = []
    threads = []
    for kind, prompt in background.items():
        started = threading.Event()

        def run(kind=kind, prompt=prompt, started=started):
            def mark(n, headers):
                if n == 1:
                    placed[kind] = headers["x-tandem-decode"]
                    started.set()
            try:
                stream_chunks(g, prompt, 1200, on_chunk=mark)
            except BaseException as exc:  # noqa: BLE001 - reported by the test thread
                errors.append(exc)
                started.set()

        threads.append(threading.Thread(target=run))
        threads[-1].start()
        assert started.wait(60)
    try:
        shorts = [complete(g, f"{i} short", 8).headers["x-tandem-decode"] for i in range(6)]
        still_running = all(t.is_alive() for t in threads)
    finally:
        for t in threads:
            t.join(120)
    assert not errors, errors
    assert still_running, "a background stream ended before the short requests were routed"
    assert placed["long"] != placed["short"]
    assert shorts == [placed["short"]] * 6, (placed, shorts)
    assert_no_blocks_held(c)


def test_prefix_aware_sends_shared_prefix_to_holder(pair):
    c, g = pair, url(pair, "gp")
    shared = "You are an agent with these tools and this long history. " * 25  # ~300 tokens

    def workers() -> dict[str, dict]:
        return {w["url"]: w for w in httpx.get(g + "/internal/workers").json()["workers"]}

    indexed_before = {u: w["cached_blocks"] for u, w in workers().items()}
    first = complete(g, shared + " question 0", 4)
    holder = first.headers["x-tandem-decode"]
    # The gateway learns of the new blocks from the holder's KV events on its next poll, and of
    # the load of the previous test's streams, which ran through another gateway, from the
    # workers' reports. The first request's events exist once its response is back; a poll that
    # starts after that carries them: wait out two poll intervals first, so that growth seen
    # below is not only late events of the previous test's requests.
    time.sleep(3 * float(GATEWAY_ARGS[GATEWAY_ARGS.index("--poll-interval") + 1]))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        ws = workers()
        idle = all(w["inflight_prefill_tokens"] == w["inflight_decode_tokens"] == 0 for w in ws.values())
        if ws[holder]["cached_blocks"] > indexed_before[holder] and idle:
            break
        time.sleep(0.1)
    assert ws[holder]["cached_blocks"] > indexed_before[holder] and idle, (indexed_before, ws)
    for i in range(1, 5):
        r = complete(g, shared + f" question {i}", 4)
        assert r.headers["x-tandem-decode"] == holder, (i, json.dumps(workers()))
        assert r.json()["usage"]["prompt_tokens_details"]["cached_tokens"] > 200
    decisions = 'tandem:gateway_routing_decisions_total{policy="prefix_aware",pool="both",reason="prefix"}'
    assert metric(g, decisions) == 4
    assert_no_blocks_held(c)


def test_tandem_up_serves_and_one_sigint_stops_everything(model):
    import signal
    import subprocess
    import sys

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tandem.cli", "up", "--model", model, "--colocated", "2",
         "--port", str(port), "--ready-timeout", "120",
         "--worker-arg=--kv-cache-memory=16MiB", "--worker-arg=--dtype=float32"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env=dict(os.environ, TANDEM_CLUSTER_SECRET="e2e-secret"))
    lines: list[str] = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if "ready at" in line:
                break
        assert any("ready at" in ln for ln in lines), lines
        curl = next(proc.stdout).strip() or next(proc.stdout).strip()
        assert curl.startswith(f"curl http://127.0.0.1:{port}/v1/chat/completions")
        assert httpx.get(f"http://127.0.0.1:{port}/internal/workers").status_code == 401
        workers = httpx.get(f"http://127.0.0.1:{port}/internal/workers",
                            headers={"x-tandem-cluster-secret": "e2e-secret"}).json()["workers"]
        assert [w["role"] for w in workers] == ["both", "both"] and all(w["healthy"] for w in workers)
        r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=60, json={
            "model": os.path.basename(model), "messages": [{"role": "user", "content": "Hello!"}],
            "max_tokens": 8, "ignore_eos": True})   # sampled from a random model: EOS could end it early
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 8
        children = [int(x) for x in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                                                   text=True).stdout.split()]
        assert len(children) == 3  # two workers and the gateway
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
        for pid in children:
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_worker_self_registers_and_deregisters_on_shutdown(model):
    import signal

    gport, wport = free_port(), free_port()
    gateway = f"http://127.0.0.1:{gport}"
    g = gateway_proc(model, "127.0.0.1", gport, [], "default", GATEWAY_ARGS)
    w = worker_proc("w0", model, "both", "127.0.0.1", wport, (CORES[0],),
                    WORKER_ARGS + ("--gateway", gateway), "warning")
    c = LocalCluster([ProcSpec("gateway", g.cmd, g.url, None), w])
    try:
        c.start()
        deadline = time.monotonic() + 120
        while True:
            c.check_alive()
            try:
                ws = httpx.get(gateway + "/internal/workers", timeout=5).json()["workers"]
                if ws and ws[0]["healthy"]:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "worker never registered"
            time.sleep(0.2)
        assert ws[0]["url"] == w.url and ws[0]["static"] is False
        r = complete(gateway, PROMPT, 4)
        assert r.headers["x-tandem-decode"] == w.url
        c.kill("w0", signal.SIGTERM)  # graceful: deregisters before the engine stops
        assert httpx.get(gateway + "/internal/workers", timeout=5).json()["workers"] == []
        r = httpx.post(gateway + "/v1/completions", json={"model": "m", "prompt": "x", "max_tokens": 2})
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
    finally:
        c.stop()
