#!/usr/bin/env bash
# GPU evidence for the GPU layering (issue 15, last part: probes collect, checks judge, reporters render).
# Run from the repo root on a GPU host:  bash scripts/gpu/doctor_gpu_tests.sh
# Writes everything into ONE file, $OUT/doctor_gpu_tests.log (OUT defaults to ./opgate-report), within ~120 s, and
# prints a table of the doctor's GPU figures last (compare with docs/benchmarks.md, "opgate doctor,
# standard level: the measured GPU probes"). Each step's failure is printed, not fatal.
#   1. opgate doctor --level standard --json       the figures must not move with the new layout
#   2. pytest -m gpu of the areas touched          tests/gpu (probes, graphs, timing, planted twins, sticky
#                                                  worker from tests/data/gpu/), tests/doctor, verify's OOM trial
set -u
OUT="${OUT:-opgate-report}"
mkdir -p "$OUT"
LOG="$OUT/doctor_gpu_tests.log"
: > "$LOG"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
WORK="$(mktemp -d /tmp/opgate-doctor-gpu-tests.XXXXXX)"
source "$(dirname "$0")/step.sh"  # step NAME TIMEOUT_S COMMAND...

step host 10 bash -c 'date -u; git log --oneline -1 2>/dev/null; nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv'
step doctor_standard 40 "$PY" -m opgate doctor --level standard --json "$WORK/doctor_standard.json"
step pytest_gpu 72 "$PY" -m pytest -m gpu tests/verify/test_verify_oom_recovery.py tests/gpu/test_graph_capture_gpu.py tests/gpu tests/doctor -q -p no:cacheprovider
{ echo "===== doctor_standard.json"; cat "$WORK/doctor_standard.json" 2>/dev/null || echo "(none)"; echo; } >> "$LOG"

{
  echo
  echo "===== steps"
  for name in "${ORDER[@]}"; do printf '  %-16s %s\n' "$name" "${STATUS[$name]}"; done
  echo "===== pytest summary"
  sed -n '/^===== pytest_gpu (/,/^===== pytest_gpu done/p' "$LOG" | grep -E "^(FAILED|ERROR) |(passed|failed|skipped|deselected|error).* in [0-9.]+s" | tail -12
  echo "===== doctor GPU figures (docs/benchmarks.md: opgate doctor, standard level)"
  "$PY" - "$WORK/doctor_standard.json" <<'PYEOF'
import json, sys
try:
    report = json.load(open(sys.argv[1]))
except Exception as exc:  # the doctor step failed: its log is above
    print(f"no doctor report: {type(exc).__name__}: {exc}")
    sys.exit(0)
print(f"doctor counts: {report.get('counts', {})}  wall {report.get('duration_s', 0):.1f} s")
wanted = ("doctor.hbm_bandwidth", "doctor.l2_bandwidth", "doctor.host_links", "doctor.launch_latency",
          "doctor.event_timing", "doctor.runtime_features", "doctor.stream_priority")
by_id = {r["check_id"]: r for r in report.get("results", [])}
print(f"{'check':26s} {'outcome':8s} figure")
for check_id in wanted:
    result = by_id.get(check_id)
    if result is None:
        print(f"{check_id:26s} {'-':8s} (not in the report)")
        continue
    print(f"{check_id:26s} {result['outcome']:8s} {result['reason'][:150]}")
    for fig in result.get("figures", [])[:8]:
        value = fig.get("value") if fig.get("value") is not None else fig.get("text")
        print(f"{'':35s} {fig['name'][:60]:60s} {value} {fig.get('unit') or ''}")
PYEOF
} 2>&1 | tee -a "$LOG"
rm -rf "$WORK"
