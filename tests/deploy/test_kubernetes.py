"""deploy/kubernetes: every kustomization renders with `kubectl kustomize` (offline) into documents
the Kubernetes schemas accept, with no required value left unset and the cluster wired as the
checks of tests/deploy/k8s_checks.py say; the pods run exactly the commands of
tandem/launcher/role_commands.py (through scripts/render-k8s-args.py, whose output is up to date).

kubectl comes from scripts/system-deps.sh. Without it the tests skip, saying so, except in CI
(CI=true or TANDEM_REQUIRE_KUBECTL=1), where that is a failure.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tandem.cli import build_parser
from tandem.launcher.role_commands import TANDEM
from tests.deploy import k8s_checks
from tests.deploy.k8s_checks import (adapter_metrics, schema_problems, tandem_metric_names, unset_values,
                                     wiring_problems)

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "kubernetes"
OVERLAYS = ("overlays/cpu-small", "overlays/gpu-pd")
SCRIPT = ROOT / "scripts" / "render-k8s-args.py"


@pytest.fixture(scope="module")
def kubectl() -> str:
    path = shutil.which("kubectl")
    if path is None:
        reason = "kubectl is not installed (scripts/system-deps.sh installs it)"
        if os.environ.get("CI") == "true" or os.environ.get("TANDEM_REQUIRE_KUBECTL") == "1":
            pytest.fail(f"in CI, {reason}")
        pytest.skip(reason)
    return path


def render(kubectl: str, directory: Path) -> list[dict]:
    r = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"kubectl kustomize {directory} failed:\n{r.stderr}"
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def overlay_problems(kubectl: str, directory: Path) -> list[str]:
    """Everything wrong with a deployable kustomization, each naming what to fix."""
    docs = render(kubectl, directory)
    return ([f"required value unset: {v}" for v in unset_values(docs)]
            + schema_problems(docs) + wiring_problems(docs))


def _script():
    spec = importlib.util.spec_from_file_location("render_k8s_args", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module      # its dataclasses look their module up while being made
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_an_overlay_renders_valid_complete_and_wired(kubectl, overlay):
    assert overlay_problems(kubectl, K8S / overlay) == []


def test_the_base_is_valid_and_leaves_only_the_image_tag_to_its_overlays(kubectl):
    docs = render(kubectl, K8S / "base")
    assert schema_problems(docs) == [] and wiring_problems(docs) == []
    assert {v.split()[0] for v in unset_values(docs)} == {"REQUIRED_IMAGE_TAG"}


def test_an_overlay_missing_a_required_value_fails_naming_it(kubectl, tmp_path):
    tree = tmp_path / "kubernetes"
    shutil.copytree(K8S, tree)
    broken = tree / "overlays" / "broken"
    broken.mkdir()
    # the image's registry set, its tag forgotten
    (broken / "kustomization.yaml").write_text(
        "bases:\n- ../../base\nimages:\n- name: tandem\n  newName: registry.example.com/tandem\n")
    problems = overlay_problems(kubectl, broken)
    assert problems and all(p.startswith("required value unset: REQUIRED_IMAGE_TAG (Deployment tandem-")
                            for p in problems), problems
    assert any("spec.template.spec.containers[0].image" in p for p in problems)


def test_a_pod_given_a_loopback_address_or_no_secret_is_named(kubectl, tmp_path):
    tree = tmp_path / "kubernetes"
    shutil.copytree(K8S, tree)
    args = tree / "overlays" / "cpu-small" / "args.generated.yaml"
    args.write_text(args.read_text().replace("http://tandem-gateway-internal:8000", "http://127.0.0.1:8000"))
    gateway = tree / "base" / "gateway.yaml"
    gateway.write_text(gateway.read_text().replace("name: tandem-cluster-secret", "name: another-secret", 1))
    problems = overlay_problems(kubectl, tree / "overlays" / "cpu-small")
    assert any(p.startswith("Deployment tandem-prefill: worker is given the address 'http://127.0.0.1:8000'")
               for p in problems), problems
    assert any(p.startswith("Deployment tandem-gateway: gateway does not get TANDEM_CLUSTER_SECRET")
               for p in problems), problems


@pytest.mark.parametrize("where", ["base", *OVERLAYS])
def test_the_pods_run_the_commands_of_role_commands(kubectl, where):
    """Every container runs (command, args) as role_commands builds them for that profile."""
    script = _script()
    want = script.commands(script.PROFILES[where])
    docs = render(kubectl, K8S / where)
    running = {(d["metadata"]["name"], c["name"]): (c.get("command"), c.get("args"))
               for d in docs if d["kind"] == "Deployment" for c in d["spec"]["template"]["spec"]["containers"]}
    assert running == {k: (cmd, args) for k, (cmd, args) in want.items()}


@pytest.mark.parametrize("where", ["base", *OVERLAYS])
def test_every_tandem_pods_args_parse_with_tandems_cli(kubectl, where):
    """Flags exist and values are valid (sizes, URLs), for the GPU overlay too, which runs nowhere here."""
    for d in render(kubectl, K8S / where):
        for c in d["spec"]["template"]["spec"]["containers"] if d["kind"] == "Deployment" else ():
            if c["command"] == list(TANDEM):
                args = [a.replace("$(POD_IP)", "10.0.0.1") for a in c["args"]]
                try:
                    build_parser(args[0]).parse_args(args)
                except SystemExit:
                    pytest.fail(f"{where}: {d['metadata']['name']}: tandem {' '.join(args)} does not parse")


def test_the_generated_args_are_up_to_date():
    r = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_a_stale_args_file_is_found(tmp_path, monkeypatch):
    script = _script()
    shutil.copytree(K8S, tmp_path / "kubernetes")
    monkeypatch.setattr(script, "K8S", tmp_path / "kubernetes")
    monkeypatch.setattr(script, "ROOT", tmp_path)
    stale = tmp_path / "kubernetes" / "overlays" / "gpu-pd" / "args.generated.yaml"
    stale.write_text(stale.read_text().replace("--drain-timeout", "--drain-timeout-s"))
    monkeypatch.setattr(sys, "argv", ["render-k8s-args.py", "--check"])
    assert script.main() == 1
    monkeypatch.setattr(sys, "argv", ["render-k8s-args.py"])
    assert script.main() == 0 and "--drain-timeout-s" not in stale.read_text()


def test_the_autoscalers_metrics_are_tandems_own():
    """Each external metric prometheus-adapter serves is computed from a metric tandem exports."""
    defined = tandem_metric_names()
    assert "tandem:gateway_inflight_prefill_tokens" in defined   # the scan finds what it should
    assert {m: s for m, s in adapter_metrics().items() if s not in defined} == {}


def test_the_checks_find_a_service_monitor_that_scrapes_nothing():
    monitor = yaml.safe_load((K8S / "base" / "servicemonitor.yaml").read_text())
    service = {"kind": "Service", "apiVersion": "v1",
               "metadata": {"name": "x", "labels": {"tandem-metrics": "true"}},
               "spec": {"ports": [{"name": "http", "port": 8000}]}}
    assert k8s_checks.schema_problems([monitor, service]) == [
        "ServiceMonitor tandem: endpoint port 'metrics' is named on none of its Services"]
    assert k8s_checks.schema_problems([monitor]) == [
        "ServiceMonitor tandem: its selector {'tandem-metrics': 'true'} matches no Service"]


def test_only_the_gateway_reaches_redis(kubectl):
    """Redis (every tenant's queued work, the ledger) has no password: a NetworkPolicy admits the
    gateway's pods alone."""
    docs = render(kubectl, K8S / "overlays" / "cpu-small")
    pods = {d["metadata"]["name"]: d["spec"]["template"]["metadata"]["labels"]
            for d in docs if d["kind"] == "Deployment"}

    def selects(selector: dict, labels: dict) -> bool:
        return all(labels.get(k) == v for k, v in selector["matchLabels"].items())

    policies = [d for d in docs if d["kind"] == "NetworkPolicy"
                and selects(d["spec"]["podSelector"], pods["tandem-redis"])]
    assert len(policies) == 1 and policies[0]["spec"]["policyTypes"] == ["Ingress"]
    admitted = {name for rule in policies[0]["spec"]["ingress"] for peer in rule["from"]
                for name, labels in pods.items() if selects(peer["podSelector"], labels)}
    assert admitted == {"tandem-gateway"}
