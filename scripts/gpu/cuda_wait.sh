#!/usr/bin/env bash
# H200: how opgate's GPU children wait (gpu/cuda_wait.py). The benchmark (spin / yield / block, idle and with every
# core busy), the GPU test, softmax at its default stages under each OPGATE_CUDA_WAIT in turn (ROUNDS times), then the
# library's first LIB_TIMEOUT_S seconds at the defaults with the CPU profile, into one tarball.
#   OUT=/tmp/out ROUNDS=2 LIB_TIMEOUT_S=250 bash scripts/gpu/cuda_wait.sh
set -u
OUT="${OUT:-/tmp/opgate-cuda-wait-out}"
source "$(dirname "$0")/step.sh"
source "$(dirname "$0")/library_env.sh"
library_env cuda_wait.log
step benchmark 120 python3 benchmarks/cuda_wait.py 2
step gpu_test 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_cuda_wait.py
for round in $(seq "${ROUNDS:-2}"); do
  for mode in spin yield block; do
    export OPGATE_CUDA_WAIT=$mode
    step "softmax_${mode}_$round" 120 python3 -m opgate verify examples/ops/softmax.py \
      --json "$OUT/library/softmax_${mode}_$round.json" --out /tmp/opgate-art-softmax
  done
done
unset OPGATE_CUDA_WAIT
if [[ "${LIB_TIMEOUT_S:-250}" != 0 ]]; then
  python3 scripts/gpu/cpu_by_process.py "$OUT/library/cpu.json" & SAMPLER=$!
  step library_default "${LIB_TIMEOUT_S:-250}" python3 -m opgate verify tests/data/verify/library_corpus \
    --json "$OUT/library/default.json" --out /tmp/opgate-art
  sleep 6; kill "$SAMPLER"; python3 scripts/gpu/cpu_by_process.py --summary "$OUT/library/cpu.json" >> "$LOG"
fi
for name in "${ORDER[@]}"; do echo "$name: ${STATUS[$name]}"; done | tee -a "$LOG"
tar -czf "$OUT/cuda_wait.tgz" -C "$OUT" library
