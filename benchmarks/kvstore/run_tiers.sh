#!/usr/bin/env bash
# The KV tiers on a scaled-down Mooncake trace (issue 19, item 8): the same workload on two workers,
# colocated and disaggregated, with device only, +host, +disk, +store, routed by round robin
# (routing that ignores sessions and prefixes; POLICIES=default,prefix_aware for others). Usage:
#   benchmarks/kvstore/run_tiers.sh MODEL_DIR TRACE OUT [TIERS] [CONFIGS]
#   TIERS: comma-separated of device,host,disk,store (default all); CONFIGS: tandem bench topology --configs
set -euo pipefail
model=$1; trace=$2; out=$3; tiers=${4:-device,host,disk,store}; configs=${5:-colocated:2,pd:1:1}
py=${PYTHON:-.venv/bin/python}
workload=(--trace "$trace" --tokens-per-block 16 --max-input-tokens 1024 --max-output-tokens 8
          --time-scale "${TIME_SCALE:-0.08}" --tokenizer "$model" --warmup 1 --drain-timeout 120 --no-progress)
common=(--worker-threads 1 --worker-arg=--dtype=float32 --worker-arg=--block-size=16
        --worker-arg=--kv-cache-memory=${DEVICE_KV:-16MiB} --policies ${POLICIES:-round_robin} --port ${PORT:-8170})
host=(--worker-arg=--kv-host-memory=${HOST_KV:-32MiB})
disk_dir=${DISK_DIR:-/tmp/kvbench/disk}
for tier in ${tiers//,/ }; do
  extra=()
  case $tier in
    device) ;;
    host) extra=("${host[@]}") ;;
    disk) extra=("${host[@]}" "--worker-arg=--kv-disk-dir=$disk_dir/{port}" --worker-arg=--kv-disk-size=1GiB) ;;
    store) extra=("${host[@]}" "--worker-arg=--kv-disk-dir=$disk_dir/{port}" --worker-arg=--kv-disk-size=1GiB
                  --worker-arg=--kv-store-memory=256MiB "--tandem-args=--kv-store auto") ;;
    *) echo "unknown tier setting $tier" >&2; exit 2 ;;
  esac
  rm -rf "$disk_dir"
  echo "=== $tier $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"
  MC_TCP_BIND_ADDRESS=127.0.0.1 GLOG_minloglevel=2 "$py" -m tandem bench topology --model "$model" \
    --configs "$configs" "${common[@]}" "${extra[@]}" "${workload[@]}" --out "$out/$tier" --no-plots
done
rm -rf "$disk_dir"
