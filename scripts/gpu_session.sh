#!/usr/bin/env bash
# The device check for a session lent an H200 (issue #10), prepared to run once:
#   run(command="bash scripts/gpu_session.sh", timeout_s=540)
# It uses the machine's own python3 (which holds PyTorch) and ridgeline from src/, measures
# bandwidth, bf16/fp16/fp8 matmuls and a Llama-3.1-8B-shaped random-weight model over
# batch 1-256 x context 512-32K (what does not fit the card is skipped and listed), then
# validates the rows against the catalog's H200 and against the measured device.
# Everything lands under $OUT (./gpu-out when unset). Rehearse it on a CPU with
#   DEVICE=cpu QUICK=--quick MODEL=llama-3.2-1b bash scripts/gpu_session.sh
set -uo pipefail
OUT=${OUT:-gpu-out}
DEVICE=${DEVICE:-cuda}
QUICK=${QUICK:-}
MODEL=${MODEL:-llama-3.1-8b}
GPU_ID=${GPU_ID:-h200-sxm}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
rows="$OUT/$GPU_ID-rows.csv"
{
  date -u +"measured %Y-%m-%dT%H:%MZ"
  if [ "$DEVICE" = cuda ]; then
    nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,driver_version \
      --format=csv
  fi
  "$PYTHON" -c "import torch; print('torch', torch.__version__)"
  "$PYTHON" -m ridgeline measure --device "$DEVICE" $QUICK --model "$MODEL" \
    --gpu-id "$GPU_ID" --rated-gpu h200 --memory-gib 141 -o "$rows" || exit 1
  echo "== against the catalog's $GPU_ID (rated bandwidth and peak)"
  "$PYTHON" -m ridgeline validate "$rows"
  "$PYTHON" -m ridgeline validate "$rows" --json > "$OUT/validate-catalog.json"
  echo "== against the measured device (probed bandwidth and matmul)"
  "$PYTHON" -m ridgeline validate "$rows" --gpu-file "${rows%.csv}.accelerator.json"
  "$PYTHON" -m ridgeline validate "$rows" --gpu-file "${rows%.csv}.accelerator.json" --json \
    > "$OUT/validate-measured.json"
} 2>&1 | tee "$OUT/log.txt"
