"""Checks of a rendered kustomization (`kubectl kustomize DIR`, as a list of documents), each
returning the problems it finds as sentences that name the object and the value:

- `schema_problems`: every document against the Kubernetes schemas (kubernetes-validate, strict:
  unknown fields are errors), offline; the ServiceMonitor (a CRD, not in them) by its own rules;
- `unset_values`: placeholders `REQUIRED_*` the base leaves for an overlay to set;
- `wiring_problems`: what the schemas cannot see: every address a pod is given is a rendered
  Service's (or the pod's own IP), never loopback; the cluster secret reaches every tandem
  process from the Secret; the probes; the grace period outlasts the worker's drain; a GPU pod
  has a GPU per rank; the HPAs scale rendered Deployments on metrics prometheus-adapter serves.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlparse

import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S_VERSIONS = ("1.29", "1.37")            # the oldest Kubernetes docs/deploy.md supports, the newest known
PLACEHOLDER = re.compile(r"REQUIRED_[A-Z0-9_]+")
SECRET = ("tandem-cluster-secret", "secret")
ADAPTER_RULES = ROOT / "deploy" / "kubernetes" / "prometheus-adapter" / "rules.yaml"


def name_of(doc: dict) -> str:
    return f"{doc['kind']} {doc['metadata']['name']}"


def schema_problems(docs: list[dict]) -> list[str]:
    bad = []
    for doc in docs:
        if doc["apiVersion"] == "monitoring.coreos.com/v1":
            bad += _service_monitor_problems(doc, docs)
            continue
        for version in K8S_VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                path = ".".join(str(p) for p in exc.path)
                bad.append(f"{name_of(doc)} (Kubernetes {version}): {path}: {exc.message}")
            except kubernetes_validate.SchemaNotFoundError:
                bad.append(f"{name_of(doc)}: {doc['apiVersion']} is no API of Kubernetes {version}")
    return bad


def _service_monitor_problems(doc: dict, docs: list[dict]) -> list[str]:
    """The CRD's required fields, and that it scrapes something: its selector picks rendered
    Services and each endpoint's port is named on one of them."""
    where, spec = name_of(doc), doc.get("spec") or {}
    if doc["kind"] != "ServiceMonitor" or not doc["metadata"].get("name"):
        return [f"{where}: not a named ServiceMonitor"]
    want = (spec.get("selector") or {}).get("matchLabels")
    if not want or not spec.get("endpoints"):
        return [f"{where}: spec.selector.matchLabels and spec.endpoints are required"]
    services = [d for d in docs if d["kind"] == "Service"
                and want.items() <= (d["metadata"].get("labels") or {}).items()]
    if not services:
        return [f"{where}: its selector {want} matches no Service"]
    bad = []
    for e in spec["endpoints"]:
        if not str(e.get("path", "/metrics")).startswith("/"):
            bad.append(f"{where}: endpoint path {e.get('path')!r} is not absolute")
        if not any(p.get("name") == e.get("port") for s in services for p in s["spec"]["ports"]):
            bad.append(f"{where}: endpoint port {e.get('port')!r} is named on none of its Services")
    return bad


def unset_values(docs: list[dict]) -> list[str]:
    """'REQUIRED_X (Kind name: field.path)' for every placeholder left in the documents."""
    found: list[str] = []

    def walk(value, path: str, doc: dict) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, f"{path}.{k}" if path else str(k), doc)
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, f"{path}[{i}]", doc)
        elif isinstance(value, str):
            found.extend(f"{m} ({name_of(doc)}: {path})" for m in PLACEHOLDER.findall(value))

    for doc in docs:
        walk(doc, "", doc)
    return found


def _flag(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


def _pod_problems(dep: dict, services: dict[str, set[int]]) -> list[str]:
    where, pod = name_of(dep), dep["spec"]["template"]["spec"]
    bad = []
    for c in pod["containers"]:
        args, env = [str(a) for a in c.get("args", [])], {e["name"]: e for e in c.get("env", [])}
        tandem = c.get("command", [])[:3] == ["python", "-m", "tandem.cli"]
        for a in args:
            if re.search(r"127\.0\.0\.1|localhost|0\.0\.0\.0|\[::1?\]", a):
                bad.append(f"{where}: {c['name']} is given the address {a!r}: a pod binds and "
                           f"advertises its own IP and reaches others by Service name")
        if any("$(POD_IP)" in a for a in args) and env.get("POD_IP", {}).get("valueFrom") != {
                "fieldRef": {"fieldPath": "status.podIP"}}:
            bad.append(f"{where}: {c['name']} uses $(POD_IP) without it from the downward API")
        for flag in ("--gateway", "--kv-store", "--queue-url"):
            url = _flag(args, flag)
            if url is not None:
                u = urlparse(url)
                if u.port not in services.get(u.hostname or "", set()):
                    bad.append(f"{where}: {c['name']} {flag} {url}: no rendered Service "
                               f"{u.hostname} with port {u.port}")
        if not tandem:
            continue
        ref = (env.get("TANDEM_CLUSTER_SECRET", {}).get("valueFrom") or {}).get("secretKeyRef") or {}
        if (ref.get("name"), ref.get("key")) != SECRET:
            bad.append(f"{where}: {c['name']} does not get TANDEM_CLUSTER_SECRET from Secret "
                       f"{SECRET[0]} key {SECRET[1]}")
        if (c.get("readinessProbe") or {}).get("httpGet", {}).get("path") != "/health":
            bad.append(f"{where}: {c['name']}'s readiness probe is not GET /health")
        if (c.get("livenessProbe") or {}).get("httpGet", {}).get("path") != "/livez":
            bad.append(f"{where}: {c['name']}'s liveness probe is not GET /livez")
        if args[:1] == ["serve"]:
            drain = float(_flag(args, "--drain-timeout") or 30)
            if pod.get("terminationGracePeriodSeconds", 30) <= drain:
                bad.append(f"{where}: terminationGracePeriodSeconds "
                           f"{pod.get('terminationGracePeriodSeconds', 30)} does not outlast --drain-timeout {drain:g}")
            gpus = int((c.get("resources") or {}).get("limits", {}).get("nvidia.com/gpu", 0))
            ranks = int(_flag(args, "--tensor-parallel-size") or 1) * int(_flag(args, "--pipeline-parallel-size") or 1)
            if gpus and gpus != ranks:
                bad.append(f"{where}: {gpus} GPUs for a rank group of {ranks} (one pod per rank group, a GPU per rank)")
    return bad


def adapter_metrics() -> dict[str, str]:
    """External metric name -> the tandem series it is computed from (prometheus-adapter rules)."""
    rules = yaml.safe_load(ADAPTER_RULES.read_text())["rules"]["external"]
    return {r["name"]["as"]: r["seriesQuery"].split("{")[0] for r in rules}


def wiring_problems(docs: list[dict]) -> list[str]:
    services: dict[str, set[int]] = {}
    for d in docs:
        if d["kind"] == "Service":
            services[d["metadata"]["name"]] = {p["port"] for p in d["spec"]["ports"]}
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    bad = [p for d in deployments.values() for p in _pod_problems(d, services)]
    served = adapter_metrics()
    for h in (d for d in docs if d["kind"] == "HorizontalPodAutoscaler"):
        target = h["spec"]["scaleTargetRef"]["name"]
        if target not in deployments:
            bad.append(f"{name_of(h)} scales {target}, which is not rendered")
        for m in h["spec"]["metrics"]:
            name = (m.get("external") or m.get("pods") or {}).get("metric", {}).get("name")
            if name not in served:
                bad.append(f"{name_of(h)}: metric {name} is served by no rule of {ADAPTER_RULES.name}")
    return bad


def tandem_metric_names() -> set[str]:
    """Every `tandem:NAME` metric family the package defines (in its source)."""
    names = set()
    for path in (ROOT / "tandem").rglob("*.py"):
        names.update(re.findall(r"[\"'](tandem:[a-z_]+)[\"']", path.read_text()))
    return names
