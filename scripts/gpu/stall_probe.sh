#!/usr/bin/env bash
# H200: one operator x dtype's numerics alone, with py-spy stack dumps of its check workers and calibration processes
# at DUMP_AT seconds (what a check that runs for minutes is doing). Wheels in .whl/ (py-spy among them).
#   OUT=/tmp/out SPEC=tests/data/verify/library_corpus/fla_sequence.py OP=fla_token_shift.grad DTYPE=float16 \
#     [LIMIT_S=190] [DUMP_AT="60 120 170"] bash scripts/gpu/stall_probe.sh
set -u
OUT="${OUT:-/tmp/opgate-stall-out}"
source "$(dirname "$0")/step.sh"
source "$(dirname "$0")/library_env.sh"
library_env stall.log
timeout "${LIMIT_S:-190}" python3 -m opgate verify "$SPEC" --op "$OP" --dtype "$DTYPE" --stages numerics \
  --json "$OUT/library/stall.json" --out /tmp/stall-art > "$OUT/library/stall.out" 2>&1 &
RUN=$!
previous=0
for at in ${DUMP_AT:-60 120 170}; do
  sleep $((at - previous)); previous=$at
  echo "=== dump at ${at} s" >> "$OUT/library/dumps.txt"
  for pid in $(pgrep -f "opgate.engine.worker|multiprocessing.spawn"); do
    /tmp/site/bin/py-spy dump --pid "$pid" >> "$OUT/library/dumps.txt" 2>&1
  done
done
wait "$RUN"; echo "exit $?" >> "$OUT/library/stall.out"
tail -25 "$OUT/library/stall.out"
grep -n "opgate/verify\|triton/\|^Process\|^Thread" "$OUT/library/dumps.txt" | head -80
