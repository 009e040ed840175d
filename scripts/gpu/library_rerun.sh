#!/usr/bin/env bash
# H200: `opgate verify` of some of the library corpus's spec files at the default stages, then the same command again
# with nothing changed (the verdict cache: a re-run judges only what changed, verify/verdict_reuse.py), each with its
# report summarised by library_summary.py (stages' spans, when each file was judged wholly). Wheels in .whl/.
#   OUT=/tmp/out LIB_PATHS="tests/data/verify/library_corpus/fla_activations.py ..." FIRST_S=330 AGAIN_S=90 \
#     bash scripts/gpu/library_rerun.sh
set -u
OUT="${OUT:-/tmp/opgate-library-out}"
source "$(dirname "$0")/step.sh"
source "$(dirname "$0")/library_env.sh"
library_env rerun.log
PATHS="${LIB_PATHS:-tests/data/verify/library_corpus/fla_activations.py tests/data/verify/library_corpus/flaggems_activations.py}"
for run in first again; do
  limit="${FIRST_S:-330}"; [[ $run == again ]] && limit="${AGAIN_S:-90}"
  # shellcheck disable=SC2086  # PATHS is a list of paths
  step "$run" "$limit" python3 -m opgate verify $PATHS --json "$OUT/library/$run.json" --out "/tmp/opgate-art-$run"
  tail -5 "$LOG"
  [[ -s "$OUT/library/$run.json" ]] && python3 scripts/gpu/library_summary.py "$OUT/library/$run.json" >> "$LOG" 2>&1
done
tar -czf "$OUT/library_rerun.tgz" -C "$OUT" library
