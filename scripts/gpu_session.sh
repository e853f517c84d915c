#!/usr/bin/env bash
# The device check for a session lent an H200 (issue #10), prepared to run once:
#   run(command="bash scripts/gpu_session.sh", timeout_s=420)
# (run 1 took 67 s of device time, runs 2 and 3 44 and 38 s: well inside a 10-minute budget.)
# It uses the machine's own python3 (which holds PyTorch) and ridgeline from src/. First each
# measure below is run with --dry-run (no PyTorch, no device): the grid, what will be skipped
# for memory and the floor of its steps at the card's rated figures; a refused flag or model
# stops the session there, before any GPU minute. Then it measures bandwidth, bf16/fp16/fp8
# matmuls and a Llama-3.1-8B-shaped random-weight model over batch 1-256 x context 512-32K
# (what does not fit the card is skipped and listed), each decode step eager and replayed from a
# CUDA graph; then, steps only, a sliding-window model (Gemma-3-27B) and a larger dense one
# (Qwen3-32B), so a calibration on one model can be checked on others. Each model's rows are
# written as they are timed and validated at the end against the catalog's H200.
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
# Everything lands under $OUT (./gpu-out when unset). Every measure runs with `--card $GPU_ID`
# (docs/measure.md): its rows, measured as $MEASURED_ID, go to $MEASURED_ID-*rows.csv (the first
# model's beside the probed record $MEASURED_ID-rows.accelerator.json, which each measure's
# "against the probes" validate names), and measure writes the same rows naming the catalog card
# beside them, $MEASURED_ID-*rows.$GPU_ID.csv: what validation/h200/ keeps, each measure's
# `next:`, and validated together at the end against the card's spec sheet (the reference the
# bundled torch profiles were fitted against). See the plan without a GPU:
#   DRY_RUN=1 bash scripts/gpu_session.sh
# Rehearse it on a CPU (no catalog card is a CPU, so no --card; the end validates against the
# CPU's probed record instead) with a PyTorch at hand:
#   DEVICE=cpu GPU_ID= QUICK=--quick MODEL=llama-3.2-1b EXTRA= bash scripts/gpu_session.sh
set -uo pipefail
OUT=${OUT:-gpu-out}
DEVICE=${DEVICE:-cuda}
QUICK=${QUICK:-}
MODEL=${MODEL:-llama-3.1-8b}
BATCHES=${BATCHES:-}  # the first model's grid, when not measure's default
CONTEXTS=${CONTEXTS:-}
FLAGS=${FLAGS:-}  # more measure flags for every model, e.g. --fp8
# --card: the catalog card the rows name, as runs 1-3 and the predictions do; its catalog id
# (`ridgeline hardware` lists them; an alias is read as its id, measure naming the copies by it)
GPU_ID=${GPU_ID-h200-sxm}
DRY_RUN=${DRY_RUN:-}  # non-empty: the plans only, then stop
PYTHON=${PYTHON:-python3}
# further models: name and grid (batches/contexts), steps only
EXTRA=${EXTRA-"gemma-3-27b:1,8,32,64:2048,8192,32768 qwen3-32b:1,8,32,64:512,4096"}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if [ -n "$GPU_ID" ]; then  # an alias (h200) read as its catalog id (h200-sxm), the copies' name
  GPU_ID=$("$PYTHON" -m ridgeline hardware "$GPU_ID" --json |
           "$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)["id"])') || exit 1
fi
# the id measure writes under: a catalog id is refused (hardware.check_record_id), which its
# probed record would shadow; --card's copies name GPU_ID instead
MEASURED_ID=${MEASURED_ID:-measured-${GPU_ID:-$DEVICE}}
measure() {  # ridgeline measure on DEVICE as MEASURED_ID, as GPU_ID's card, with FLAGS
  "$PYTHON" -m ridgeline measure --device "$DEVICE" --gpu-id "$MEASURED_ID" \
    ${GPU_ID:+--card "$GPU_ID"} $FLAGS "$@"
}
first=(--model "$MODEL" $QUICK ${BATCHES:+--batches "$BATCHES"}
       ${CONTEXTS:+--contexts "$CONTEXTS"} -o "$OUT/$MEASURED_ID-rows.csv")
extra() {  # the measure arguments of one EXTRA entry, name:batches:contexts
  local name batches contexts
  IFS=: read -r name batches contexts <<< "$1"
  echo "--skip-probes --model $name --batches $batches --contexts $contexts"
}
rows=()  # the rows validated together at the end: the card's copies (the CPU's own, no card)
measured() {  # $1 the -o just measured: its rows for the end
  if [ -n "$GPU_ID" ]; then rows+=("${1%.csv}.$GPU_ID.csv"); else rows+=("$1"); fi
}
smi() {
  if [ "$DEVICE" != cpu ] && command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu="$1" --format=csv
  fi
}
{
  echo "== the plan (--dry-run: no device touched, no PyTorch imported)"
  measure --dry-run "${first[@]}" || exit 1
  for spec in $EXTRA; do
    name=${spec%%:*}
    # shellcheck disable=SC2046  # extra's words are flags and values without spaces
    measure --dry-run $(extra "$spec") -o "$OUT/$MEASURED_ID-$name-rows.csv" || exit 1
  done
  if [ -n "$DRY_RUN" ]; then exit 0; fi
  date -u +"measured %Y-%m-%dT%H:%MZ"
  smi name,memory.total,clocks.max.sm,clocks.max.mem,driver_version,power.limit
  "$PYTHON" -c "import torch; print('torch', torch.__version__)"
  measure "${first[@]}" || exit 1
  measured "$OUT/$MEASURED_ID-rows.csv"
  smi clocks.sm,clocks.mem,power.draw,temperature.gpu
  for spec in $EXTRA; do
    name=${spec%%:*}
    echo "== $name, steps only"
    # shellcheck disable=SC2046
    measure $(extra "$spec") -o "$OUT/$MEASURED_ID-$name-rows.csv" \
      && measured "$OUT/$MEASURED_ID-$name-rows.csv"
  done
  smi clocks.sm,clocks.mem,power.draw,temperature.gpu
  if [ -n "$GPU_ID" ]; then
    echo "== against the catalog's $GPU_ID (rated bandwidth and peak)"
    against=() verdict=validate-catalog.json
    # (the bundled torch profiles are fitted against the spec sheet, so validating against the
    # probed device would count the shortfall twice; scripts/h200_report.py sets the probed
    # floor beside each row instead)
  else
    echo "== against this device's probed record (no catalog card)"
    against=(--gpu-file "$OUT/$MEASURED_ID-rows.accelerator.json") verdict=validate-probed.json
  fi
  status=0  # a model measure refused, or a validate that failed: the session exits 1
  [ "${#rows[@]}" -eq $((1 + $(wc -w <<< "$EXTRA"))) ] || status=1
  "$PYTHON" -m ridgeline validate "${rows[@]}" "${against[@]}" --summary || status=1
  "$PYTHON" -m ridgeline validate "${rows[@]}" "${against[@]}" --json > "$OUT/$verdict" \
    || status=1
  date -u +"done %Y-%m-%dT%H:%M:%SZ"
  exit $status
} 2>&1 | tee "$OUT/log.txt"
