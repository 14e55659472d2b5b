"""The gateway's added latency per request with accounts, rate limits and the usage ledger on,
against off (issue 30, item 6): p50 and p99 side by side.

Starts one `tandem serve` worker (pinned to --worker-core, one torch thread) and four gateways
over it, all pinned to --gateway-core (only one serves at a time):
- off:    no API keys, --no-usage-ledger: nothing metered (the gateway before metering);
- ledger: no keys, the usage ledger on (one store call per request, at its end);
- keys:   --api-key (one tenant per key), --rate-limits with limits that never refuse (one
          store call at admission too), --pricing, the ledger on;
- on:     the same with real accounts: --accounts, one account and its `ai:run` token made
          with `tandem accounts create` / `token-create` on the gateway's database before it
          starts, requests authenticated by that token (resolved through the gateway's token
          cache, --token-cache-ttl, 5 s by default), the limits a rule of that account.
Each keeps its queue (and so its rate limits, ledger and accounts) in its own SQLite file, or
with --queue-url redis://...|postgresql://... all four share that database. Then --rounds rounds;
in each, the four gateways and the worker itself (direct, the reference) are taken in random
order, and each is sent the same small chat request
- non-streaming, max_tokens=1: send -> whole response read;
- streaming, max_tokens=1: send -> first SSE chunk carrying a token (TTFT).
Reported per path: p50 and p99 (ms), and each gateway's added latency over `off` (p50 and p99 of
the paired differences within a round). Requests are sequential, so the figures are latencies,
not throughput. Every process is stopped at the end. At the end `on`'s ledger, read with the
account's token, must hold every request sent to `on` exactly once, and `on` must refuse a
request without a token (401): the script fails otherwise. --smoke: 3 rounds and one warm-up
request per path unless --rounds says otherwise (a check that it runs, no figures).

  python benchmarks/usage_overhead.py --model DIR [--rounds 300] [--queue-url URL] \
      [--worker-core 0] [--gateway-core 1] [--out bench-results/usage] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import os
import shlex
import subprocess
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
CONFIGS = ("off", "ledger", "keys", "on")
METERED = ("ledger", "keys", "on")   # compared with off, paired within a round
NEVER = {"requests_per_minute": 1_000_000, "input_tokens_per_minute": 1_000_000_000,
         "output_tokens_per_minute": 1_000_000_000}   # limits that never refuse


def limits(account: str) -> dict:
    """A rule per tenant (the API key's and the account's), so both gateways find a specific one."""
    return {"reserve_output_tokens": 16,
            "default": {**NEVER, "batch": {"requests_per_minute": 1_000_000}},
            "limits": [{"account": "key-0", **NEVER}, {"account": account, **NEVER}]}


PRICES = {"default": {"input": 0.5, "cached_input": 0.05, "output": 1.5}}


def store_args(name: str, out: Path, queue_url: str | None) -> list[str]:
    return ["--queue-url", queue_url] if queue_url else ["--queue-db", str(out / f"{name}.db")]


def gateway_args(name: str, out: Path, queue_url: str | None) -> list[str]:
    store = store_args(name, out, queue_url)
    if name == "off":
        return [*store, "--no-usage-ledger"]
    if name == "ledger":
        return store
    metered = ["--rate-limits", str(out / "limits.json"), "--pricing", str(out / "prices.json")]
    if name == "keys":
        return [*store, "--api-key", KEY, *metered]
    return [*store, "--accounts", *metered]


def tandem_cli(*argv: str) -> str:
    """Run `tandem ARGV` to its end -> its stdout (stripped); a failure stops the benchmark."""
    done = subprocess.run([sys.executable, "-m", "tandem", *argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    if done.returncode != 0:
        raise RuntimeError(f"tandem {shlex.join(argv)}: exit {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout.strip()


def make_account(out: Path, queue_url: str | None, account: str) -> str:
    """The `on` gateway's account and its ai:run token, as an operator makes them -> the token."""
    where = store_args("on", out, queue_url)
    tandem_cli("accounts", "create", "usage-bench", "--id", account, *where)
    return tandem_cli("accounts", "token-create", account, "--name", "usage-bench",
                      "--scope", "ai:run", *where)


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


async def latency_phase(urls: dict[str, str], model: str, rounds: int, seed: int,
                        headers: dict[str, dict], warmup: int) -> dict:
    http = new_client()
    payloads = {s: body(model, s, 1, PROMPT) for s in (False, True)}
    rng = random.Random(seed)
    out = {name: {"nonstream": [], "stream_ttft": []} for name in urls}
    for name, url in urls.items():   # warm-up: connections, the stores' first transactions
        for s in (False, True):
            for _ in range(warmup):
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
        for name in METERED:
            diffs = [y - x for x, y in zip(lat["off"][key], lat[name][key])]
            row[f"{name}_minus_off"] = {"p50_ms": 1000 * pct(diffs, 50), "p99_ms": 1000 * pct(diffs, 99)}
        res[key] = row
    return res


def table(res: dict) -> str:
    lines = ["| path | non-streaming p50 | p99 | streaming TTFT p50 | p99 |", "|---|---:|---:|---:|---:|"]
    for name in ("direct", *CONFIGS, *(f"{m}_minus_off" for m in METERED)):
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
    p.add_argument("--smoke", action="store_true",
                   help="a check that it runs: 3 rounds (unless --rounds), one warm-up request per path")
    a = p.parse_args()
    rounds = 3 if a.smoke and "--rounds" not in sys.argv else a.rounds
    warmup = 1 if a.smoke else 5
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    account = f"acct-usage-bench-{int(time.time())}"   # new per run: a shared --queue-url keeps old ones
    (out / "limits.json").write_text(json.dumps(limits(account)))
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
            "load_before": Path("/proc/loadavg").read_text().split()[:3],
            "rounds": rounds, "warmup": warmup, "account": account}
    procs = []
    try:
        token = make_account(out, a.queue_url, account)
        headers = {"off": {}, "ledger": {}, "direct": {}, "keys": {"Authorization": f"Bearer {KEY}"},
                   "on": {"Authorization": f"Bearer {token}"}}
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
        lat = asyncio.run(latency_phase(urls, model, rounds, a.seed, headers, warmup))
        res = summary(lat)
        res["gateway_cpu_ms_per_request"] = {
            name: 1000 * (cpu_seconds(proc.pid) - cpu0[name]) / (2 * rounds)
            for name, proc in zip(CONFIGS, procs[1:])}
        sent = 2 * (rounds + warmup)   # to each gateway: warm-up and rounds, both kinds
        for name, tenant in (("keys", "key-0"), ("on", account)):
            ledger = httpx.get(urls[name] + f"/client/v4/accounts/{tenant}/ai/usage",
                               headers=headers[name]).json()["result"]["totals"]
            res[f"{name}_ledger_requests"] = ledger["requests"]
            if ledger["requests"] != sent:   # every request recorded once, under its tenant
                raise RuntimeError(f"{name}: the ledger holds {ledger['requests']} requests, {sent} sent")
        refused = httpx.post(urls["on"] + "/v1/chat/completions", content=body(model, False, 1, PROMPT),
                             headers={"content-type": "application/json"}).status_code
        if refused != 401:   # `on` really authenticates
            raise RuntimeError(f"on answered {refused} to a request without a token")
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
