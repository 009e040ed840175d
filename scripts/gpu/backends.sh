#!/usr/bin/env bash
# GPU evidence for the `backends` work (issue 12, item 6): bfloat16 Triton kernels compiled on the GPU
# against opgate's patched Triton interpreter, and `opgate verify` of those kernels compiled on the GPU.
# Run from the repo root on a GPU host: OUT=/some/folder bash scripts/gpu/backends.sh  (< 120 s).
# Everything goes to $OUT/backends.log; a short result table is printed last. A failing step is
# reported and the next one still runs.
set -u
OUT="${OUT:-/tmp/opgate-gpu-out}"
mkdir -p "$OUT"
LOG="$OUT/backends.log"
: > "$LOG"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
unset TRITON_INTERPRET
source "$(dirname "$0")/step.sh"  # step NAME TIMEOUT_S COMMAND...

{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } >> "$LOG" 2>&1

# 1. compiled (GPU) vs opgate's patched interpreter (CPU, same host, same inputs), bit for bit / ulps
step bf16_compiled_vs_interpreter 45 python3 scripts/gpu/backends_bf16.py

# 2. opgate verify of the bfloat16 kernels, compiled by Triton on the GPU: every one must pass
step verify_bf16_kernels_gpu 65 python3 -m opgate verify tests/data/verify/bf16_triton_spec.py \
    --dtype bfloat16 --budget quick --no-extras --stages numerics --jobs 5 --timeout 50 --out "$OUT/backends-report" \
    --json "$OUT/backends-verify.json"
if [ -f "$OUT/backends-verify.json" ]; then
    python3 - "$OUT/backends-verify.json" >> "$LOG" 2>&1 <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
for r in report["results"]:
    print(f"{r['check_id']}: {r['outcome']} - {r['reason'][:200]}")
PY
    rm -f "$OUT/backends-verify.json"
fi
rm -rf "$OUT/backends-report"

{
    echo
    echo "=== result table"
    echo "step | exit | time"
    for name in "${ORDER[@]}"; do echo "$name | exit ${RC[$name]} | ${SECS[$name]} s"; done
    echo
    sed -n '/^bfloat16 kernel |/,/^===== bf16_compiled_vs_interpreter done/p' "$LOG" | grep -v '^==='
    echo "opgate verify on the GPU (each should pass; bf16_row_sum sums in bfloat16 there, see docs/verify-method.md):"
    grep -E '^ +(passed|warned|failed|error|skipped) +verify\.bf16_' "$LOG" || echo "  (no verify result: see the log)"
    grep -E 'exit code [0-9]' "$LOG" | tail -1
} | tee -a "$LOG"
