#!/usr/bin/env bash
# The demo models v3 (issue 33) on one H100/H200 in at most 8 minutes: the training data generated
# here from a seed, the target (16k context), its draft model and EAGLE-3 head, the held-out
# evaluation on the target's card, shards of at most 16 MiB and checksums.sha256 in each directory
# (tandem_demo/v3.py says what each step does; `python -m tandem_demo v3 --help` lists the knobs).
# Usage: scripts/train-demo-v3.sh OUT_DIR   (writes OUT_DIR/tandem-demo-{target,draft,eagle3}, which must not
#   hold files yet: compare with models/, then copy them over; the tokenizer is models/tandem-demo-target's)
#   KJV_TEXT=FILE  the output of `bible Gen1:1-Rev22:21`, for a machine without Debian's bible-kjv
#                  (where it is installed: `mkdir -p .cache && bible Gen1:1-Rev22:21 > .cache/kjv.txt`)
#   V3_ARGS="..."  more flags, e.g. "--target-minutes 3 --eval-transcripts 20"
# Needs torch with CUDA, transformers, tokenizers, safetensors and tandem's own dependencies in the
# Python that runs it (PYTHON, default python3). The log is OUT_DIR/../train-demo-v3.log too.
set -euo pipefail
out=${1:?usage: scripts/train-demo-v3.sh OUT_DIR}
py=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
mkdir -p "$out"
log="$(dirname "$out")/train-demo-v3.log"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$log"
"$py" -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)" | tee -a "$log"
cores=$(nproc)
# the head trains on the CPU while the draft trains and the evaluation runs on the GPU: all cores but two
head_threads=$(( cores > 4 ? cores - 2 : 2 ))
# shellcheck disable=SC2086
timeout -k 10 470 "$py" -m tandem_demo v3 --out-root "$out" --device cuda --head-threads "$head_threads" \
  --target-minutes 3.5 --draft-minutes 1.5 --head-minutes 2.5 \
  ${KJV_TEXT:+--bible-text "$KJV_TEXT"} ${V3_ARGS:-} 2>&1 | tee -a "$log"
