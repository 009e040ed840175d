#!/usr/bin/env bash
# GPU evidence for issue 18 (GPU resource governance): topology facts and measured isolation / QoS.
# Run from the repo root on a GPU host:  bash scripts/gpu/governance.sh
# Writes everything into ONE file, $OUT/governance.log (OUT defaults to ./opgate-report), within ~120 s,
# and prints a short result table last. Each step's failure is printed and does not stop the others.
set -u
OUT="${OUT:-opgate-report}"
mkdir -p "$OUT"
LOG="$OUT/governance.log"
: > "$LOG"
export PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}"
PY="${PYTHON:-python3}"
source "$(dirname "$0")/step.sh"  # step NAME TIMEOUT_S COMMAND...

step host 10 bash -c 'date -u; hostname; nvidia-smi --query-gpu=index,name,driver_version,compute_mode,mig.mode.current --format=csv; nvidia-smi topo -m'

step topology 20 "$PY" - <<'PYEOF'
import json
from opgate.probes.topology import collect_topology
from opgate.doctor.topology import judge_topology
snap = collect_topology()
print(json.dumps(snap.to_dict(), indent=1))
outcome, reason, figures, _ = judge_topology(snap)
print("TOPOLOGY", outcome.value, reason)
PYEOF

step doctor_topology 30 "$PY" -m opgate doctor --check topology --json "$OUT/governance-topology.json" -v

step qos 100 "$PY" - <<'PYEOF'
import json, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a timeout still runs the MPS daemon's stop (finally)
from opgate.gpu.probes.qos import measure_qos
from opgate.doctor.qos import judge_qos, latency_summary
started = time.time()
m = measure_qos(samples=300, probe_us=50.0, neighbour_percent=50, pinned_limit_mb=1024, timeout_s=30, budget_s=80)
print(json.dumps(m.to_dict()))
outcome, reason, figures, remediation = judge_qos(m)
print("QOS", outcome.value, reason)
for mode in m.modes:
    if mode.latencies_us:
        s = latency_summary(mode.latencies_us)
        print(f"QOSROW {mode.mode:12s} p50 {s['p50']:9.1f} us  p95 {s['p95']:9.1f} us  p99 {s['p99']:9.1f} us  n={len(mode.latencies_us)}")
    else:
        print(f"QOSROW {mode.mode:12s} not measured: {mode.unavailable}")
    if mode.details:
        print("DETAILS", mode.mode, json.dumps(mode.details)[:600])
print("PINNED", m.pinned_note)
print(f"QOS total {time.time() - started:.1f}s")
PYEOF

# a private MPS daemon left behind (only ours: pipe directories under opgate-mps-*) is told to quit, nothing else
step mps_leftovers 15 bash -c 'for d in "${TMPDIR:-/tmp}"/opgate-mps-*; do [ -d "$d/pipe" ] || continue; echo "quitting leftover daemon of $d"; echo quit | CUDA_MPS_PIPE_DIRECTORY="$d/pipe" CUDA_MPS_LOG_DIRECTORY="$d/log" timeout 10 nvidia-cuda-mps-control; done; pgrep -a nvidia-cuda-mps || echo "no MPS process running"'

{
  echo
  echo "=== governance results ==="
  for name in host topology doctor_topology qos mps_leftovers; do printf '%-16s %s\n' "$name" "${STATUS[$name]:-not run}"; done
  grep -E '^(TOPOLOGY|QOS |QOSROW|PINNED)' "$LOG" | sed 's/^QOSROW /  /'
} | tee -a "$LOG"
