#!/usr/bin/env bash
# The device check for a session lent an H200 (issue #10), prepared to run once:
#   run(command="bash scripts/gpu_session.sh", timeout_s=420)
# It uses the machine's own python3 (which holds PyTorch) and ridgeline from src/, measures
# bandwidth, bf16/fp16/fp8 matmuls and a Llama-3.1-8B-shaped random-weight model over
# batch 1-256 x context 512-32K (what does not fit the card is skipped and listed), each decode
# step eager and replayed from a CUDA graph; then, steps only, a sliding-window model
# (Gemma-3-27B) and a larger dense one (Qwen3-32B), so a calibration on one model can be
# checked on others. Each model's rows are written as soon as it is done, and validated
# against the catalog's H200.
# The second run (issue #10's out-of-sample check, the grid of scripts/h200_report.py's PLANS):
#   BATCHES=1,16,64,128,192,256,384,512,768,1024 CONTEXTS=128 EXTRA="mistral-7b:1,16,64:4096,16384
#   llama-3.2-3b:1,32,128:4096 qwen3-8b:1,64:8192" bash scripts/gpu_session.sh
# The third (mixture of experts):
#   MODEL=qwen3-30b-a3b BATCHES=1,4,16,64,256 CONTEXTS=1024 EXTRA="mixtral-8x7b:1,4,16,64:1024
#   gpt-oss-20b:1,4,16,64:4096" bash scripts/gpu_session.sh
# The fourth (fp8 weights; planned, predictions in validation/h200/predicted/, not yet run:
# the device was not lent again that session):
#   MODEL=llama-3.1-8b BATCHES=1,16,64,256,512,1024 CONTEXTS=128 FLAGS=--fp8
#   EXTRA="qwen3-32b:1,8,32,64:512" bash scripts/gpu_session.sh
# Everything lands under $OUT (./gpu-out when unset): measure's rows under the id they were
# measured as ($MEASURED_ID-*rows.csv, beside the probed record $MEASURED_ID-rows.accelerator.json
# that each measure line's `next:` validates them against), and copies re-carded to the catalog
# card ($GPU_ID-*rows.csv: what validation/h200/ keeps, validated at the end against the
# catalog's card, the `next:` of each "re-carded" line). Rehearse it on a CPU with
#   DEVICE=cpu QUICK=--quick MODEL=llama-3.2-1b EXTRA= bash scripts/gpu_session.sh
set -uo pipefail
OUT=${OUT:-gpu-out}
DEVICE=${DEVICE:-cuda}
QUICK=${QUICK:-}
MODEL=${MODEL:-llama-3.1-8b}
BATCHES=${BATCHES:-}  # the first model's grid, when not measure's default
CONTEXTS=${CONTEXTS:-}
FLAGS=${FLAGS:-}  # more measure flags for every model, e.g. --fp8
GPU_ID=${GPU_ID:-h200-sxm}  # the catalog card the rows name, as runs 1-3 and the predictions do
# the id measure writes under: it refuses a catalog id (hardware.check_record_id), which its
# probed record would shadow; its rows keep this id (they validate against the probed record)
# and a copy of each names GPU_ID
MEASURED_ID=${MEASURED_ID:-measured-$GPU_ID}
PYTHON=${PYTHON:-python3}
# further models: name and grid (batches/contexts), steps only
EXTRA=${EXTRA-"gemma-3-27b:1,8,32,64:2048,8192,32768 qwen3-32b:1,8,32,64:512,4096"}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
recard() {  # $OUT/MEASURED_ID-$1 (rows measured as MEASURED_ID), copied to $OUT/GPU_ID-$1
  # naming GPU_ID, the card they were measured on
  "$PYTHON" - "$OUT/$MEASURED_ID-$1" "$OUT/$GPU_ID-$1" "$MEASURED_ID" "$GPU_ID" <<'PY' || return 1
import csv
import shlex
import sys

source, copy, mine, card = sys.argv[1:]
with open(source, newline="", encoding="utf-8") as handle:
    reader = csv.DictReader(handle)
    fields, rows = reader.fieldnames or [], list(reader)
for row in rows:
    if row["gpu"] == mine:
        row["gpu"] = card
        row["id"] = row["id"].replace(f"measure-{mine}-", f"measure-{card}-", 1)
with open(copy, "w", newline="", encoding="utf-8") as handle:
    writer = csv.DictWriter(handle, fieldnames=fields)
    writer.writeheader()
    writer.writerows(rows)
print(f"re-carded {len(rows)} rows of {mine} to {card}, the catalog card they ran on: {copy}; "
      f"next: ridgeline validate {shlex.quote(copy)}")
PY
  copies+=("$OUT/$GPU_ID-$1")
}
copies=()  # the re-carded copies, validated together at the end
smi() {
  if [ "$DEVICE" = cuda ]; then nvidia-smi --query-gpu="$1" --format=csv; fi
}
{
  date -u +"measured %Y-%m-%dT%H:%MZ"
  smi name,memory.total,clocks.max.sm,clocks.max.mem,driver_version,power.limit
  "$PYTHON" -c "import torch; print('torch', torch.__version__)"
  "$PYTHON" -m ridgeline measure --device "$DEVICE" $QUICK --model "$MODEL" \
    --gpu-id "$MEASURED_ID" --rated-gpu h200 -o "$OUT/$MEASURED_ID-rows.csv" \
    ${BATCHES:+--batches "$BATCHES"} ${CONTEXTS:+--contexts "$CONTEXTS"} $FLAGS || exit 1
  recard rows.csv
  smi clocks.sm,clocks.mem,power.draw,temperature.gpu
  for spec in $EXTRA; do
    IFS=: read -r name batches contexts <<< "$spec"
    echo "== $name, steps only"
    "$PYTHON" -m ridgeline measure --device "$DEVICE" --skip-probes --model "$name" \
      --gpu-id "$MEASURED_ID" --batches "$batches" --contexts "$contexts" $FLAGS \
      -o "$OUT/$MEASURED_ID-$name-rows.csv" && recard "$name-rows.csv"
  done
  smi clocks.sm,clocks.mem,power.draw,temperature.gpu
  echo "== against the catalog's $GPU_ID (rated bandwidth and peak)"
  "$PYTHON" -m ridgeline validate "${copies[@]}" --summary
  "$PYTHON" -m ridgeline validate "${copies[@]}" --json > "$OUT/validate-catalog.json"
  # (the bundled torch profiles are fitted against the spec sheet, so validating against the
  # probed device would count the shortfall twice; scripts/h200_report.py sets the probed
  # floor beside each row instead)
  date -u +"done %Y-%m-%dT%H:%M:%SZ"
} 2>&1 | tee "$OUT/log.txt"
