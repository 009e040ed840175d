#!/usr/bin/env bash
# H200: what a shared GPU costs the calibration's read-backs (benchmarks/gpu_sharing.py), and fla_kl_div.grad's float32
# calibration with one torch thread, as a library run's calibration processes run (benchmarks/profile_calibration.py
# --gpu), beside HOLD processes that keep the GPU busy. Wheels in .whl/.
#   OUT=/tmp/out [HOLD=4] [GPU_TESTS="tests/..."] bash scripts/gpu/gpu_sharing.sh
set -u
OUT="${OUT:-/tmp/opgate-sharing-out}"
source "$(dirname "$0")/step.sh"
source "$(dirname "$0")/library_env.sh"
library_env sharing.log
HOLD="${HOLD:-4}"
[[ -n "${GPU_TESTS:-}" ]] && step gpu_tests 120 python3 -m pytest -q -p no:cacheprovider $GPU_TESTS
STEP_OUT_DIR="$OUT/library" step sharing 150 python3 benchmarks/gpu_sharing.py --reps 30 --others "$HOLD" \
  --json "$OUT/library/gpu_sharing.json"
python3 benchmarks/gpu_sharing.py --hold "$HOLD" & HELD=$!
sleep 20
STEP_OUT_DIR="$OUT/library" step kl_grad_beside_busy "${KL_S:-150}" env OMP_NUM_THREADS=1 python3 \
  benchmarks/profile_calibration.py tests/data/verify/library_corpus/fla_losses.py fla_kl_div.grad float32 --gpu --top 15
kill "$HELD"; wait "$HELD"
tar -czf "$OUT/sharing.tgz" -C "$OUT" library
