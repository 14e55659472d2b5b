#!/usr/bin/env bash
# Disaggregated multi-turn agentic sessions against colocated, with and without the store
# (issue 19, item 8): every turn resends the conversation with the model's actual answer, so a
# disaggregated next turn hits its previous answer only through what the decode worker wrote.
#   benchmarks/kvstore/run_agentic.sh MODEL_DIR OUT [TIERS]     TIERS: device,store (default both)
set -euo pipefail
model=$1; out=$2; tiers=${3:-device,store}
py=${PYTHON:-.venv/bin/python}
workload=(--agentic --sessions ${SESSIONS:-12} --turns 4 --tenants 2 --system-tokens 300 --tool-tokens 100
          --num-tools 2 --user-tokens 32 --tool-result-tokens 100 --output-tokens 16 --think-time 0.5
          --concurrency 4 --warmup 1 --drain-timeout 120 --no-progress)
common=(--worker-threads 1 --worker-arg=--dtype=float32 --worker-arg=--block-size=16
        --worker-arg=--kv-cache-memory=${DEVICE_KV:-16MiB} --policies round_robin --port ${PORT:-8171})
for tier in ${tiers//,/ }; do
  extra=()
  [ "$tier" = store ] && extra=(--worker-arg=--kv-host-memory=32MiB --worker-arg=--kv-store-memory=256MiB)
  args="--gateway-arg=--prefill-placement=remote"
  [ "$tier" = store ] && args="$args --kv-store auto"
  echo "=== $tier $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"
  MC_TCP_BIND_ADDRESS=127.0.0.1 GLOG_minloglevel=2 "$py" -m tandem bench topology --model "$model" \
    --configs colocated:2,pd:1:1 "${common[@]}" "${extra[@]}" "--tandem-args=$args" "${workload[@]}" \
    --out "$out/$tier" --no-plots
done
