"""The gateway's own cost: added latency per request, and streamed tokens relayed per CPU second.

Starts one `tandem serve` worker (pinned to --worker-core, one torch thread) and one
`tandem gateway --worker URL` (pinned to --gateway-core), then:

1. latency: --pairs rounds; in each, the same small chat request goes once straight to the
   worker and once through the gateway (in random order), as
   - non-streaming, max_tokens=1: send -> whole response read;
   - streaming, max_tokens=1: send -> first SSE chunk carrying a token (TTFT).
   Every request has the same prompt, so the worker's prefix cache is in the same state for
   both paths. Added latency = p50(gateway) - p50(direct), and the p50 of the paired differences.
2. CPU per request: --pairs sequential requests per path, the worker's and the gateway's CPU
   time (/proc/<pid>/stat) divided by the count: what the gateway computes per request, apart
   from the time it waits for a core on a shared machine.
3. relay: --streams concurrent streaming requests with max_tokens=--max-tokens (ignore_eos),
   replaced as they finish, for --relay-seconds through the gateway; the gateway's CPU time
   (utime + stime from /proc/<pid>/stat) over that window against the tokens it relayed
   (sum of usage.completion_tokens of requests that finished in the window) and the SSE chunks.
   The same load straight to the worker gives the worker's own rate for reference.
Both processes are stopped at the end (SIGINT, then SIGKILL).

  python benchmarks/disagg/gateway_overhead.py --model DIR [--pairs 200] [--streams 64] \
      [--max-tokens 256] [--relay-seconds 30] [--out bench-results/gateway] [--plot PNG]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import orjson

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))   # the repo root, for `tandem`

from tandem.launcher.cluster import free_port
from tandem.http.client import ClientConfig, HTTPClient

TICKS = os.sysconf("SC_CLK_TCK")
READ_TIMEOUT_S = 600.0


def new_client() -> HTTPClient:
    """Keep-alive client; every connection a phase opened stays idle for its next request."""
    return HTTPClient(ClientConfig(connect_timeout_s=30.0, max_idle_per_origin=1 << 30))


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def start(cmd: list[str], core: int, log: Path) -> subprocess.Popen:
    full = ["taskset", "-c", str(core), sys.executable, "-m", "tandem", *cmd]
    return subprocess.Popen(full, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                            stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGINT, 15), (signal.SIGKILL, 10)):
        if proc.poll() is not None:
            return
        os.killpg(proc.pid, sig)
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            continue


def wait_ready(url: str, path: str, procs: list[subprocess.Popen], timeout_s: float = 300) -> None:
    import httpx
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(f"{p.args} exited with {p.returncode}")
        try:
            r = httpx.get(url + path, timeout=2)
            if r.status_code == 200 and (path != "/internal/workers"
                                         or all(w["healthy"] for w in r.json()["workers"])):
                return
        except (httpx.HTTPError, ValueError, KeyError):
            pass
        time.sleep(0.3)
    raise TimeoutError(f"{url}{path} not ready")


def body(model: str, stream: bool, max_tokens: int, content: str) -> bytes:
    b = {"model": model, "messages": [{"role": "user", "content": content}],
         "max_tokens": max_tokens, "temperature": 0.0, "stream": stream, "ignore_eos": True}
    if stream:
        b["stream_options"] = {"include_usage": True}
    return orjson.dumps(b)


async def one(http: HTTPClient, url: str, payload: bytes,
              stream: bool) -> tuple[float, float, int, int]:
    """(first token s, total s, completion tokens, SSE chunks with a token) of one request."""
    t0 = time.perf_counter()
    resp = await http.request("POST", url, "/v1/chat/completions", payload, READ_TIMEOUT_S)
    first, tokens, chunks, buf = None, 0, 0, b""
    try:
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {(await resp.read())[:200]!r}")
        if not stream:
            d = orjson.loads(await resp.read())
            t = time.perf_counter() - t0
            return t, t, d["usage"]["completion_tokens"], 1
        while (data := await resp.next_chunk()) is not None:
            buf += data
            *events, buf = buf.split(b"\n\n")
            for ev in events:
                if not ev.startswith(b"data: ") or ev == b"data: [DONE]":
                    continue
                d = orjson.loads(ev[6:])
                if d.get("choices") and d["choices"][0]["delta"].get("content") is not None:
                    chunks += 1
                    if first is None:
                        first = time.perf_counter() - t0
                if d.get("usage"):
                    tokens = d["usage"]["completion_tokens"]
        return (first if first is not None else float("nan")), time.perf_counter() - t0, tokens, chunks
    finally:
        resp.release()


async def latency_phase(direct: str, gateway: str, model: str, pairs: int, seed: int) -> dict:
    http, urls = new_client(), {"direct": direct, "gateway": gateway}
    prompt = "Say one word about the weather in the city today please."
    payloads = {False: body(model, False, 1, prompt), True: body(model, True, 1, prompt)}
    rng = random.Random(seed)
    out = {k: {"nonstream": [], "stream_ttft": []} for k in urls}
    for url in urls.values():   # warm-up: connections, caches, JIT-free but first-request costs
        for s in (False, True):
            for _ in range(5):
                await one(http, url, payloads[s], s)
    for _ in range(pairs):
        order = list(urls)
        rng.shuffle(order)
        for name in order:
            t, _, _, _ = await one(http, urls[name], payloads[False], False)
            out[name]["nonstream"].append(t)
            t, _, _, _ = await one(http, urls[name], payloads[True], True)
            out[name]["stream_ttft"].append(t)
    await http.aclose()
    return out


async def cpu_phase(direct: str, gateway: str, model: str, n: int, pids: dict[str, int]) -> dict:
    """CPU seconds per request of each process, `n` sequential requests per path (non-streaming,
    then streaming): separates what the gateway computes from time spent waiting for a core."""
    prompt = "Say one word about the weather in the city today please."
    out = {}
    for name, url in (("direct", direct), ("gateway", gateway)):
        http = new_client()
        for stream in (False, True):
            payload = body(model, stream, 1, prompt)
            await one(http, url, payload, stream)
            cpu0 = {k: cpu_seconds(pid) for k, pid in pids.items()}
            for _ in range(n):
                await one(http, url, payload, stream)
            key = f"{name}_{'stream' if stream else 'nonstream'}"
            out[key] = {k: 1000 * (cpu_seconds(pid) - cpu0[k]) / n for k, pid in pids.items()}
        await http.aclose()
    return out   # ms of CPU per request, per process


async def relay_phase(url: str, model: str, streams: int, max_tokens: int, seconds: float,
                      pid_of_interest: int | None) -> dict:
    http = new_client()
    payload = body(model, True, max_tokens, "Write a long story about a cache and a tree.")
    tokens = chunks = requests = 0
    deadline = time.perf_counter() + seconds

    async def loop() -> None:
        nonlocal tokens, chunks, requests
        while time.perf_counter() < deadline:
            _, _, t, c = await one(http, url, payload, True)
            tokens, chunks, requests = tokens + t, chunks + c, requests + 1

    cpu0 = cpu_seconds(pid_of_interest) if pid_of_interest else 0.0
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    await asyncio.gather(*(loop() for _ in range(streams)))
    wall = time.perf_counter() - t0
    cpu = (cpu_seconds(pid_of_interest) - cpu0) if pid_of_interest else None
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    await http.aclose()
    client_cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    return {"wall_s": wall, "tokens": tokens, "chunks": chunks, "requests": requests,
            "tokens_per_s": tokens / wall, "gateway_cpu_s": cpu,
            "tokens_per_gateway_cpu_s": (tokens / cpu) if cpu else None,
            "chunks_per_gateway_cpu_s": (chunks / cpu) if cpu else None,
            "client_cpu_s": client_cpu}


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q))


def plot(lat: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, key, title in ((axes[0], "nonstream", "non-streaming, max_tokens=1: latency"),
                           (axes[1], "stream_ttft", "streaming, max_tokens=1: TTFT")):
        for name in ("direct", "gateway"):
            x = np.sort(np.asarray(lat[name][key])) * 1000
            ax.plot(x, np.arange(1, x.size + 1) / x.size, label=name)
        ax.set_title(title)
        ax.set_xlabel("ms")
        ax.set_ylabel("fraction of requests")
        ax.grid(alpha=0.3)
        ax.axhline(0.5, color="grey", lw=0.5, ls="--")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--policy", default="default")
    p.add_argument("--pairs", type=int, default=200)
    p.add_argument("--streams", type=int, default=64)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--relay-seconds", type=float, default=30.0)
    p.add_argument("--worker-core", type=int, default=0)
    p.add_argument("--gateway-core", type=int, default=1)
    p.add_argument("--worker-arg", action="append", default=[], help="write --worker-arg=--flag=v")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="bench-results/gateway")
    p.add_argument("--plot")
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    wport = free_port()
    gport = free_port(avoid={wport})
    direct, gateway = f"http://127.0.0.1:{wport}", f"http://127.0.0.1:{gport}"
    wcmd = ["serve", "--model", a.model, "--port", str(wport), "--threads", "1", "--log-level", "warning",
            *a.worker_arg]
    gcmd = ["gateway", "--model", a.model, "--port", str(gport), "--worker", direct, "--policy", a.policy,
            "--log-level", "warning"]
    meta = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": shlex.join([sys.executable, *sys.argv]),
            "worker": f"taskset -c {a.worker_core} tandem {shlex.join(wcmd)}",
            "gateway": f"taskset -c {a.gateway_core} tandem {shlex.join(gcmd)}",
            "load_before": Path("/proc/loadavg").read_text().split()[:3]}
    worker = start(wcmd, a.worker_core, out / "worker.log")
    gw = None
    try:
        wait_ready(direct, "/health", [worker])
        gw = start(gcmd, a.gateway_core, out / "gateway.log")
        wait_ready(gateway, "/internal/workers", [worker, gw])
        import httpx
        model = httpx.get(direct + "/v1/models").json()["data"][0]["id"]
        lat = asyncio.run(latency_phase(direct, gateway, model, a.pairs, a.seed))
        res: dict = {"latency_ms": {}}
        for key in ("nonstream", "stream_ttft"):
            d, g = lat["direct"][key], lat["gateway"][key]
            diffs = [y - x for x, y in zip(d, g)]
            res["latency_ms"][key] = {
                "direct_p50": 1000 * pct(d, 50), "gateway_p50": 1000 * pct(g, 50),
                "direct_p90": 1000 * pct(d, 90), "gateway_p90": 1000 * pct(g, 90),
                "added_p50": 1000 * (pct(g, 50) - pct(d, 50)), "paired_diff_p50": 1000 * pct(diffs, 50)}
        res["cpu_ms_per_request"] = asyncio.run(cpu_phase(
            direct, gateway, model, a.pairs, {"worker": worker.pid, "gateway": gw.pid}))
        gw_cpu0 = cpu_seconds(gw.pid)
        res["relay_gateway"] = asyncio.run(relay_phase(gateway, model, a.streams, a.max_tokens,
                                                       a.relay_seconds, gw.pid))
        res["relay_direct"] = asyncio.run(relay_phase(direct, model, a.streams, a.max_tokens,
                                                      a.relay_seconds, None))
        res["gateway_cpu_during_direct_s"] = cpu_seconds(gw.pid) - gw_cpu0 - res["relay_gateway"]["gateway_cpu_s"]
        meta["load_after"] = Path("/proc/loadavg").read_text().split()[:3]
        (out / "gateway_overhead.json").write_text(json.dumps({"meta": meta, "results": res, "samples": lat}))
        print(json.dumps({"meta": meta, "results": res}, indent=2))
        if a.plot:
            plot(lat, a.plot)
            print(f"plot: {a.plot}")
    finally:
        if gw is not None:
            stop(gw)
        stop(worker)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
