#!/usr/bin/env bash
# The CUDA checks, on a machine with a GPU and PyTorch (CI has none; `make test` runs the rest):
#   1. tests/gpu, and the engine, model, parallel, spec, transfer and KV-tier suites with their
#      engines on the GPU (TANDEM_TEST_DEVICE=cuda, tests/conftest.py), the Triton kernels compiled
#      (tests/kernels/triton) and scripts/gpu-bench.sh --smoke on the GPU;
#   2. the server and end-to-end suites whose `tandem serve` processes pick the GPU (--device auto).
# Usage: scripts/gpu-check.sh [OUT_DIR]  (logs and JUnit XML there; exit status non-zero on a failure)
#   GPU_CHECK_STAGES="engine servers" (the default: both), GPU_CHECK_JOBS (pytest-xdist workers for the
#   engine stage, 8). The server stage runs one test at a time: a `tandem serve` without
#   --kv-cache-memory takes --gpu-memory-utilization (0.9) of the GPU, which leaves no room for
#   servers of other tests running at once.
# Needs pytest-xdist, and tandem's own dependencies installed in the Python that runs it (server
# tests start `python -m tandem.cli` with PYTHONPATH set to the checkout alone).
set -u
out=${1:-gpu-check}
mkdir -p "$out"
py=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
jobs=${GPU_CHECK_JOBS:-8}
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  "$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gpus', torch.cuda.device_count())"
} >"$out/env.txt" 2>&1
cat "$out/env.txt"
status=0
run() {   # run NAME JOBS TIMEOUT_S PYTEST_ARGS...
  local name=$1 n=$2 limit=$3
  shift 3
  timeout -k 10 "$limit" "$py" -m pytest -q -rfEs -p no:cacheprovider -n "$n" --timeout 240 \
    --junitxml="$out/$name.xml" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  echo "== $name: exit $rc ($(tail -1 "$out/$name.log"))"
  [ "$rc" -eq 0 ] || status=1
}
stages=${GPU_CHECK_STAGES:-engine servers}
[[ " $stages " == *" engine "* ]] && TANDEM_TEST_DEVICE=cuda run engine-on-cuda "$jobs" "${GPU_CHECK_ENGINE_S:-300}" \
  tests/gpu tests/engine tests/models tests/parallel tests/spec tests/transfer tests/kvstore tests/runner \
  tests/kernels/triton tests/bench/test_gpu_bench.py
[[ " $stages " == *" servers "* ]] && run servers-on-cuda 1 "${GPU_CHECK_SERVER_S:-1200}" \
  tests/api tests/turn tests/e2e/test_parallel_pd_e2e.py tests/e2e/test_spec_serve.py tests/e2e/test_tools_e2e.py \
  tests/e2e/test_agent_apis_e2e.py tests/e2e/test_gateway_e2e.py
exit $status
