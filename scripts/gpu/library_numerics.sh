#!/usr/bin/env bash
# H200: the GPU bound-terms test, softmax at its default stages twice (bound cache empty, then kept: process wall
# time, #27's 15 s goal), and the library corpus in one `opgate verify DIR --stages numerics` run (calibration and
# numerics alone: where a library's time goes without the runtime/recovery/sanitizer stages).
#   OUT=/tmp/out NUMERICS_TIMEOUT_S=330 bash scripts/gpu/library_numerics.sh   (wheels in .whl/, as library.sh)
set -u
OUT="${OUT:-/tmp/opgate-library-out}"
source "$(dirname "$0")/step.sh"
source "$(dirname "$0")/library_env.sh"
library_env numerics.log
step bounds_test 120 python3 -m pytest -q -p no:cacheprovider tests/verify/test_verify_bounds_device.py
for run in ${SOFTMAX_RUNS-cold warm}; do
  step "softmax_$run" 120 python3 -m opgate verify examples/ops/softmax.py --json "$OUT/library/softmax_$run.json" \
    --out /tmp/opgate-art-softmax
done
step library_numerics "${NUMERICS_TIMEOUT_S:-330}" python3 -m opgate verify ${NUMERICS_PATHS:-tests/data/verify/library_corpus} \
  --stages numerics --json "$OUT/library/numerics.json" --out /tmp/opgate-art
for name in "${ORDER[@]}"; do echo "$name: ${STATUS[$name]}"; done | tee -a "$LOG"
tar -czf "$OUT/library_numerics.tgz" -C "$OUT" library
