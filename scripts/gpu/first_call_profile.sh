#!/usr/bin/env bash
# GPU: the first call of a runtime check's implementation at its timing size, cold (empty Triton and FlagGems
# caches of its own), then in two more fresh processes after that one, the way a runtime check that runs in another
# worker than its warm-up meets it (first_call_profile.py). Wheels in .whl/ (FlagGems, fla).
#   OUT=/tmp/out CASES="flaggems_misc.py:gems_cross_entropy:gems_cross_entropy:float16 ..." bash scripts/gpu/first_call_profile.sh
set -u
OUT="${OUT:-/tmp/opgate-first-call}"
source "$(dirname "$0")/step.sh"
source "$(dirname "$0")/library_env.sh"
library_env first_call.log
CORPUS=tests/data/verify/library_corpus
export TRITON_CACHE_DIR=/tmp/first-call-triton FLAGGEMS_CACHE_DIR=/tmp/first-call-gems
export TRITON_CACHE_AUTOTUNING=1 TRITON_PRINT_AUTOTUNING=1 TRITON_DEFAULT_FP_FUSION=1 CUBLAS_WORKSPACE_CONFIG=:4096:8
rm -rf "$TRITON_CACHE_DIR" "$FLAGGEMS_CACHE_DIR"
for item in ${CASES:-flaggems_misc.py:gems_cross_entropy:gems_cross_entropy:float16}; do
  IFS=: read -r file op impl dtype <<< "$item"
  for run in cold again1 again2; do
    step "$op.$dtype.$run" 120 python3 scripts/gpu/first_call_profile.py time "$CORPUS/$file" "$op" "$impl" "$dtype" --top 30
  done
done
