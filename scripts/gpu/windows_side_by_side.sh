#!/usr/bin/env bash
# H200: measurement windows (engine/gpu_windows.py) on and off, side by side in one call, on one spec file of the
# library corpus (default fla_activations.py), each with its own empty Triton cache and --no-cache: when the
# measurements ran, how long the run took, and whether the medians they measured agree. Wheels in .whl/.
#   OUT=/tmp/out [SPEC=tests/data/verify/library_corpus/fla_activations.py] [MODES="on off"] [LIMIT_S=210] \
#     bash scripts/gpu/windows_side_by_side.sh
set -u
OUT="${OUT:-/tmp/opgate-library-out}"
source "$(dirname "$0")/step.sh"
source "$(dirname "$0")/library_env.sh"
library_env windows.log
SPEC="${SPEC:-tests/data/verify/library_corpus/fla_activations.py}"
LIMIT="${LIMIT_S:-210}"
for mode in ${MODES:-on off}; do
  flag=1; [ "$mode" = off ] && flag=0
  rm -rf "/tmp/tc-$mode"
  OPGATE_MEASUREMENT_WINDOWS=$flag TRITON_CACHE_DIR="/tmp/tc-$mode" step "windows_$mode" $((LIMIT + 30)) \
    python3 -m opgate verify "$SPEC" --no-cache --time-limit "$LIMIT" --json "$OUT/library/windows_$mode.json" \
    --out "/tmp/opgate-art-$mode"
  tail -4 "$LOG"
done
tar -czf "$OUT/windows.tgz" -C "$OUT" library
