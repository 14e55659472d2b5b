"""The Kubernetes pods' command lines (deploy/kubernetes, cpu-small: scripts/render-k8s-args.py
from tandem/launcher/role_commands.py) run as they are on test hosts, one host per pod: `$(POD_IP)`
becomes the host's address, a Service name the address of the host behind it, the image's demo
model the test model (served as "m"). Redis, the store's master, the gateway and a prefill and a
decode worker that register with it answer a completion as one engine does, and nothing talks to
a loopback address."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import pytest

from tests.e2e.hosts.client import complete, prompt, text_of, wait_no_blocks_held

pytestmark = pytest.mark.timeout(150)

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "render-k8s-args.py"
PODS = {   # Deployment -> (test host, kind, worker role)
    "tandem-redis": ("redis", "redis", None),
    "tandem-mooncake-master": ("master", "master", None),
    "tandem-gateway": ("gw", "gateway", None),
    "tandem-prefill": ("p0", "worker", "prefill"),
    "tandem-decode": ("d0", "worker", "decode"),
}
SERVICES = {"tandem-redis": "tandem-redis", "tandem-mooncake-master": "tandem-mooncake-master",
            "tandem-gateway-internal": "tandem-gateway"}   # Service -> the Deployment behind it


def _script():
    spec = importlib.util.spec_from_file_location("render_k8s_args", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_cpu_small_pods_commands_serve_across_hosts(net, cluster, model, reference):
    script = _script()
    profile = dataclasses.replace(script.PROFILES["overlays/cpu-small"], model=model, served_model_name="m")
    commands = script.commands(profile)
    hosts = {dep: net.add_host(name) for dep, (name, _, _) in PODS.items()}
    programs = {"python": sys.executable,
                "mooncake_master": str(Path(sys.executable).parent / "mooncake_master")}

    def on_host(dep: str, argv: list[str]) -> list[str]:
        out = []
        for a in argv:
            a = a.replace("$(POD_IP)", hosts[dep].addr)
            for service, behind in SERVICES.items():
                a = a.replace(f"//{service}:", f"//{hosts[behind].addr}:")
            out.append(a)
        return out

    for dep, (name, kind, role) in PODS.items():
        (command, args), = [v for (d, _), v in commands.items() if d == dep]
        argv = [programs.get(command[0], command[0]), *command[1:], *on_host(dep, args)]
        if dep == "tandem-redis":
            argv[argv.index("--dir") + 1] = str(cluster.workdir)
        port = {"gateway": 8000, "worker": 8100}.get(kind)
        cluster.start(name, hosts[dep], argv, url=hosts[dep].url(port) if port else None, kind=kind, role=role,
                      wildcard_ok="Mooncake's listeners bind every interface" if kind in ("worker", "master") else None)
    cluster.wait_ready()
    cluster.wait_until("gw sees both workers", lambda: len([w for w in cluster.workers_seen("gw")
                                                            if w["healthy"]]) == 2, 60)
    ids = prompt(3, 40)
    want, _ = reference(ids, 12)
    r = complete(cluster.url("gw"), ids, 12)
    assert r.status_code == 200, r.text
    assert text_of(r) == want
    assert r.headers["x-tandem-decode"] == cluster.url("d0")
    cluster.check_addresses()
    wait_no_blocks_held(cluster, ["p0", "d0"])
