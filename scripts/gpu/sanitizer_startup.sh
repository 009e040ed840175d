#!/usr/bin/env bash
# H200: where a compute-sanitizer run's ~15 s go (#27: a library's sanitizer stage is ~256 such runs). Times one
# sanitized child (softmax, Triton, float32) plain and under memcheck with opgate's options and with variants, and a
# bare torch CUDA start the same ways. Wheels as library_env.sh. Appends to $LOG (step.sh).
#   OUT=/tmp/out bash scripts/gpu/sanitizer_startup.sh
set -u
OUT="${OUT:-/tmp/opgate-sanitizer-out}"
source "$(dirname "$0")/step.sh"
mkdir -p "$OUT/library"
LOG="${LOG:-$OUT/library/sanitizer_startup.log}"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 PYTORCH_NO_CUDA_MEMORY_CACHING=1
CS="$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)"
CHILD=(python3 -m opgate.verify.runtime examples/ops/softmax.py softmax triton float32 --sanitized)
BARE=(python3 -c "import torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize()")
OPTS=(--tool memcheck --print-limit 100 --error-exitcode 86 --track-stream-ordered-races all --padding 65536)
step child_plain 120 "${CHILD[@]}"
step child_plain_again 120 "${CHILD[@]}"
step bare_plain 120 "${BARE[@]}"
step bare_memcheck 120 "$CS" --tool memcheck --target-processes all "${BARE[@]}"
step child_memcheck_opgate 120 "$CS" "${OPTS[@]}" --target-processes all "${CHILD[@]}"
step child_memcheck_app_only 120 "$CS" "${OPTS[@]}" --target-processes application-only "${CHILD[@]}"
step child_memcheck_plain_opts 120 "$CS" --tool memcheck --target-processes all "${CHILD[@]}"
step child_racecheck 120 "$CS" --tool racecheck --racecheck-report analysis --target-processes all "${CHILD[@]}"
step child_initcheck 120 "$CS" --tool initcheck --target-processes all "${CHILD[@]}"
for name in "${ORDER[@]}"; do echo "$name: ${STATUS[$name]}"; done | tee -a "$LOG"
