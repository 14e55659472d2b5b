"""`tandem bench topology`: the same workload against each serving configuration, one report.

For every configuration (colocated N workers, or P prefill + D decode workers) and, when it
has more than one worker, every routing policy: start `tandem up` as a child process group on
the same port and cores, wait for GET /health and one successful request, run the
workload exactly as `tandem bench serve` does, stop the group (SIGINT as Ctrl-C, then SIGTERM,
then SIGKILL), and go on. The comparison table and a combined CDF plot go to <out>/.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import httpx

import tandem
from tandem.bench.compare import compare_table
from tandem.bench.metrics import summarize
from tandem.bench.plots import plot_cdfs
from tandem.bench.sample import RequestSample
from tandem.bench.serve import BenchConfig, plots_available, run_bench_sync
from tandem.launcher.cluster import READY_LINE


@dataclass(frozen=True)
class ServingConfig:
    label: str                  # e.g. "colocated-2", "pd-1-1"
    up_args: tuple[str, ...]    # flags of `tandem up` choosing the topology
    workers: int


@dataclass(frozen=True)
class TopologyConfig:
    model: str
    configs: tuple[ServingConfig, ...]
    policies: tuple[str, ...] = ()
    port: int = 8100
    ready_timeout_s: float = 600.0
    tandem_args: tuple[str, ...] = ()
    out_dir: str = "bench-results/topology"
    stop_timeout_s: float = 30.0
    launcher: tuple[str, ...] = ()  # command that takes `up ...` (default: this Python's `-m tandem`)


def parse_configs(text: str) -> tuple[ServingConfig, ...]:
    """'colocated:2,pd:1:1' -> configurations (each item colocated:N or pd:P:D)."""
    out = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        parts = item.split(":")
        try:
            if parts[0] == "colocated" and len(parts) == 2:
                n = int(parts[1])
                out.append(ServingConfig(f"colocated-{n}", ("--colocated", str(n)), n))
                continue
            if parts[0] == "pd" and len(parts) == 3:
                p, d = int(parts[1]), int(parts[2])
                out.append(ServingConfig(f"pd-{p}-{d}", ("--prefill", str(p), "--decode", str(d)), p + d))
                continue
        except ValueError:
            pass
        raise ValueError(f"bad configuration {item!r}: use colocated:N or pd:P:D")
    if not out:
        raise ValueError("--configs names no configuration")
    return tuple(out)


def runs_of(cfg: TopologyConfig) -> list[tuple[str, ServingConfig, str | None]]:
    """(label, configuration, policy) for every run; policies apply to multi-worker configurations."""
    runs = []
    for sc in cfg.configs:
        if sc.workers > 1 and cfg.policies:
            runs += [(f"{sc.label}-{p}", sc, p) for p in cfg.policies]
        else:
            runs.append((sc.label, sc, None))
    return runs


def tandem_command() -> list[str]:
    return [sys.executable, "-m", "tandem"]


def up_command(cfg: TopologyConfig, sc: ServingConfig, policy: str | None) -> list[str]:
    cmd = [*(cfg.launcher or tandem_command()), "up", "--model", cfg.model, *sc.up_args, "--port", str(cfg.port)]
    if policy:
        cmd += ["--policy", policy]
    return cmd + list(cfg.tandem_args)


def _log_tail(path: Path, n: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def wait_ready(url: str, proc: subprocess.Popen, timeout_s: float, log: Path) -> None:
    """Until `tandem up` says the cluster is ready (every worker healthy), then one successful
    completion. The gateway's /health answers 200 as soon as one worker is: a workload started
    then sent its first sessions all to that worker (colocated:3, 1.4 s before the others)."""
    deadline = time.monotonic() + timeout_s
    done = 0
    with httpx.Client(timeout=30.0) as http:
        while done < 1:
            if proc.poll() is not None:
                raise RuntimeError(f"`tandem up` exited with {proc.returncode}:\n{_log_tail(log)}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} not ready after {timeout_s:.0f} s:\n{_log_tail(log)}")
            try:
                if READY_LINE in log.read_text(errors="replace") and \
                        http.get(url + "/health").status_code == 200:
                    model = http.get(url + "/v1/models").json()["data"][0]["id"]
                    r = http.post(url + "/v1/completions",
                                  json={"model": model, "prompt": "Hello", "max_tokens": 4})
                    if r.status_code == 200:
                        done += 1
                        continue
            except (httpx.HTTPError, KeyError, IndexError, ValueError):
                pass
            time.sleep(1.0)


def stop_group(proc: subprocess.Popen, timeout_s: float) -> None:
    """Stop the process group we started: SIGINT (as Ctrl-C), then SIGTERM, then SIGKILL."""
    for sig, wait in ((signal.SIGINT, timeout_s), (signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        if proc.poll() is not None:
            break
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            continue
    try:   # children that outlived the leader
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_topology(cfg: TopologyConfig, bench_for_url: Callable[[str], BenchConfig]) -> str:
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    url = f"http://127.0.0.1:{cfg.port}"
    env = dict(os.environ)
    root = str(Path(tandem.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    results: list[tuple[str, list, object]] = []
    for label, sc, policy in runs_of(cfg):
        log = out / f"{label}.log"
        cmd = up_command(cfg, sc, policy)
        print(f"[topology] {label}: {' '.join(cmd[cmd.index('up'):])}", flush=True)
        with open(log, "wb") as logf:
            proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)
        try:
            wait_ready(url, proc, cfg.ready_timeout_s, log)
            bench = replace(bench_for_url(url), out_dir=str(out / label), label=label)
            result = run_bench_sync(bench)
        finally:
            stop_group(proc, cfg.stop_timeout_s)
        samples = [RequestSample.from_dict(s) for s in result.report["samples"]]
        results.append((label, samples, summarize(samples, bench.slo)))
    text = (f"# Topology comparison\n\nmodel: `{cfg.model}`; workload command: "
            f"`{bench.command}`\n\nRatios are against the first column.\n\n"
            + compare_table([(label, summary) for label, _, summary in results]))
    if bench.plots and plots_available():
        plot_cdfs({label: samples for label, samples, _ in results}, out / "compare-cdf.png")
        text += "\n![CDFs](compare-cdf.png)\n"
    (out / "compare.md").write_text(text)
    return text
