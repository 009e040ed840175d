#!/usr/bin/env bash
# H200: `opgate verify` of the library corpus (or LIB_PATHS) at the default stages, then the same command again with
# nothing changed, as often as LIMITS says: each run stops itself at its --time-limit (the step's own limit is 30 s
# longer, a backstop) and the next one reuses what it judged: whole files (verify/verdict_reuse.py) and the finished
# checks of the others (verify/resumed.py). Each report is summarised by library_summary.py (stages' spans, results
# reused, when each file was judged wholly). Wheels in .whl/.
#   OUT=/tmp/out LIB_PATHS="tests/data/verify/library_corpus/fla_activations.py ..." LIMITS="330 90" \
#     bash scripts/gpu/library_rerun.sh
# FIRST_S and AGAIN_S (two runs) still work: LIMITS defaults to "$FIRST_S $AGAIN_S". With STEP_DEADLINE set, a run
# gets at most what is left of it less RESERVE_S (default 35: the summaries and the tarball after it); a run meant to
# fill one device call whole (#27's library in one uninterrupted call) leaves less, e.g. RESERVE_S=8 HOST_SPEED=0:
# whatever $OUT holds comes back even where the call's own limit cuts the summaries short.
set -u
OUT="${OUT:-/tmp/opgate-library-out}"
source "$(dirname "$0")/step.sh"
source "$(dirname "$0")/library_env.sh"
library_env rerun.log
PATHS="${LIB_PATHS:-tests/data/verify/library_corpus/fla_activations.py tests/data/verify/library_corpus/flaggems_activations.py}"
run=0
for limit in ${LIMITS:-${FIRST_S:-330} ${AGAIN_S:-90}}; do
  run=$((run + 1))
  if [ -n "${STEP_DEADLINE:-}" ]; then  # a run that would outlast the call's deadline gets what is left of it
    left=$(( STEP_DEADLINE - $(date +%s) - ${RESERVE_S:-35} ))
    [ "$left" -lt "$limit" ] && limit=$left
    [ "$limit" -lt 10 ] && break
  fi
  # shellcheck disable=SC2086  # PATHS is a list of paths
  step "run$run" $((limit + 30)) python3 -m opgate verify $PATHS --time-limit "$limit" \
    --json "$OUT/library/run$run.json" --out "/tmp/opgate-art-run$run"
  tail -5 "$LOG"
  [[ -s "$OUT/library/run$run.json" ]] && python3 scripts/gpu/library_summary.py "$OUT/library/run$run.json" >> "$LOG" 2>&1
done
# the runs' numerics and warm-up seconds (verify/check_seconds.py) come back in the tarball: the next arm of an A/B of
# the order by history names them (library_ab.sh SECONDS_FROM=...), carried, if the next call lands on another host
cp "$OPGATE_CACHE_DIR/check-seconds.json" "$OUT/library/" 2>/dev/null
tar -czf "$OUT/library_rerun.tgz" -C "$OUT" library
