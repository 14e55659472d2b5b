#!/usr/bin/env bash
# tandem, vLLM CPU and the transformers floor on the same model and workload, then one table.
#
#   benchmarks/peers/side_by_side.sh MODEL_DIR [tandem bench serve workload flags...]
#   e.g. benchmarks/peers/side_by_side.sh /tmp/model --trace ../shared/traces/mooncake_conversation_trace.jsonl \
#          --max-requests 50 --max-input-tokens 1024 --max-output-tokens 32 --time-scale 0.05
#
# Runs one after another (never two servers at once, so each gets every core):
#   1. `tandem serve --model MODEL_DIR` on TANDEM_PORT (8300) + `tandem bench serve --label tandem`
#   2. benchmarks/peers/vllm_cpu.sh (skipped with SKIP_VLLM=1)
#   3. benchmarks/peers/transformers_floor.py (skipped with SKIP_FLOOR=1; THREADS torch threads, default all cores)
#   4. `tandem bench compare` -> $OUT/compare.md
# OUT defaults to bench-results/peers. Not run in CI.
set -euo pipefail
if [ $# -lt 1 ]; then sed -n '2,14p' "$0"; exit 2; fi
MODEL=$(cd "$1" && pwd); shift
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
PY=${TANDEM_PY:-$REPO/.venv/bin/python}
PORT=${TANDEM_PORT:-8300}
mkdir -p "${OUT:=bench-results/peers}"; OUT=$(cd "$OUT" && pwd); export OUT
READY_TIMEOUT=${READY_TIMEOUT:-600}

cd "$REPO"
setsid "$PY" -m tandem serve --model "$MODEL" --host 127.0.0.1 --port "$PORT" >"$OUT/tandem-server.log" 2>&1 &
SERVER=$!
stop_tandem() {
  kill -INT -"$SERVER" 2>/dev/null || return 0
  for _ in $(seq 20); do kill -0 "$SERVER" 2>/dev/null || break; sleep 1; done
  kill -KILL -"$SERVER" 2>/dev/null || true
}
trap stop_tandem EXIT
for _ in $(seq "$READY_TIMEOUT"); do
  if ! kill -0 $SERVER 2>/dev/null; then echo "tandem serve exited:" >&2; tail -30 "$OUT/tandem-server.log" >&2; exit 1; fi
  if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null; then break; fi
  sleep 1
done
"$PY" -m tandem bench serve --url "http://127.0.0.1:$PORT" --tokenizer "$MODEL" --label tandem --out "$OUT" "$@"
stop_tandem; trap - EXIT

REPORTS=("$OUT/tandem.json")
if [ -z "${SKIP_VLLM:-}" ]; then
  "$HERE/vllm_cpu.sh" "$MODEL" "$@"
  REPORTS+=("$OUT/vllm-cpu.json")
fi
if [ -z "${SKIP_FLOOR:-}" ]; then
  "$PY" "$HERE/transformers_floor.py" --model "$MODEL" --threads "${THREADS:-$(nproc)}" --out "$OUT" "$@"
  REPORTS+=("$OUT/transformers-floor.json")
fi
"$PY" -m tandem bench compare "${REPORTS[@]}" --out "$OUT/compare.md"
