#!/usr/bin/env bash
# Install the Debian packages tandem needs, if missing: libibverbs1 (Mooncake Transfer Engine),
# bible-kjv (the public-domain text `python -m tandem_demo build-corpus` trains the demo models on),
# gcc and libc6-dev (tandem.kernels compiles its native CPU attention kernel on first use),
# redis-server and postgresql (the asynchronous queue's shared stores; tests start their own
# servers on 127.0.0.1 and stop them), iproute2 (ip netns, veth, tc: the multi-host tests),
# kubectl (tests/deploy renders deploy/kubernetes with `kubectl kustomize`): Debian's
# kubernetes-client unless a kubectl is already installed; prometheus (tests/deploy: every query
# of the Grafana dashboard, evaluated against a live cluster).
set -euo pipefail
want=(libibverbs1 bible-kjv gcc libc6-dev redis-server postgresql iproute2 prometheus)
missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
command -v kubectl >/dev/null || missing+=(kubernetes-client)
[ ${#missing[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
echo "installing Debian packages: ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
