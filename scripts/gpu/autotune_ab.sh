#!/usr/bin/env bash
# GPU: the runtime stage's autotuning, both ways on one machine in one call: OPGATE_RUNTIME_AUTOTUNE=within-limit
# (the configs of at most 64 elements a thread) against Triton's own autotuning over every config, each from empty
# caches of its own, on the spec files whose kernels are autotuned (fla's activations by default). Numerics and
# runtime stages only, so the warm-ups' compile seconds and the timed medians are what differ. Then, per arm, which
# config Triton's autotuner kept at each key (scripts/gpu/autotune_winners.py) and the medians side by side
# (scripts/gpu/autotune_ab_compare.py). Wheels in .whl/ (scripts/library_corpus_env.sh --wheels).
#   OUT=/tmp/out ARMS="within default" LIMIT=240 bash scripts/gpu/autotune_ab.sh
set -u
OUT="${OUT:-/tmp/opgate-autotune-out}"
for arm in ${ARMS:-within default}; do  # every arm named right, before any work
  case "$arm" in
    within|default) ;;
    *) echo "autotune_ab.sh: ARMS='$ARMS': each arm is within or default" >&2; exit 2 ;;
  esac
done
source "$(dirname "$0")/step.sh"
source "$(dirname "$0")/library_env.sh"
library_env autotune_ab.log
PATHS="${LIB_PATHS:-tests/data/verify/library_corpus/fla_activations.py}"
reports=()
for arm in ${ARMS:-within default}; do
  mode=all
  [ "$arm" = within ] && mode=within-limit
  fresh="/tmp/opgate-autotune-$arm-$(date +%s)"
  mkdir -p "$fresh"
  # shellcheck disable=SC2086  # PATHS is a list of paths
  TRITON_CACHE_DIR="$fresh/triton" FLAGGEMS_CACHE_DIR="$fresh/flaggems" OPGATE_CACHE_DIR="$fresh/opgate" \
    OPGATE_RUNTIME_AUTOTUNE="$mode" step "$arm" $((${LIMIT:-240} + 30)) python3 -m opgate verify $PATHS \
    --stages numerics,runtime --time-limit "${LIMIT:-240}" --json "$OUT/library/$arm.json" --out "/tmp/opgate-art-$arm"
  if [[ -s "$OUT/library/$arm.json" ]]; then
    reports+=("$OUT/library/$arm.json")
    python3 scripts/gpu/library_summary.py "$OUT/library/$arm.json" >> "$LOG" 2>&1
  fi
  { echo "===== autotune winners, arm $arm"; python3 scripts/gpu/autotune_winners.py "$fresh/triton"; } >> "$LOG" 2>&1
done
python3 scripts/gpu/autotune_ab_compare.py "${reports[@]}" >> "$LOG" 2>&1
tar -czf "$OUT/autotune_ab.tgz" -C "$OUT" library
