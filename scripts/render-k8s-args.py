#!/usr/bin/env python3
"""Write the containers' command lines of the Kubernetes manifests from
tandem/launcher/role_commands.py, the module the multi-host test harness starts its processes
with: deploy/kubernetes/{base,overlays/*}/args.generated.yaml, one strategic-merge patch per
kustomization. tests/deploy/test_kubernetes.py fails when a file is out of date (rerun this) or
when a rendered pod runs anything else.

    python scripts/render-k8s-args.py           # rewrite the files
    python scripts/render-k8s-args.py --check   # exit 1, naming the stale files, if any differs

A profile is what differs between deployments: the model, sizing and tuning options. Addresses
are the pods' own ($(POD_IP), set from the downward API in each container's env) and the
Services' names (deploy/kubernetes/base/*.yaml).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tandem.launcher.role_commands import (GATEWAY_PORT, MASTER_PORT, REDIS_PORT, TANDEM,  # noqa: E402
                                          GatewayCommand, MasterCommand, RedisCommand, WorkerCommand)

K8S = ROOT / "deploy" / "kubernetes"
POD_IP = "$(POD_IP)"                  # Kubernetes expands $(VAR) in args from the container's env
GATEWAY_INTERNAL = f"http://tandem-gateway-internal:{GATEWAY_PORT}"   # registration (not-ready pods too)
STORE = f"mooncake://tandem-mooncake-master:{MASTER_PORT}"
QUEUE = f"redis://tandem-redis:{REDIS_PORT}/0"
DEMO_MODEL = "/opt/tandem/models/tandem-demo-target"                  # shipped in the image


@dataclass(frozen=True)
class Profile:
    model: str
    served_model_name: str
    worker_options: tuple[str, ...]        # both pools
    prefill_options: tuple[str, ...] = ()
    decode_options: tuple[str, ...] = ()
    gateway_options: tuple[str, ...] = ()
    kv_transport: str = "tcp"
    store_roles: tuple[str, ...] = ("prefill", "decode")   # the pools that use the Mooncake Store


PROFILES: dict[str, Profile] = {
    "base": Profile(
        model=DEMO_MODEL, served_model_name="tandem-demo",
        worker_options=("--device", "cpu", "--kv-cache-memory", "1GiB", "--kv-store-memory", "512MiB",
                        "--drain-timeout", "30")),
    "overlays/cpu-small": Profile(
        model=DEMO_MODEL, served_model_name="tandem-demo",
        worker_options=("--device", "cpu", "--threads", "2", "--kv-cache-memory", "256MiB",
                        "--kv-store-memory", "256MiB", "--drain-timeout", "30")),
    "overlays/gpu-pd": Profile(
        model="/models/Llama-3.1-8B-Instruct", served_model_name="llama-3.1-8b-instruct",
        worker_options=("--device", "cuda", "--dtype", "bfloat16", "--drain-timeout", "120"),
        prefill_options=("--gpu-memory-utilization", "0.90", "--kv-host-memory", "16GiB",
                         "--kv-store-memory", "16GiB"),
        # one pod per rank group: the decode worker's two ranks run in one pod, on its two GPUs. A
        # parallel worker sizes its KV cache by --kv-cache-memory and has no KV tiers (no store)
        decode_options=("--tensor-parallel-size", "2", "--kv-cache-memory", "24GiB"),
        store_roles=("prefill",)),
}


def commands(p: Profile) -> dict[tuple[str, str], tuple[list[str], list[str]]]:
    """(Deployment, container) -> (command, args) of every container the manifests run."""
    def worker(role: str, options: tuple[str, ...]) -> list[str]:
        return WorkerCommand(model=p.model, role=role, host=POD_IP, gateway=GATEWAY_INTERNAL,
                             kv_transport=p.kv_transport, kv_store=STORE if role in p.store_roles else None,
                             options=("--served-model-name", p.served_model_name, *p.worker_options,
                                      *options)).argv()
    gateway = GatewayCommand(model=p.model, host=POD_IP, served_model_name=p.served_model_name,
                             queue_url=QUEUE, options=p.gateway_options)
    return {
        ("tandem-gateway", "gateway"): (list(TANDEM), gateway.argv()),
        ("tandem-prefill", "worker"): (list(TANDEM), worker("prefill", p.prefill_options)),
        ("tandem-decode", "worker"): (list(TANDEM), worker("decode", p.decode_options)),
        ("tandem-mooncake-master", "mooncake-master"): (["mooncake_master"], MasterCommand(host=POD_IP).argv()),
        ("tandem-redis", "redis"): (["redis-server"], RedisCommand(host=POD_IP, data_dir="/data").argv()),
    }


def render(p: Profile) -> str:
    """The patch: a Deployment document per container, command and args one item a line."""
    out = ["# Written by scripts/render-k8s-args.py from tandem/launcher/role_commands.py: do not edit."]
    for (deployment, container), (command, args) in commands(p).items():
        out += ["---", "apiVersion: apps/v1", "kind: Deployment", "metadata:", f"  name: {deployment}",
                "spec:", "  template:", "    spec:", "      containers:", f"      - name: {container}",
                "        command:", *(f"        - {json.dumps(a)}" for a in command),
                "        args:", *(f"        - {json.dumps(a)}" for a in args)]
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a file is stale")
    args = ap.parse_args()
    stale = []
    for where, profile in PROFILES.items():
        path = K8S / where / "args.generated.yaml"
        text = render(profile)
        if path.exists() and path.read_text() == text:
            continue
        stale.append(str(path.relative_to(ROOT)))
        if not args.check:
            path.write_text(text)
    if args.check and stale:
        print("out of date (run python scripts/render-k8s-args.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    for s in stale:
        print(f"wrote {s}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
