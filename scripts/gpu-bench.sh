#!/usr/bin/env bash
# tandem on one GPU against the machine's own limits: one prepared run, under 8 minutes on an
# H100/H200 (benchmarks/gpu/gpu_bench.py says what it measures). Writes OUT_DIR/gpu-bench.json,
# OUT_DIR/gpu-bench.md (the table, fractions of the bound), env.txt and the run's log.
# Usage: scripts/gpu-bench.sh [OUT_DIR] [--smoke] [gpu_bench.py flags...]
#   --smoke: tiny shapes in seconds (CI runs it on the CPU, with Triton's interpreter for the
#   Triton variants), so that the GPU run does not fail on a typo.
#   GPU_BENCH_TIMEOUT_S (default 480): the whole run is stopped past it.
set -euo pipefail
out=$(realpath -m "${1:-gpu-bench}")
shift || true
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
mkdir -p "$out"
has_gpu() { "$py" -c "import sys, torch; sys.exit(not torch.cuda.is_available())"; }
if [[ " $* " == *" --smoke "* ]] && ! has_gpu; then
  export TRITON_INTERPRET=1   # no GPU: the Triton kernels run interpreted (before any is imported)
fi
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  "$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda,
             'gpus', torch.cuda.device_count())"
} >"$out/env.txt" 2>&1 || true
timeout -k 10 "${GPU_BENCH_TIMEOUT_S:-480}" "$py" -m benchmarks.gpu.gpu_bench --out "$out" "$@" 2>&1 |
  tee "$out/gpu-bench.log"
exit "${PIPESTATUS[0]}"
