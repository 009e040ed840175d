#!/usr/bin/env bash
# H200: the GPU tests of the bound terms' device placement, then the library corpus at its default stages in one
# `opgate verify DIR` run under py-spy (every process, raw stacks at PROFILE_RATE Hz: CPU seconds by process kind
# and function, scripts/gpu/profile_summary.py), with per-process CPU seconds (cpu_by_process.py). Wheels in .whl/.
# DUMP_AT="300 420": py-spy stack dumps of every opgate process at those seconds into the run (dumps.txt; what a
# check that runs for minutes is doing), with or without the sampling profile.
#   OUT=/tmp/out LIB_TIMEOUT_S=440 [NO_PYSPY=1] [DUMP_AT="..."] [GPU_TESTS="tests/..."|GPU_TESTS=] bash scripts/gpu/library_profile.sh
set -u
OUT="${OUT:-/tmp/opgate-library-out}"
source "$(dirname "$0")/step.sh"
source "$(dirname "$0")/library_env.sh"
library_env profile.log
RATE="${PROFILE_RATE:-10}"
LIMIT="${LIB_TIMEOUT_S:-440}"
[[ -n "${GPU_TESTS-1}" ]] && step gpu_tests 150 python3 -m pytest -q -p no:cacheprovider ${GPU_TESTS:-tests/verify/test_verify_bounds_device.py tests/verify/test_sanitizer_shared_run.py}
python3 scripts/gpu/cpu_by_process.py "$OUT/library/cpu.json" & SAMPLER=$!
# py-spy attaches to the run (started by `step` in the background) rather than starting it: at the end of its
# --duration a py-spy that started the command kills it, and the report is lost
STEP_OUT_DIR="$OUT/library" step library_profiled "$LIMIT" python3 -m opgate verify \
  ${LIB_PATHS:-tests/data/verify/library_corpus} ${LIB_ARGS:-} --json "$OUT/library/default.json" --out /tmp/opgate-art &
RUN=$!
for _ in $(seq 50); do PID=$(pgrep -f -o "opgate verify ${LIB_PATHS:-tests/data/verify/library_corpus}" | head -1); [[ -n "$PID" ]] && break; sleep 0.2; done
[[ -n "${PID:-}" && -z "${NO_PYSPY:-}" ]] && /tmp/site/bin/py-spy record --pid "$PID" --subprocesses --nonblocking --rate "$RATE" \
  --duration $((LIMIT - 15)) --format raw -o "$OUT/library/run.prof" >> "$LOG" 2>&1 &
SPY=$!
if [[ -n "${DUMP_AT:-}" ]]; then
  ( previous=0
    for at in $DUMP_AT; do
      sleep $((at - previous)); previous=$at
      echo "=== dump at ${at} s" >> "$OUT/library/dumps.txt"
      for pid in $(pgrep -f "opgate|multiprocessing.spawn|multiprocessing.forkserver"); do
        echo "--- pid $pid: $(tr '\0' ' ' < /proc/$pid/cmdline 2>/dev/null | cut -c1-160)" >> "$OUT/library/dumps.txt"
        /tmp/site/bin/py-spy dump --pid "$pid" >> "$OUT/library/dumps.txt" 2>&1
      done
    done ) &
fi
wait "$RUN"
cat "$OUT/library/library_profiled.status" >> "$LOG"
tail -60 "$OUT/library/library_profiled.out" >> "$LOG"
[[ -s "$OUT/library/default.json" ]] && python3 scripts/gpu/library_summary.py "$OUT/library/default.json" >> "$LOG" 2>&1
wait "$SPY"
sleep 4; kill "$SAMPLER"; python3 scripts/gpu/cpu_by_process.py --summary "$OUT/library/cpu.json" | tee -a "$LOG"
[[ -s "$OUT/library/run.prof" ]] && python3 scripts/gpu/profile_summary.py "$OUT/library/run.prof" --rate "$RATE" \
  --top 30 --json "$OUT/library/profile.json" > "$OUT/library/profile.txt" 2>&1
gzip -f "$OUT/library/run.prof" 2>/dev/null
tar -czf "$OUT/library_profile.tgz" -C "$OUT" library
