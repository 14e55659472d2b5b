"""The gateway's added latency per request with accounts, rate limits and the usage ledger on,
against off (issue 30, item 6): p50 and p99 side by side.

Starts one `tandem serve` worker (pinned to --worker-core, one torch thread) and three gateways
over it, all pinned to --gateway-core (only one serves at a time):
- off:    no API keys, --no-usage-ledger: nothing metered (the gateway before metering);
- ledger: no keys, the usage ledger on (one store call per request, at its end);
- on:     --api-key (one tenant per key), --rate-limits with limits that never refuse (one
          store call at admission too), --pricing, the ledger on.
Each keeps its queue (and so its rate limits and ledger) in its own SQLite file, or with
--queue-url redis://...|postgresql://... all three share that database. Then --rounds rounds;
in each, the three gateways and the worker itself (direct, the reference) are taken in random
order, and each is sent the same small chat request
- non-streaming, max_tokens=1: send -> whole response read;
- streaming, max_tokens=1: send -> first SSE chunk carrying a token (TTFT).
Reported per path: p50 and p99 (ms), and each gateway's added latency over `off` (p50 and p99 of
the paired differences within a round). Requests are sequential, so the figures are latencies,
not throughput. Every process is stopped at the end.

  python benchmarks/usage_overhead.py --model DIR [--rounds 300] [--queue-url URL] \
      [--worker-core 0] [--gateway-core 1] [--out bench-results/usage]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))                          # `tandem`
sys.path.insert(0, str(ROOT / "benchmarks" / "disagg"))   # the gateway benchmark's helpers

from gateway_overhead import body, cpu_seconds, new_client, pct, start, stop, wait_ready  # noqa: E402

from tandem.launcher.cluster import free_port  # noqa: E402

KEY = "sk-bench-usage"
PROMPT = "Say one word about the weather in the city today please."
CONFIGS = ("off", "ledger", "on")
LIMITS = {"reserve_output_tokens": 16,
          "default": {"requests_per_minute": 1_000_000, "input_tokens_per_minute": 1_000_000_000,
                      "output_tokens_per_minute": 1_000_000_000,
                      "batch": {"requests_per_minute": 1_000_000}},
          "limits": [{"account": "key-0", "requests_per_minute": 1_000_000,
                      "input_tokens_per_minute": 1_000_000_000,
                      "output_tokens_per_minute": 1_000_000_000}]}
PRICES = {"default": {"input": 0.5, "cached_input": 0.05, "output": 1.5}}


def gateway_args(name: str, out: Path, queue_url: str | None) -> list[str]:
    store = ["--queue-url", queue_url] if queue_url else ["--queue-db", str(out / f"{name}.db")]
    if name == "off":
        return [*store, "--no-usage-ledger"]
    if name == "ledger":
        return store
    return [*store, "--api-key", KEY, "--rate-limits", str(out / "limits.json"),
            "--pricing", str(out / "prices.json")]


async def one(http, url: str, payload: bytes, stream: bool, headers: dict) -> float:
    """Seconds to the whole response (non-streaming) or to the first token (streaming)."""
    t0 = time.perf_counter()
    resp = await http.request("POST", url, "/v1/chat/completions", payload, 600.0, headers)
    try:
        if resp.status != 200:
            raise RuntimeError(f"{url}: HTTP {resp.status}: {(await resp.read())[:300]!r}")
        if not stream:
            await resp.read()
            return time.perf_counter() - t0
        first, buf = None, b""
        while (data := await resp.next_chunk()) is not None:
            buf += data
            if first is None and b'"content":' in buf:
                first = time.perf_counter() - t0
        return first if first is not None else float("nan")
    finally:
        resp.release()


async def latency_phase(urls: dict[str, str], model: str, rounds: int, seed: int) -> dict:
    http = new_client()
    payloads = {s: body(model, s, 1, PROMPT) for s in (False, True)}
    headers = {name: {"Authorization": f"Bearer {KEY}"} if name == "on" else {} for name in urls}
    rng = random.Random(seed)
    out = {name: {"nonstream": [], "stream_ttft": []} for name in urls}
    for name, url in urls.items():   # warm-up: connections, the stores' first transactions
        for s in (False, True):
            for _ in range(5):
                await one(http, url, payloads[s], s, headers[name])
    for _ in range(rounds):
        order = list(urls)
        rng.shuffle(order)
        for name in order:
            out[name]["nonstream"].append(await one(http, urls[name], payloads[False], False, headers[name]))
            out[name]["stream_ttft"].append(await one(http, urls[name], payloads[True], True, headers[name]))
    await http.aclose()
    return out


def summary(lat: dict) -> dict:
    res = {}
    for key in ("nonstream", "stream_ttft"):
        row = {}
        for name, samples in lat.items():
            row[name] = {"p50_ms": 1000 * pct(samples[key], 50), "p99_ms": 1000 * pct(samples[key], 99)}
        for name in ("ledger", "on"):
            diffs = [y - x for x, y in zip(lat["off"][key], lat[name][key])]
            row[f"{name}_minus_off"] = {"p50_ms": 1000 * pct(diffs, 50), "p99_ms": 1000 * pct(diffs, 99)}
        res[key] = row
    return res


def table(res: dict) -> str:
    lines = ["| path | non-streaming p50 | p99 | streaming TTFT p50 | p99 |", "|---|---:|---:|---:|---:|"]
    for name in ("direct", *CONFIGS, "ledger_minus_off", "on_minus_off"):
        a, b = res["nonstream"][name], res["stream_ttft"][name]
        lines.append(f"| {name} | {a['p50_ms']:.2f} ms | {a['p99_ms']:.2f} ms | "
                     f"{b['p50_ms']:.2f} ms | {b['p99_ms']:.2f} ms |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--rounds", type=int, default=300)
    p.add_argument("--queue-url", default=None, help="redis://... or postgresql://... shared by the "
                                                     "gateways (default: a SQLite file each)")
    p.add_argument("--worker-core", type=int, default=0)
    p.add_argument("--gateway-core", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="bench-results/usage")
    a = p.parse_args()
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    (out / "limits.json").write_text(json.dumps(LIMITS))
    (out / "prices.json").write_text(json.dumps(PRICES))
    taken: set[int] = set()
    ports = {}
    for name in ("direct", *CONFIGS):
        ports[name] = free_port(avoid=taken)
        taken.add(ports[name])
    urls = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
    wcmd = ["serve", "--model", a.model, "--port", str(ports["direct"]), "--threads", "1",
            "--log-level", "warning", "--no-queue"]
    gcmds = {name: ["gateway", "--model", a.model, "--port", str(ports[name]), "--worker",
                    urls["direct"], "--log-level", "warning", *gateway_args(name, out, a.queue_url)]
             for name in CONFIGS}
    meta = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": shlex.join([sys.executable, *sys.argv]),
            "worker": f"taskset -c {a.worker_core} tandem {shlex.join(wcmd)}",
            "gateways": {n: f"taskset -c {a.gateway_core} tandem {shlex.join(c)}" for n, c in gcmds.items()},
            "load_before": Path("/proc/loadavg").read_text().split()[:3]}
    procs = []
    try:
        worker = start(wcmd, a.worker_core, out / "worker.log")
        procs.append(worker)
        wait_ready(urls["direct"], "/health", procs)
        for name in CONFIGS:
            procs.append(start(gcmds[name], a.gateway_core, out / f"gateway-{name}.log"))
        for name in CONFIGS:
            wait_ready(urls[name], "/health", procs)
        import httpx
        model = httpx.get(urls["direct"] + "/v1/models").json()["data"][0]["id"]
        cpu0 = {name: cpu_seconds(proc.pid) for name, proc in zip(CONFIGS, procs[1:])}
        lat = asyncio.run(latency_phase(urls, model, a.rounds, a.seed))
        res = summary(lat)
        res["gateway_cpu_ms_per_request"] = {
            name: 1000 * (cpu_seconds(proc.pid) - cpu0[name]) / (2 * a.rounds)
            for name, proc in zip(CONFIGS, procs[1:])}
        ledger = httpx.get(urls["on"] + "/client/v4/accounts/key-0/ai/usage",
                           headers={"Authorization": f"Bearer {KEY}"}).json()["result"]["totals"]
        res["on_ledger_requests"] = ledger["requests"]   # every request of `on` recorded once
        meta["load_after"] = Path("/proc/loadavg").read_text().split()[:3]
        (out / "usage_overhead.json").write_text(json.dumps({"meta": meta, "results": res,
                                                             "samples": lat}))
        print(json.dumps({"meta": meta, "results": res}, indent=2))
        print(table(res))
    finally:
        for proc in reversed(procs):
            stop(proc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
