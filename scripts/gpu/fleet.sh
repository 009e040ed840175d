#!/usr/bin/env bash
# opgate fleet on the GPU host (run from the repository root; <= 120 s; writes ONE file, $OUT/fleet.log):
#   1. plain   opgate doctor --level standard --json                     (wall time)
#   2. ray     `ray start --head --num-gpus=N` on this host: a one-node Ray cluster (start time)
#   3. fleet   opgate fleet doctor --address <it> --level standard --json (wall time, same checks via Ray)
#   4. compare outcomes per check and the HBM read figure of both reports; bytes per report
# Ray and prometheus-client are not installed on the GPU host: when wheels are present under .whl/
# (e.g. `pip download ray prometheus-client -d .whl --only-binary=:all: --python-version 3.X` on a
# machine with internet) they are installed into a private --target folder for this run only;
# without them steps 2-3 are skipped with that reason. Every step's failure is printed, never fatal.
# The short result table is printed LAST.
set -u
START_S=$(date +%s)
BUDGET_S="${FLEET_GPU_BUDGET_S:-115}"
OUT="${OUT:-/tmp/opgate-out}"
PY="${PYTHON:-python3}"
mkdir -p "$OUT"
LOG="$OUT/fleet.log"
: > "$LOG"
WORK="$(mktemp -d /tmp/opgate-fleet-gpu.XXXXXX)"
cd "$(dirname "$0")/../.." || exit 2
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
# A one-node cluster on 127.0.0.1 for one minute: no token auth (else Ray 2.5x+ enables it once ~/.ray/auth_token exists).
export PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0 RAY_AUTH_MODE=disabled
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

declare -A STATUS SECS NOTE
ORDER=(plain wheels ray fleet compare)
for s in "${ORDER[@]}"; do STATUS[$s]="not run"; SECS[$s]="-"; NOTE[$s]=""; done
log() { echo "$*" | tee -a "$LOG"; }
left() { echo $(( BUDGET_S - ($(date +%s) - START_S) )); }
since() { local ms=$(( ($(date +%s%N) - $1) / 1000000 )); printf '%d.%d' $(( ms / 1000 )) $(( ms % 1000 / 100 )); }
RAY_PID=""
cleanup() {
  if [ -n "$RAY_PID" ]; then  # the head node's `ray start --block` and its whole session, by id
    for pid in $(ps -eo pid=,sid= | awk -v s="$RAY_PID" '$2==s {print $1}'); do kill -9 "$pid" 2>/dev/null; done
    for pid in $(pgrep -f "$WORK/ray" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done  # this run's own temp dir
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

log "== opgate fleet on $(hostname) at $(date -u +%FT%TZ); python: $($PY --version 2>&1)"
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader >>"$LOG" 2>&1
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
GPUS=${GPUS:-0}

# 1. the plain doctor
t0=$(date +%s%N)
timeout 50 "$PY" -m opgate doctor --level standard --json "$WORK/plain.json" >>"$LOG" 2>&1
rc=$?
SECS[plain]=$(since "$t0")
STATUS[plain]="rc=$rc"; [ -s "$WORK/plain.json" ] && NOTE[plain]="$(stat -c %s "$WORK/plain.json") bytes"
log "-- plain doctor: rc=$rc in ${SECS[plain]} s"

# 2. Ray from wheels, if any
if "$PY" -c "import ray, prometheus_client" 2>/dev/null; then
  STATUS[wheels]="installed already"
elif ls .whl/ray-*.whl >/dev/null 2>&1; then
  t0=$(date +%s%N)
  timeout 60 "$PY" -m pip install -q --no-index --find-links .whl --target "$WORK/site" ray prometheus-client \
    >>"$LOG" 2>&1
  rc=$?
  SECS[wheels]=$(since "$t0")
  export PYTHONPATH="$PYTHONPATH:$WORK/site" PATH="$WORK/site/bin:$PATH"
  STATUS[wheels]="rc=$rc"
else
  STATUS[wheels]="SKIP"; NOTE[wheels]="no .whl/ray-*.whl: Ray is not installed on this host"
fi
log "-- wheels: ${STATUS[wheels]} ${NOTE[wheels]}"

if "$PY" -c "import ray" 2>/dev/null && command -v ray >/dev/null && [ "$(left)" -gt 40 ]; then
  PORT=$(( 20000 + RANDOM % 20000 ))
  t0=$(date +%s%N)
  setsid "$(command -v ray)" start --head --block --disable-usage-stats --node-ip-address=127.0.0.1 \
    --port="$PORT" --num-gpus="$GPUS" --include-dashboard=false --object-store-memory=200000000 \
    --temp-dir="$WORK/ray" >"$WORK/ray.log" 2>&1 &
  RAY_PID=$!
  disown "$RAY_PID"  # killed by id at exit; no job-control notice after the result table
  for _ in $(seq 1 60); do grep -q "Ray runtime started" "$WORK/ray.log" 2>/dev/null && break; sleep 0.5; done
  SECS[ray]=$(since "$t0")
  if grep -q "Ray runtime started" "$WORK/ray.log"; then
    STATUS[ray]="up"; NOTE[ray]="127.0.0.1:$PORT, $GPUS GPU(s)"
    t0=$(date +%s%N)
    timeout $(( $(left) - 8 )) "$PY" -m opgate fleet doctor --address "127.0.0.1:$PORT" --node-timeout 60 \
      --json "$WORK/fleet.json" --level standard >>"$LOG" 2>&1
    rc=$?
    SECS[fleet]=$(since "$t0")
    STATUS[fleet]="rc=$rc"; [ -s "$WORK/fleet.json" ] && NOTE[fleet]="$(stat -c %s "$WORK/fleet.json") bytes"
  else
    STATUS[ray]="FAILED"; NOTE[ray]="ray start did not come up"
  fi
  cat "$WORK/ray.log" >>"$LOG"
else
  STATUS[ray]="SKIP"; STATUS[fleet]="SKIP"; NOTE[fleet]="Ray not importable (or no time left: $(left) s)"
fi
log "-- ray: ${STATUS[ray]} ${NOTE[ray]}; fleet: ${STATUS[fleet]} in ${SECS[fleet]} s"

# 4. compare the two reports
if [ -s "$WORK/plain.json" ] && [ -s "$WORK/fleet.json" ]; then
  "$PY" - "$WORK/plain.json" "$WORK/fleet.json" >"$WORK/compare.txt" 2>&1 <<'PYEOF'
import json, sys
plain, fleet = (json.load(open(p)) for p in sys.argv[1:3])
by_plain = {r["check_id"]: r for r in plain["results"]}
by_fleet = {r["check_id"].split(":", 1)[1]: r for r in fleet["results"] if ":" in r["check_id"]}
same = sum(1 for k, r in by_plain.items() if k in by_fleet and by_fleet[k]["outcome"] == r["outcome"])
print(f"checks with the same outcome: {same}/{len(by_plain)}")
for k, r in sorted(by_plain.items()):
    f = by_fleet.get(k)
    print(f"  {k:28s} plain={r['outcome']:8s} fleet={(f or {}).get('outcome', 'missing'):8s} "
          f"{r['duration_s']:.1f}s / {(f or {}).get('duration_s', 0):.1f}s")
    for fig in r["figures"]:
        if "HBM read (opgate kernel)" in fig["name"]:
            other = next((g["value"] for g in (f or {}).get("figures", []) if g["name"] == fig["name"]), None)
            print(f"    {fig['name']}: plain {fig['value']} {fig['unit']}, fleet {other} {fig['unit']}")
nodes = fleet["extra"]["nodes"]
print("fleet nodes:", [(n["node"], n["outcome"], n["duration_s"]) for n in nodes])
print(f"bytes per node report (plain JSON): {len(json.dumps(plain))}")
PYEOF
  STATUS[compare]="rc=$?"; NOTE[compare]="$(head -1 "$WORK/compare.txt")"
  cat "$WORK/compare.txt" >>"$LOG"
else
  STATUS[compare]="SKIP"; NOTE[compare]="needs both reports"
fi
for f in plain fleet; do [ -s "$WORK/$f.json" ] && { echo "== $f.json" >>"$LOG"; cat "$WORK/$f.json" >>"$LOG"; }; done

{
  echo
  echo "== opgate fleet on the GPU host: result ($(( $(date +%s) - START_S )) s total)"
  printf '%-8s | %-18s | %7s | %s\n' step status "wall s" note
  for s in "${ORDER[@]}"; do printf '%-8s | %-18s | %7s | %s\n' "$s" "${STATUS[$s]}" "${SECS[$s]}" "${NOTE[$s]}"; done
} | tee -a "$LOG"
