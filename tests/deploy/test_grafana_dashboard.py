"""deploy/grafana/tandem.json: the dashboard's structure, and every query of it evaluated by a real
Prometheus (Debian's `prometheus`, installed by scripts/system-deps.sh) scraping a running cluster:
a gateway (planner on, with targets it never misses) over a prefill and a decode worker with a
host-memory KV tier, on the tiny test model. Each query must return a series with a finite value.

The cluster serves two waves of requests, a scrape apart, so that every counter has moved between
two samples: a first wave creates the series, the second (prompts sharing a prefix, and a stream
the client cuts off: an abort) moves them.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tandem.launcher.cluster import LocalCluster, ProcSpec, free_port, gateway_proc, worker_proc

pytestmark = pytest.mark.timeout(240)

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "tandem.json"
PROMETHEUS = shutil.which("prometheus")
# Grafana's variables as a query runs with them: windows wide enough to hold the test's samples
# (scraped every second), and every model
SUBSTITUTE = {"$__rate_interval": "2m", "$__interval": "15s", "$__range": "5m",
              '"$model_name"': '".*"'}
METRIC = re.compile(r"\btandem:[A-Za-z0-9_:]+")
WORKER_ARGS = ("--kv-cache-memory", "16MiB", "--dtype", "float32", "--served-model-name", "m",
               "--kv-transport", "tcp", "--kv-host-memory", "8MiB")
PREFIX = "The quick brown fox jumps over the lazy dog. " * 4


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def panels() -> list[dict]:
    """Every panel but the rows (which only group), nested ones included."""
    out = []
    for p in dashboard()["panels"]:
        out.extend(p.get("panels", ()) if p["type"] == "row" else [p])
    return out


def queries() -> list[tuple[str, str]]:
    """(panel title and refId, expression) of every target."""
    return [(f'{p["title"]} {t["refId"]}', t["expr"]) for p in panels() for t in p["targets"]]


def substituted(expr: str) -> str:
    for var, value in SUBSTITUTE.items():
        expr = expr.replace(var, value)
    assert "$" not in expr, f"a variable the test does not substitute: {expr}"
    return expr


def test_the_dashboard_loads_and_every_panel_has_queries():
    d = dashboard()
    assert d["schemaVersion"] >= 39 and d["uid"] and d["title"]
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in d["panels"]] + [q["id"] for p in d["panels"] for q in p.get("panels", ())]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    assert len(panels()) >= 20
    for p in panels():
        assert p["targets"], f"panel {p['title']!r} has no query"
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t["datasource"]["uid"] == "${datasource}", p["title"]
            assert METRIC.search(t["expr"]), f"{p['title']}: {t['expr']} names no tandem metric"
        assert {"h", "w", "x", "y"} <= set(p["gridPos"]) and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24
    # what the issue asks the dashboard to show
    text = json.dumps(d)
    for metric in ("time_to_first_token_seconds", "inter_token_latency_seconds",
                   "num_requests_waiting", "waiting_prefill_tokens", "queue_jobs_running",
                   "prefix_cache_hits", "kv_offload_tiering_hits", "kv_handoff_seconds",
                   "gateway_planner_switches", "num_requests_running", "kv_cache_usage_perc"):
        assert f"tandem:{metric}" in text, metric


# ---- the cluster and Prometheus


def _cluster(model: str, tmp: Path) -> LocalCluster:
    taken: set[int] = set()
    procs = []
    for i, role in enumerate(("prefill", "decode")):
        port = free_port(avoid=taken)
        taken.add(port)
        procs.append(worker_proc(f"w{i}", model, role, "127.0.0.1", port, None, WORKER_ARGS))
    port = free_port(avoid=taken)
    g = gateway_proc(model, "127.0.0.1", port, procs, "default",
                     ("--poll-interval", "0.2", "--served-model-name", "m",
                      "--prefill-placement", "remote",      # every request handed over: pulls
                      "--queue-db", str(tmp / "queue.db"),
                      # the planner runs (its series exist) with targets no request misses
                      "--slo-ttft-ms", "600000", "--slo-itl-ms", "600000", "--planner-interval", "1"))
    return LocalCluster([*procs, ProcSpec(g.name, g.cmd, g.url, None)])


def _prometheus(tmp: Path, cluster: LocalCluster) -> tuple[subprocess.Popen, str]:
    targets = {"tandem-gateway": [cluster.spec("gateway").url],
               "tandem-workers": [cluster.spec("w0").url, cluster.spec("w1").url]}
    jobs = "".join(
        f"  - job_name: {job}\n    static_configs:\n      - targets: "
        f"{json.dumps([u.removeprefix('http://') for u in urls])}\n"
        for job, urls in targets.items())
    config = tmp / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                      f"  evaluation_interval: 1s\nscrape_configs:\n{jobs}")
    port = free_port()
    with open(tmp / "prometheus.log", "wb") as log:   # the child keeps its own descriptor
        proc = subprocess.Popen([PROMETHEUS, f"--config.file={config}",
                                 f"--storage.tsdb.path={tmp / 'tsdb'}",
                                 f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                                stdout=log, stderr=subprocess.STDOUT)
    return proc, f"http://127.0.0.1:{port}"


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def query(prom: str, expr: str) -> list[dict]:
    r = httpx.get(prom + "/api/v1/query", params={"query": expr}, timeout=10)
    assert r.status_code == 200, f"{expr}: {r.status_code} {r.text}"   # 503 while it starts
    body = r.json()
    assert body["status"] == "success", f"{expr}: {r.text}"
    return body["data"]["result"]


def _wait(what: str, check, timeout_s: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert proc is None or proc.poll() is None, f"prometheus exited ({proc.returncode})"
        assert time.monotonic() < deadline, f"{what}: not after {timeout_s:.0f} s"
        time.sleep(0.25)


GATEWAY_TTFTS = ('sum(tandem:time_to_first_token_seconds_count '
                 'and on(instance, job) tandem:server_role{role="gateway"})')
GATEWAY_ABORTS = ('sum(tandem:request_success_total{finished_reason="abort"} '
                  'and on(instance, job) tandem:server_role{role="gateway"})')
DECODE_PULLS = ('sum(tandem:kv_handoff_seconds_count '
                'and on(instance, job) tandem:server_role{role="decode"})')
# a worker records a request's queue time when it finishes, after the gateway's first token: each
# wave waits for these too, or a worker's histogram series could first be sampled with both waves
# in it (rate() sees no increase: the quantile is NaN)
WORKER_QUEUED = tuple(('sum(tandem:request_queue_time_seconds_count '
                       f'and on(instance, job) tandem:server_role{{role="{role}"}})')
                      for role in ("prefill", "decode"))


def _try(fn, default):
    try:
        return fn()
    except (httpx.HTTPError, AssertionError):
        return default


def _reached(prom: str, expr: str, at_least: float) -> bool:
    """Prometheus' latest sample of `expr` (one series) is at least `at_least`."""
    got = _try(lambda: query(prom, expr), [])
    return bool(got) and float(got[0]["value"][1]) >= at_least


def _complete(base: str, prompt: str, max_tokens: int = 4) -> None:
    r = httpx.post(base + "/v1/completions", timeout=60, json={
        "model": "m", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True})
    assert r.status_code == 200, r.text


def _abort_a_stream(base: str) -> None:
    body = {"model": "m", "prompt": PREFIX + "cut", "max_tokens": 200, "temperature": 0,
            "ignore_eos": True, "stream": True}
    with httpx.stream("POST", base + "/v1/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: {"):
                break    # leave after the first chunk: the gateway counts an abort


@pytest.fixture(scope="module")
def scraped(llama_dir, tmp_path_factory):
    """(the /metrics texts of the cluster's processes, Prometheus' URL or None without the binary)
    after the two waves of requests, Prometheus having scraped the second."""
    tmp = tmp_path_factory.mktemp("grafana")
    cluster = _cluster(str(llama_dir), tmp)
    prom_proc = None
    try:
        cluster.start()
        cluster.wait_ready(120)
        gw = cluster.spec("gateway").url
        prom = None
        if PROMETHEUS is not None:
            prom_proc, prom = _prometheus(tmp, cluster)
            _wait("prometheus ready", lambda: _try(
                lambda: httpx.get(prom + "/-/ready", timeout=2).status_code == 200, False), 30, prom_proc)
            _wait("prometheus scrapes all 3 targets",
                  lambda: len(_try(lambda: query(prom, "up == 1"), [])) == 3, 30, prom_proc)
        for i in range(2):                                     # wave 1: the series appear
            _complete(gw, f"wave one {i}: " + PREFIX)
        if prom is not None:
            for expr in (GATEWAY_TTFTS, *WORKER_QUEUED):
                _wait(f"prometheus scraped wave 1: {expr}", lambda e=expr: _reached(prom, e, 2), 20,
                      prom_proc)
        for i in range(3):                                     # wave 2: shared prefix, an abort
            _complete(gw, PREFIX + f"question {i}?", max_tokens=6)
        _abort_a_stream(gw)
        if prom is not None:
            for what, expr, n in (("wave 2's first tokens", GATEWAY_TTFTS, 6),
                                  ("the abort", GATEWAY_ABORTS, 1), ("wave 2's pulls", DECODE_PULLS, 5),
                                  *(("wave 2's queue times", e, 5) for e in WORKER_QUEUED)):
                _wait(f"prometheus scraped {what}", lambda e=expr, n=n: _reached(prom, e, n), 20, prom_proc)
        texts = {p.name: httpx.get(p.url + "/metrics", timeout=10).text for p in cluster.procs}
        yield texts, prom
    finally:
        if prom_proc is not None:
            _stop(prom_proc)
        cluster.stop()


def test_every_metric_the_dashboard_queries_is_exported_by_the_cluster(scraped):
    texts, _ = scraped
    exported = {line.split("{")[0].split(" ")[0] for text in texts.values()
                for line in text.splitlines() if line and not line.startswith("#")}
    used = {name for _, expr in queries() for name in METRIC.findall(expr)}
    missing = sorted(used - exported)
    assert not missing, f"the dashboard queries metrics no process exports: {missing}"


def test_every_dashboard_query_returns_data_from_prometheus(scraped):
    if PROMETHEUS is None:
        pytest.skip("no `prometheus` binary on PATH: scripts/system-deps.sh installs Debian's")
    _, prom = scraped
    empty, no_value = [], []
    for name, expr in queries():
        result = query(prom, substituted(expr))
        if not result:
            empty.append(f"{name}: {expr}")
        elif not any(math.isfinite(float(s["value"][1])) for s in result):
            no_value.append(f"{name}: {result}")
    assert not empty, "queries without a series:\n" + "\n".join(empty)
    assert not no_value, "queries with no finite value:\n" + "\n".join(no_value)
    # and they measure what they say: the shared prefix hit the device cache, the decode worker
    # pulled KV, the stream cut off counts as an abort
    def value(title: str, ref: str = "A", **labels) -> float:
        expr = dict(queries())[f"{title} {ref}"]
        result = [s for s in query(prom, substituted(expr))
                  if all(s["metric"].get(k) == v for k, v in labels.items())]
        assert result, f"{title} {ref} {labels}: no such series"
        return float(result[0]["value"][1])

    assert value("Prefix cache hit ratio by tier", tier="device") > 0
    assert value("KV handoffs and failures") > 0   # (failures: the cut stream's pull may be one)
    assert value("KV handoff time", "C") > 0
    assert value("Failed requests", finished_reason="abort") > 0
    assert value("Workers by role", role="prefill") == value("Workers by role", role="decode") == 1
