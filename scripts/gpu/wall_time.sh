#!/usr/bin/env bash
# Wall time of `opgate verify` per example at its default stages (benchmarks/verify_wall_time.py) on the GPU host.
# EXAMPLES (default: every example), WALL_TIMEOUT_S per example, VERIFY_ARGS extra verify arguments, COLD=1 empty
# Triton/inductor caches per run.
# Writes $OUT/wall_time.log and $OUT/wall_time.json.
set -u
cd "$(dirname "$0")/../.." || exit 2
OUT="${OUT:-/tmp/opgate-out}"; mkdir -p "$OUT"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
# shellcheck disable=SC2086
python3 benchmarks/verify_wall_time.py ${EXAMPLES:+--examples $EXAMPLES} --timeout "${WALL_TIMEOUT_S:-300}" ${COLD:+--cold-caches} \
  --json "$OUT/wall_time.json" --reports "$OUT/wall_reports" -- ${VERIFY_ARGS:-} 2>&1 | tee "$OUT/wall_time.log" | tail -12
