"""Interactive traffic alone vs the same traffic with a background batch (issue 21, item 4).

Goal: a background batch raises interactive p90 ITL and p90 TTFT by at most 10% against the same
interactive load alone, while the batch still finishes.

Conditions, alternated (`--rounds 2`: alone, batch, alone, batch), each on a fresh cluster:
  1. `tandem up --model M [--up-arg ...]` in its own process group, its gateway's queue on a new
     SQLite file (XDG_STATE_HOME under --out);
  2. "batch" only: a Workers AI batch (`?queueRequest=true`, --batch-size requests of
     --batch-words words each, --batch-max-tokens) is queued on the gateway just before the
     interactive client starts, and polled once a second until every request has ended;
  3. the interactive client: `tandem bench serve --agentic ...` for --duration seconds;
  4. the gateway's `tandem:queue_preemptions_total` is read, the cluster stopped (SIGINT).
`--batch-alone` first runs the batch on an idle cluster for its reference time.
Then one table per round and one for the pooled samples (ratios against "alone"), and per
batch: requests succeeded, seconds from queueing to the last result, preemptions.

  python benchmarks/queue/background_batch.py --model /tmp/disagg/llama512 --duration 120 \
      --agentic-args "--agentic --sessions 200 --turns 4 ..." --out bench-results/queue
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shlex
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))   # the repo root, for `tandem`

from tandem.bench.compare import compare_table  # noqa: E402
from tandem.bench.metrics import SLO, summarize  # noqa: E402
from tandem.bench.report import load_report  # noqa: E402
from tandem.bench.topology import stop_group, wait_ready  # noqa: E402
from tandem.launcher.cluster import free_port  # noqa: E402

WORDS = ("the river model token cache queue batch night report code review summary agent tool "
         "result index search answer question paper draft table chart value budget worker "
         "request stream prefix block memory engine window history session tenant account").split()


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def batch_body(n: int, words: int, max_tokens: int, seed: int) -> dict:
    rng = random.Random(seed)
    return {"requests": [{"prompt": " ".join(rng.choice(WORDS) for _ in range(words)),
                          "max_tokens": max_tokens, "external_reference": f"r{i}"}
                         for i in range(n)]}


@dataclass
class BatchWatch:
    """Queues one batch and polls it from a thread until it has ended (or `stop`)."""
    url: str
    model: str
    body: dict
    submitted: float = 0.0
    finished: float | None = None
    result: dict | None = None
    polls: list[tuple[float, str]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        path = f"{self.url}/client/v4/accounts/bench/ai/run/@cf/bench/{self.model}?queueRequest=true"
        with httpx.Client(timeout=60.0) as http:
            self.submitted = time.monotonic()
            r = http.post(path, json=self.body)
            r.raise_for_status()
            rid = r.json()["result"]["request_id"]
            while not self.stop.is_set():
                res = http.post(path, json={"request_id": rid}).json()["result"]
                if "responses" in res:
                    self.finished, self.result = time.monotonic(), res
                    return
                self.polls.append((time.monotonic() - self.submitted, res["status"]))
                self.stop.wait(1.0)

    def summary(self) -> dict:
        out: dict = {"requests": len(self.body["requests"])}
        if self.result is not None:
            ok = [r for r in self.result["responses"] if r["success"]]
            out.update(succeeded=len(ok), seconds=round(self.finished - self.submitted, 1),
                       completion_tokens=self.result["usage"]["completion_tokens"])
        else:
            out.update(succeeded=None, seconds=None,
                       note="not finished when the run ended")
        return out


def cpu_seconds(leader: int) -> dict[str, float]:
    """CPU seconds (user + system) so far of each child of `tandem up` (pid `leader`), by name."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text().rsplit(")", 1)[1].split()
            cmd = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if int(stat[1]) != leader:
            continue
        args = [c.decode(errors="replace") for c in cmd]
        name = "gateway" if "gateway" in args else next(
            (f"worker-{args[i + 1]}" for i, c in enumerate(args[:-1]) if c == "--role"), "other")
        out[name] = out.get(name, 0.0) + round((int(stat[11]) + int(stat[12])) / tick, 2)
    return out


def preemptions(url: str) -> float | None:
    try:
        text = httpx.get(url + "/metrics", timeout=10.0).text
    except httpx.HTTPError:
        return None
    m = re.search(r"^tandem:queue_preemptions_total ([0-9.e+]+)$", text, re.M)
    return float(m.group(1)) if m else None


def run_one(label: str, with_batch: bool, with_client: bool, a: argparse.Namespace, out: Path) -> dict:
    port = a.port or free_port()
    if not a.port:
        a.port = port      # the same port for every run
    with socket.socket() as s:   # a server left on it (or someone else's) would be measured instead
        if s.connect_ex(("127.0.0.1", port)) == 0:
            raise SystemExit(f"port {port} is taken: pick another with --port")
    url = f"http://127.0.0.1:{port}"
    run_dir = out / label
    run_dir.mkdir(parents=True, exist_ok=True)
    up = [sys.executable, "-m", "tandem", "up", "--model", a.model, "--port", str(port),
          *shlex.split(a.up_args)]
    env = dict(os.environ, PYTHONPATH=str(ROOT), XDG_STATE_HOME=str(run_dir / "state"))
    log = run_dir / "up.log"
    print(f"[queue-bench] {label}: {shlex.join(up[3:])}", flush=True)
    with open(log, "wb") as logf:
        proc = subprocess.Popen(up, stdout=logf, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                start_new_session=True)
    info: dict = {"label": label, "up_command": shlex.join(["tandem", *up[3:]])}
    try:
        wait_ready(url, proc, a.ready_timeout, log)
        model = httpx.get(url + "/v1/models", timeout=10).json()["data"][0]["id"]
        info["load_before"] = loadavg()
        info["start"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        cpu0 = cpu_seconds(proc.pid)
        watch, thread = None, None
        if with_batch:
            watch = BatchWatch(url, model, batch_body(a.batch_size, a.batch_words,
                                                      a.batch_max_tokens, a.seed))
            thread = threading.Thread(target=watch.run, daemon=True)
            thread.start()
        if with_client:
            cmd = [sys.executable, "-m", "tandem", "bench", "serve", "--url", url,
                   "--out", str(run_dir), "--label", "interactive", "--no-progress",
                   "--duration", str(a.duration), "--drain-timeout", str(a.drain_timeout),
                   *shlex.split(a.agentic_args)]
            info["client"] = shlex.join(["tandem", *cmd[3:]])
            with open(run_dir / "interactive.out", "w") as f:
                subprocess.run(cmd, env=env, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
        if thread is not None:
            thread.join(a.batch_timeout if not with_client else a.batch_grace)
            watch.stop.set()
            thread.join(5)
            info["batch"] = watch.summary()
            info["preemptions"] = preemptions(url)
        info["load_after"] = loadavg()
        cpu1 = cpu_seconds(proc.pid)
        info["cpu_s"] = {k: round(v - cpu0.get(k, 0.0), 1) for k, v in cpu1.items()}
    finally:
        stop_group(proc, 30.0)
    print(f"[queue-bench] {label}: {json.dumps({k: info.get(k) for k in ('batch', 'preemptions', 'cpu_s', 'load_before', 'load_after')})}",
          flush=True)
    return info


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--up-args", default="", help="extra `tandem up` flags (topology, --queue-..., --worker-arg=...)")
    p.add_argument("--agentic-args", required=True, help="`tandem bench serve` workload flags")
    p.add_argument("--duration", type=float, default=120.0)
    p.add_argument("--drain-timeout", type=float, default=60.0)
    p.add_argument("--batch-size", type=int, default=48)
    p.add_argument("--batch-words", type=int, default=30)
    p.add_argument("--batch-max-tokens", type=int, default=32)
    p.add_argument("--batch-grace", type=float, default=120.0,
                   help="seconds the batch may still run after the interactive client ended")
    p.add_argument("--batch-timeout", type=float, default=600.0, help="--batch-alone's limit")
    p.add_argument("--batch-alone", action="store_true", help="first, the batch on an idle cluster")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--port", type=int, default=0, help="the gateway's port (default: a free one)")
    p.add_argument("--ready-timeout", type=float, default=300.0)
    p.add_argument("--out", default="bench-results/queue")
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    meta = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commit": commit,
            "nproc": os.cpu_count(), "command": shlex.join([sys.executable, *sys.argv]), "runs": []}
    plan = [("batch-alone", True, False)] if a.batch_alone else []
    for r in range(1, a.rounds + 1):
        plan += [(f"alone-{r}", False, True), (f"batch-{r}", True, True)]
    for label, with_batch, with_client in plan:
        meta["runs"].append(run_one(label, with_batch, with_client, a, out))
        (out / "meta.json").write_text(json.dumps(meta, indent=2))
    text = [f"# Interactive alone vs with a background batch\n",
            f"date {meta['date']}, commit {commit}, nproc {meta['nproc']}\n",
            f"command: `{meta['command']}`\n"]
    for r in meta["runs"]:
        text.append(f"- {r['label']}: load average before {r.get('load_before')}, after "
                    f"{r.get('load_after')}; batch {r.get('batch')}; preemptions {r.get('preemptions')}; "
                    f"CPU seconds {r.get('cpu_s')}")
    samples: dict[str, list] = {}
    for r in meta["runs"]:
        path = out / r["label"] / "interactive.json"
        if path.exists():
            samples[r["label"]] = load_report(path)[1]
    for i in range(1, a.rounds + 1):
        pair = [(lbl, summarize(samples[lbl], SLO())) for lbl in (f"alone-{i}", f"batch-{i}")
                if lbl in samples]
        if pair:
            text.append(f"\n## round {i}\n\n" + compare_table(pair))
    pooled = []
    for cond in ("alone", "batch"):
        s = [x for lbl, v in samples.items() if lbl.startswith(cond + "-") for x in v]
        if s:
            pooled.append((f"{cond} (pooled)", summarize(s, SLO())))
    if pooled:
        text.append("\n## pooled\n\n" + compare_table(pooled))
    (out / "compare.md").write_text("\n".join(text) + "\n")
    print("\n".join(text))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
