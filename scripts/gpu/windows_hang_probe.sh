#!/usr/bin/env bash
# H200: a run with measurement windows on (OPGATE_MEASUREMENT_WINDOWS=1) that did every check and then did not end
# (thirty-fifth session: fla_activations.py ran to its --time-limit with no report). This runs it again and, every
# 10 s from PROBE_FROM_S, dumps the parent's Python stacks (py-spy, from .whl/), its children and the pause folder.
#   OUT=/tmp/out [SPEC=...fla_activations.py] [LIMIT_S=200] [PROBE_FROM_S=100] bash scripts/gpu/windows_hang_probe.sh
set -u
OUT="${OUT:-/tmp/opgate-library-out}"
source "$(dirname "$0")/step.sh"
source "$(dirname "$0")/library_env.sh"
library_env hang_probe.log
SPEC="${SPEC:-tests/data/verify/library_corpus/fla_activations.py}"
LIMIT="${LIMIT_S:-200}"
PROBES="$OUT/library/probes"
mkdir -p "$PROBES"
rm -rf /tmp/tc-probe
OPGATE_MEASUREMENT_WINDOWS=1 TRITON_CACHE_DIR=/tmp/tc-probe timeout --kill-after=5 $((LIMIT + 20)) \
  python3 -m opgate verify "$SPEC" --no-cache --time-limit "$LIMIT" --json "$OUT/library/probe.json" \
  --out /tmp/opgate-art-probe > "$OUT/library/probe_run.log" 2>&1 &
pid=$!  # timeout's: opgate is its child (py-spy needs opgate's own pid)
start=$SECONDS
while kill -0 "$pid" 2>/dev/null; do
  sleep 5
  t=$((SECONDS - start))
  [ "$t" -lt "${PROBE_FROM_S:-100}" ] && continue
  {
    echo "===== t=${t}s $(date -u +%T)"
    ps -o pid,ppid,stat,etime,pcpu,cmd --ppid "$pid" 2>/dev/null | cut -c1-200
    find /tmp -maxdepth 5 -type d -name gpu-pause 2>/dev/null | while read -r d; do
      echo "-- $d"; ls -la "$d" "$d/quiet" 2>/dev/null; tail -3 "$d/windows.log" 2>/dev/null
    done
    for child in $(pgrep -P "$pid"); do /tmp/site/bin/py-spy dump --pid "$child" 2>&1 | head -120; done
  } >> "$PROBES/dumps.txt"
  sleep 5
done
wait "$pid"; echo "probe run exit $?" >> "$LOG"
tail -5 "$OUT/library/probe_run.log" >> "$LOG"
tar -czf "$OUT/probe.tgz" -C "$OUT" library
