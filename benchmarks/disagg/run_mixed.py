"""Colocated vs disaggregated on the same cores: agentic sessions while other streams decode.

For each configuration, one after another on the same port and cores:
  1. `tandem up --model M <topology> [--up-arg ...] --policy P [--worker-arg ...]` in its own process group
     (each worker pinned to one core, one torch thread);
  2. two `tandem bench serve` clients at once against the gateway, both bounded by --duration:
     - "agentic": sessions with a long shared prefix (system prompt + tools) and tool results,
       short answers: these bring the prefill work;
     - "decoders": short prompts, long answers: the streams that keep decoding meanwhile;
  3. the cluster is stopped (SIGINT as Ctrl-C, then SIGTERM/SIGKILL of the group).
Then `tandem bench compare`-style tables (ratios against the first configuration) for each
client and for all streams together, and one CDF plot.

Configurations: "colocated:N" or "pd:P:D", optionally with "/budget=T" for the workers'
`--max-num-batched-tokens T` (chunked-prefill token budget), "/local=N" for the gateway's
`--local-prefill-tokens N` (disaggregated: short prompts always prefilled on the decode worker)
or "/placement=remote" for the gateway's `--prefill-placement remote` (every prompt through a
prefill worker; the default, auto, is conditional disaggregation), e.g.
  colocated:2,pd:1:1,colocated:2/budget=128,pd:1:1/local=256,pd:1:1/placement=remote

  python benchmarks/disagg/run_mixed.py --model DIR --configs colocated:2,pd:1:1 \
      --agentic-args "--agentic --sessions 12 ..." --decoders-args "--agentic --sessions 40 ..." \
      --duration 150 --out bench-results/disagg --plot docs/benchmarks/disagg_cdf.png
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))   # the repo root, for `tandem`

from tandem.bench.compare import compare_table  # noqa: E402
from tandem.bench.metrics import SLO, summarize  # noqa: E402
from tandem.bench.report import load_report  # noqa: E402
from tandem.bench.topology import stop_group, wait_ready  # noqa: E402

CLIENTS = ("agentic", "decoders")


@dataclass(frozen=True)
class Config:
    label: str
    up_args: tuple[str, ...]
    worker_args: tuple[str, ...]
    gateway_args: tuple[str, ...] = ()


def parse_configs(text: str) -> list[Config]:
    out = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        topo, _, opt = item.partition("/")
        parts = topo.split(":")
        if parts[0] == "colocated" and len(parts) == 2:
            label, up = f"colocated-{parts[1]}", ("--colocated", parts[1])
        elif parts[0] == "pd" and len(parts) == 3:
            label, up = f"pd-{parts[1]}-{parts[2]}", ("--prefill", parts[1], "--decode", parts[2])
        else:
            raise SystemExit(f"bad configuration {item!r}: "
                             f"colocated:N or pd:P:D[/budget=T|/local=N|/placement=remote]")
        wargs: tuple[str, ...] = ()
        gargs: tuple[str, ...] = ()
        if opt:
            key, _, val = opt.partition("=")
            if not ((key in ("budget", "local") and val.isdigit()) or (key, val) == ("placement", "remote")):
                raise SystemExit(f"bad option {opt!r}: budget=T (worker step budget), local=N "
                                 f"(gateway --local-prefill-tokens) or placement=remote")
            label += f"-{key}{val}" if key != "placement" else "-remote"
            if key == "budget":
                wargs = (f"--max-num-batched-tokens={val}",)
            elif key == "local":
                gargs = (f"--local-prefill-tokens={val}",)
            else:
                gargs = (f"--prefill-placement={val}",)
        out.append(Config(label, up, wargs, gargs))
    return out


def machine() -> dict:
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), "?")
    mem = next((ln.split()[1] for ln in Path("/proc/meminfo").read_text().splitlines()
                if ln.startswith("MemTotal")), "0")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    return {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "nproc": os.cpu_count(),
            "cpu": cpu, "ram_gib": round(int(mem) / 2**20, 1), "commit": commit}


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def run_config(cfg: Config, a: argparse.Namespace, out: Path) -> dict:
    url = f"http://127.0.0.1:{a.port}"
    up = [sys.executable, "-m", "tandem", "up", "--model", a.model, *cfg.up_args, *a.up_arg, "--port", str(a.port),
          "--policy", a.policy, *(f"--worker-arg={w}" for w in (*a.worker_arg, *cfg.worker_args)),
          *(f"--gateway-arg={g}" for g in cfg.gateway_args)]
    run_dir = out / cfg.label
    run_dir.mkdir(parents=True, exist_ok=True)
    log = run_dir / "up.log"
    print(f"[mixed] {cfg.label}: {shlex.join(up[1:])}", flush=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with open(log, "wb") as logf:
        proc = subprocess.Popen(up, stdout=logf, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                start_new_session=True)
    info = {"label": cfg.label, "up_command": shlex.join(["tandem", *up[3:]]), "clients": {}}
    try:
        wait_ready(url, proc, a.ready_timeout, log)
        info["load_before"] = loadavg()
        info["start"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        clients = {}
        for name, extra in zip(CLIENTS, (a.agentic_args, a.decoders_args)):
            if not extra:
                continue
            cmd = [sys.executable, "-m", "tandem", "bench", "serve", "--url", url, "--out", str(run_dir),
                   "--label", name, "--no-progress", "--duration", str(a.duration),
                   "--drain-timeout", str(a.drain_timeout), *shlex.split(extra)]
            info["clients"][name] = shlex.join(["tandem", *cmd[3:]])
            clients[name] = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=open(run_dir / f"{name}.out", "w"),
                                             stderr=subprocess.STDOUT)
        for name, c in clients.items():
            c.wait()
            print(f"[mixed] {cfg.label} {name}: exit {c.returncode}\n"
                  + (run_dir / f"{name}.out").read_text()[-600:], flush=True)
        info["load_after"] = loadavg()
    finally:
        stop_group(proc, 30.0)
    return info


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--configs", default="colocated:2,pd:1:1")
    p.add_argument("--policy", default="default")
    p.add_argument("--worker-arg", action="append", default=[], help="for every worker; write --worker-arg=--flag=v")
    p.add_argument("--up-arg", action="append", default=[],
                   help="for every configuration's `tandem up` (e.g. the planner's targets: "
                        "--up-arg=--slo-ttft-ms=6000; a colocated fleet's roles are never changed)")
    p.add_argument("--agentic-args", required=True, help="`tandem bench serve` workload flags")
    p.add_argument("--decoders-args", default="", help="`tandem bench serve` workload flags ('' = none)")
    p.add_argument("--duration", type=float, default=120.0, help="each client sends nothing after this (s)")
    p.add_argument("--drain-timeout", type=float, default=60.0)
    p.add_argument("--port", type=int, default=8150)
    p.add_argument("--ready-timeout", type=float, default=300.0)
    p.add_argument("--out", default="bench-results/disagg")
    p.add_argument("--plot", help="CDF plot of all streams per configuration (PNG)")
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"machine": machine(), "command": shlex.join([sys.executable, *sys.argv]), "runs": []}
    for cfg in parse_configs(a.configs):
        meta["runs"].append(run_config(cfg, a, out))
        (out / "meta.json").write_text(json.dumps(meta, indent=2))
    text = [f"# Mixed load: {', '.join(r['label'] for r in meta['runs'])}\n",
            f"machine: {json.dumps(meta['machine'])}\n", f"command: `{meta['command']}`\n"]
    for r in meta["runs"]:
        text.append(f"- {r['label']}: `{r['up_command']}`; load average before {r.get('load_before')}, "
                    f"after {r.get('load_after')}; start {r.get('start')}")
    samples_all: dict[str, list] = {}
    for name in (*CLIENTS, "all streams"):
        runs = []
        for r in meta["runs"]:
            names = CLIENTS if name == "all streams" else (name,)
            samples = []
            for n in names:
                path = out / r["label"] / f"{n}.json"
                if path.exists():
                    samples += load_report(path)[1]
            if samples:
                runs.append((r["label"], summarize(samples, SLO())))
                if name == "all streams":
                    samples_all[r["label"]] = samples
        if runs:
            text.append(f"\n## {name}\n\n" + compare_table(runs))
    (out / "compare.md").write_text("\n".join(text) + "\n")
    print("\n".join(text))
    if a.plot and samples_all:
        from tandem.bench.plots import plot_cdfs
        plot_cdfs(samples_all, a.plot)
        print(f"plot: {a.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
