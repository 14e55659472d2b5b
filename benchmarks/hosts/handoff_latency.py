"""KV handoff time between two hosts as latency is added to the path between them (issue 34,
item 4). Needs root (network namespaces, tandem/testing/netns.py).

Hosts: a gateway, a prefill worker p0, a decode worker d0, and a relay host on the KV path
(tandem/testing/relay.py): p0 advertises the relay's address, so every pull of d0 crosses it and
each byte arrives --delays ms later in each direction. `direct` is the same cluster with p0
advertising itself (no relay): the baseline.

Per setting: --warmup requests, then --requests streamed completions with distinct prompts of
--prompt-tokens (so d0 holds none of the prompt and pulls it whole), max_tokens=2, the built-in
tcp transport. Per request:
- handoff = second output chunk - first output chunk, as the client sees it: the gateway has the
  prefill's first token and KV handle, sends the decode call, d0 pulls the KV (a read and its
  reply with the blocks, a confirm and its reply: two round trips over the relay) and decodes
  one step;
- TTFT (send -> first chunk) and E2E.
The relay delays bytes; it does not reproduce TCP's window growth over a real long-RTT link (each
of its two connections has the bridge's sub-millisecond RTT), so these are the protocol's round
trips: a lower bound for a real link of that latency.

  sudo PYTHONPATH=. .venv/bin/python benchmarks/hosts/handoff_latency.py [--model models/tandem-demo-target] \
      [--delays 0,20,100] [--prompt-tokens 1024] [--requests 20] [--out bench-results/handoff-latency]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from tandem.testing.hosts import KV_PORT, HostCluster
from tandem.testing.netns import Network

REPO = Path(__file__).resolve().parents[2]


def prompt(seed: int, n: int, vocab: int) -> list[int]:
    return [3 + (seed * 7919 + i * 31) % (vocab - 4) for i in range(n)]


def one(url: str, ids: list[int]) -> dict:
    body = {"model": "m", "prompt": ids, "max_tokens": 2, "temperature": 0, "ignore_eos": True,
            "stream": True}
    t0 = time.perf_counter()
    times = []
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=120) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line.startswith("data: {") and json.loads(line[6:]).get("choices"):
                times.append(time.perf_counter())   # one event per token here (max_tokens 2)
    end = time.perf_counter()
    if len(times) < 2:
        raise RuntimeError(f"expected two output chunks, got {len(times)}")
    return {"ttft_s": times[0] - t0, "handoff_s": times[1] - times[0], "e2e_s": end - t0}


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def run_setting(net, cluster, hosts, label: str, delay_ms: float | None, args, vocab: int, seed0: int) -> dict:
    """(Re)start p0 advertising itself (delay None) or the relay with `delay_ms`, then measure."""
    p0, relay = hosts["p0"], hosts["relay"]
    for name in ("p0", "relay"):
        if name in cluster.procs and cluster.procs[name].alive():
            cluster.stop(name)
    extra = ["--kv-pin-timeout", "30"]
    if delay_ms is not None:
        cluster.relay("relay", relay, KV_PORT, (p0.addr, KV_PORT), delay_ms=delay_ms)
        extra += ["--kv-bind-host", p0.addr, "--kv-advertise-host", relay.addr]
    cluster.worker("p0", p0, "prefill", extra=[*extra, *args.worker_arg])
    cluster.wait_ready(180)
    gw = cluster.url("gw0")
    rows = []
    for i in range(args.warmup + args.requests):
        r = one(gw, prompt(seed0 + i, args.prompt_tokens, vocab))
        if i >= args.warmup:
            rows.append(r)
    log = cluster.procs["d0"].tail(1_000_000)
    failed = log.count("KV load for")
    out = {"setting": label, "delay_ms": delay_ms, "requests": len(rows), "failed_pulls_total": failed}
    for k in ("handoff_s", "ttft_s", "e2e_s"):
        xs = [r[k] for r in rows]
        out[k] = {"p50": pct(xs, 0.5), "p90": pct(xs, 0.9), "mean": statistics.fmean(xs),
                  "min": min(xs), "max": max(xs)}
    out["raw"] = rows
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=str(REPO / "models" / "tandem-demo-target"))
    p.add_argument("--delays", default="0,20,100", help="ms added each way on the KV path")
    p.add_argument("--prompt-tokens", type=int, default=1024)
    p.add_argument("--requests", type=int, default=20)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--worker-arg", action="append", default=[], help="extra tandem serve argument")
    p.add_argument("--out", default="bench-results/handoff-latency")
    args = p.parse_args()
    vocab = json.loads((Path(args.model) / "config.json").read_text())["vocab_size"]
    delays = [float(d) for d in args.delays.split(",")]
    results = []
    with tempfile.TemporaryDirectory(prefix="handoff-latency-") as work, Network.open() as net, \
            HostCluster(net, Path(work), args.model) as cluster:
        hosts = {n: net.add_host(n) for n in ("gw0", "p0", "d0", "relay")}
        cluster.worker("d0", hosts["d0"], "decode", extra=args.worker_arg)
        cluster.gateway("gw0", hosts["gw0"], prefill=[hosts["p0"].url(8100)], decode=[cluster.url("d0")],
                        extra=["--prefill-placement", "remote"])
        settings = [("direct", None)] + [(f"relay +{d:g} ms", d) for d in delays]
        for k, (label, delay) in enumerate(settings):
            results.append(run_setting(net, cluster, hosts, label, delay, args, vocab, 1000 * (k + 1)))
            print(f"{label}: handoff p50 {results[-1]['handoff_s']['p50'] * 1e3:.1f} ms", flush=True)
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model_name = next((ln.split(":", 1)[1].strip() for ln in cpu.splitlines() if ln.startswith("Model name")), "?")
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpu": model_name,
            "cpus": next((ln.split(":", 1)[1].strip() for ln in cpu.splitlines() if ln.startswith("CPU(s)")), "?"),
            "python": platform.python_version(), "argv": sys.argv,
            "commit": subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                                     capture_output=True, text=True).stdout.strip()}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    base = results[0]["handoff_s"]["p50"]
    print(f"\n{meta['date']}, {meta['cpu']} ({meta['cpus']} CPUs), commit {meta['commit']}")
    print("| setting | handoff p50 (ms) | p90 | vs direct (p50) | TTFT p50 (ms) | E2E p50 (ms) | failed pulls |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in results:
        h = r["handoff_s"]
        print(f"| {r['setting']} | {h['p50'] * 1e3:.1f} | {h['p90'] * 1e3:.1f} | "
              f"{h['p50'] / base:.2f}x | {r['ttft_s']['p50'] * 1e3:.1f} | {r['e2e_s']['p50'] * 1e3:.1f} | "
              f"{r['failed_pulls_total']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
