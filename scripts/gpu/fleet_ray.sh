#!/usr/bin/env bash
# opgate fleet on a three-node Ray cluster of the GPU host, Ray from the carried stripped wheels (run from anywhere;
# <= ~9 min; writes $OUT/fleet_ray.log and the JSON reports):
#   0. wheels  .whl-ray/ (scripts/strip_ray_wheel.sh, on a machine with PyPI) into /tmp/ray-site: Ray always, each
#              dependency only where this python lacks it or has a version Ray does not accept (a carried
#              protobuf or packaging put ahead of the host's would change what torch and onnx import)
#   1. plain   opgate doctor --level standard                             (wall time)
#   2. plain   opgate verify examples/ops/softmax.py $VERIFY_ARGS         (wall time)
#   3. ray     head (no GPU) + worker `gpu` (CUDA_VISIBLE_DEVICES = every GPU, --num-gpus N) + worker `cpu` (no GPU),
#              all on 127.0.0.1, named by their opgate_node_* resource     (start time)
#   4. fleet   opgate fleet doctor --level standard                        (wall time; node rows)
#   5. fleet   opgate fleet verify examples/ops/softmax.py $VERIFY_ARGS   (wall time; node rows)
#   6. compare per-check outcomes: plain vs the gpu node vs the others
# The head and `cpu` nodes hide the GPUs from CUDA only: NVML still lists them there, as on any node whose pods
# get CUDA_VISIBLE_DEVICES="" (their rows show what opgate makes of that). Every step's failure is printed, never
# fatal; the cluster is stopped by process id (each node's session, then processes naming this run's temp dir).
# Environment: PYTHON [python3], WHEELS [.whl-ray], FLEET_LEVEL [standard], VERIFY_ARGS [--budget quick --stages
# numerics --no-extras], FLEET_GPU_BUDGET_S [540]. The result table is printed LAST.
set -u
START_S=$(date +%s)
BUDGET_S="${FLEET_GPU_BUDGET_S:-540}"
OUT="${OUT:-/tmp/opgate-out}"
PY="${PYTHON:-python3}"
LEVEL="${FLEET_LEVEL:-standard}"
read -r -a VERIFY_ARGS <<< "${VERIFY_ARGS:---budget quick --stages numerics --no-extras}"
mkdir -p "$OUT"
LOG="$OUT/fleet_ray.log"
: > "$LOG"
WORK="$(mktemp -d /tmp/opgate-fleet-ray.XXXXXX)"
SITE=/tmp/ray-site
cd "$(dirname "$0")/../.." || exit 2
WHEELS="${WHEELS:-$PWD/.whl-ray}"
SPEC="$PWD/examples/ops/softmax.py"  # absolute: every node's task resolves it in its own working directory
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
# No usage stats, no token auth (Ray 2.5x+ turns it on once ~/.ray/auth_token exists); NVLink multicast stays off.
export PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0 RAY_AUTH_MODE=disabled
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

declare -A STATUS SECS NOTE
ORDER=(wheels plain plain_verify ray fleet_doctor fleet_verify compare)
for s in "${ORDER[@]}"; do STATUS[$s]="not run"; SECS[$s]="-"; NOTE[$s]=""; done
NODES=(head gpu cpu)
declare -A NODE_PID
log() { echo "$*" | tee -a "$LOG"; }
left() { echo $(( BUDGET_S - ($(date +%s) - START_S) )); }
since() { local ms=$(( ($(date +%s%N) - $1) / 1000000 )); printf '%d.%d' $(( ms / 1000 )) $(( ms % 1000 / 100 )); }
cleanup() {
  local pid node
  for node in "${!NODE_PID[@]}"; do  # each node's `ray start --block` and its whole session, by id
    for pid in $(ps -eo pid=,sid= | awk -v s="${NODE_PID[$node]}" '$2==s {print $1}'); do kill -9 "$pid" 2>/dev/null; done
  done
  for pid in $(pgrep -f "$WORK/ray" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done  # this run's own temp dir
  rm -rf "$WORK"
}
trap cleanup EXIT

log "== opgate fleet on Ray at $(date -u +%FT%TZ) on $(hostname); python: $($PY --version 2>&1) ($PY)"
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader >>"$LOG" 2>&1
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
GPUS=${GPUS:-0}
GPU_LIST=$(seq -s, 0 $(( GPUS - 1 )) 2>/dev/null)

# 0. the carried wheels
if ls "$WHEELS"/ray-*.whl >/dev/null 2>&1; then
  t0=$(date +%s%N)
  "$PY" - "$WHEELS"/*.whl >"$WORK/install.txt" 2>>"$LOG" <<'PYEOF'
import re
import sys
import zipfile
from importlib import metadata
from pathlib import Path


def canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()


wheels = [Path(w) for w in sys.argv[1:]]
ray_wheel = next(w for w in wheels if w.name.startswith("ray-"))
try:
    from packaging.requirements import Requirement
except ImportError:  # no packaging here: nothing to compare with, take every carried wheel
    Requirement = None
specifiers = {}
if Requirement:
    with zipfile.ZipFile(ray_wheel) as wheel:
        text = next(wheel.read(n).decode() for n in wheel.namelist()  # Ray's, not a vendored package's
                    if n.count("/") == 1 and n.endswith(".dist-info/METADATA"))
    for line in text.splitlines():
        if line.startswith("Requires-Dist: "):
            req = Requirement(line[len("Requires-Dist: "):])
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                specifiers[canonical(req.name)] = req.specifier
for wheel in wheels:
    name = canonical(wheel.name.split("-")[0])
    try:
        have = metadata.version(name) if name != "ray" else None
    except metadata.PackageNotFoundError:
        have = None
    wanted = specifiers.get(name)
    if have is None:
        print(wheel)
        print(f"  install {wheel.name}" + ("" if name == "ray" else f" ({name} is not installed here)"),
              file=sys.stderr)
    elif wanted is not None and not wanted.contains(have, prereleases=True):
        print(wheel)
        print(f"  install {wheel.name} (here {name} {have}, Ray wants {wanted})", file=sys.stderr)
    else:
        print(f"  keep this python's {name} {have}", file=sys.stderr)
PYEOF
  mapfile -t TO_INSTALL < "$WORK/install.txt"
  rm -rf "$SITE"
  timeout 120 "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "${TO_INSTALL[@]}" \
    >>"$LOG" 2>&1
  rc=$?
  SECS[wheels]=$(since "$t0")
  export PYTHONPATH="$PYTHONPATH:$SITE" PATH="$SITE/bin:$PATH"
  STATUS[wheels]="rc=$rc"
  NOTE[wheels]="${#TO_INSTALL[@]} of $(ls "$WHEELS"/*.whl | wc -l) wheels, $(du -sm "$WHEELS" | cut -f1) MB carried"
elif "$PY" -c "import ray" 2>/dev/null; then
  STATUS[wheels]="installed already"
else
  STATUS[wheels]="SKIP"; NOTE[wheels]="no $WHEELS/ray-*.whl (scripts/strip_ray_wheel.sh) and no Ray here"
fi
log "-- wheels: ${STATUS[wheels]} ${NOTE[wheels]}"

# 1-2. the plain verbs
t0=$(date +%s%N)
timeout 120 "$PY" -m opgate doctor --level "$LEVEL" --json "$OUT/plain_doctor.json" >>"$LOG" 2>&1
rc=$?
SECS[plain]=$(since "$t0"); STATUS[plain]="rc=$rc"
log "-- plain doctor --level $LEVEL: rc=$rc in ${SECS[plain]} s"
t0=$(date +%s%N)
timeout 180 "$PY" -m opgate verify "$SPEC" "${VERIFY_ARGS[@]}" --out "$WORK/verify-plain" \
  --json "$OUT/plain_verify.json" >>"$LOG" 2>&1
rc=$?
SECS[plain_verify]=$(since "$t0"); STATUS[plain_verify]="rc=$rc"
log "-- plain verify: rc=$rc in ${SECS[plain_verify]} s"

# 3. the cluster: head, then the two workers one at a time
ADDRESS=""
if "$PY" -c "import ray" 2>/dev/null && command -v ray >/dev/null && [ "$(left)" -gt 120 ]; then
  PORT=$(( 20000 + RANDOM % 20000 ))
  t0=$(date +%s%N)
  up=0
  for i in 0 1 2; do
    node=${NODES[$i]}
    base=$(( PORT + 10 * (i + 1) ))  # ports of its own: three nodes share 127.0.0.1
    args=(--block --disable-usage-stats --node-ip-address=127.0.0.1 --num-cpus=2 --object-store-memory=200000000
          "--resources={\"opgate_node_$node\": 1}" "--node-manager-port=$base" "--object-manager-port=$(( base + 1 ))"
          "--metrics-export-port=$(( base + 2 ))" "--dashboard-agent-listen-port=$(( base + 3 ))"
          "--dashboard-agent-grpc-port=$(( base + 4 ))" "--runtime-env-agent-port=$(( base + 5 ))")
    if [ "$node" = head ]; then
      args+=(--head "--port=$PORT" --include-dashboard=false "--temp-dir=$WORK/ray" --num-gpus=0)
      visible=""
    else
      args+=("--address=127.0.0.1:$PORT")
      if [ "$node" = gpu ]; then visible="$GPU_LIST"; args+=("--num-gpus=$GPUS"); else visible=""; args+=(--num-gpus=0); fi
    fi
    CUDA_VISIBLE_DEVICES="$visible" setsid "$(command -v ray)" start "${args[@]}" >"$WORK/$node.log" 2>&1 &
    NODE_PID[$node]=$!
    disown "${NODE_PID[$node]}"  # killed by id at exit; no job-control notice after the result table
    for _ in $(seq 1 120); do grep -q "Ray runtime started" "$WORK/$node.log" 2>/dev/null && break; sleep 0.5; done
    if grep -q "Ray runtime started" "$WORK/$node.log"; then up=$(( up + 1 )); else break; fi
  done
  SECS[ray]=$(since "$t0")
  if [ "$up" = 3 ]; then
    ADDRESS="127.0.0.1:$PORT"; STATUS[ray]="up"
    NOTE[ray]="$ADDRESS: head, gpu (CUDA_VISIBLE_DEVICES=$GPU_LIST, $GPUS GPU), cpu"
  else
    STATUS[ray]="FAILED"; NOTE[ray]="$up of 3 nodes started"
  fi
  for node in "${NODES[@]}"; do [ -f "$WORK/$node.log" ] && { echo "== ray start $node" >>"$LOG"; cat "$WORK/$node.log" >>"$LOG"; }; done
else
  STATUS[ray]="SKIP"; NOTE[ray]="Ray not importable (or no time left: $(left) s)"
fi
log "-- ray: ${STATUS[ray]} in ${SECS[ray]} s ${NOTE[ray]}"

# 4-5. the fleet verbs
if [ -n "$ADDRESS" ] && [ "$(left)" -gt 60 ]; then
  t0=$(date +%s%N)
  timeout $(( $(left) - 30 )) "$PY" -m opgate fleet doctor --address "$ADDRESS" --node-timeout 180 \
    --json "$OUT/fleet_doctor.json" --level "$LEVEL" >>"$LOG" 2>&1
  rc=$?
  SECS[fleet_doctor]=$(since "$t0"); STATUS[fleet_doctor]="rc=$rc"
  log "-- fleet doctor --level $LEVEL: rc=$rc in ${SECS[fleet_doctor]} s"
fi
if [ -n "$ADDRESS" ] && [ "$(left)" -gt 60 ]; then
  t0=$(date +%s%N)
  timeout $(( $(left) - 15 )) "$PY" -m opgate fleet verify --address "$ADDRESS" --node-timeout 240 \
    --json "$OUT/fleet_verify.json" "$SPEC" "${VERIFY_ARGS[@]}" --out "$WORK/verify-fleet" >>"$LOG" 2>&1
  rc=$?
  SECS[fleet_verify]=$(since "$t0"); STATUS[fleet_verify]="rc=$rc"
  log "-- fleet verify: rc=$rc in ${SECS[fleet_verify]} s"
fi

# 6. compare
"$PY" - "$OUT" >"$WORK/compare.txt" 2>&1 <<'PYEOF'
import json
import sys
from pathlib import Path

out = Path(sys.argv[1])


def load(name):
    path = out / name
    return json.loads(path.read_text()) if path.is_file() else None


for plain_name, fleet_name in (("plain_doctor.json", "fleet_doctor.json"), ("plain_verify.json", "fleet_verify.json")):
    plain, fleet = load(plain_name), load(fleet_name)
    if not plain or not fleet:
        print(f"{plain_name} / {fleet_name}: {'missing' if not plain else 'present'} / {'missing' if not fleet else 'present'}")
        continue
    rows = {}
    for result in fleet["results"]:
        node, _, check = result["check_id"].partition(":")
        rows.setdefault(check, {})[node] = result["outcome"]
    same = sum(1 for r in plain["results"] if rows.get(r["check_id"], {}).get("gpu") == r["outcome"])
    print(f"{fleet_name}: {same}/{len(plain['results'])} checks with the plain run's outcome on node gpu; "
          f"nodes: {[(n['node'], n['outcome'], round(n['duration_s'], 1)) for n in fleet['extra']['nodes']]}")
    for r in plain["results"]:
        other = rows.get(r["check_id"], {})
        print(f"  {r['check_id'][:44]:44s} plain={r['outcome']:8s} "
              + " ".join(f"{n}={other.get(n, '-'):8s}" for n in ("gpu", "head", "cpu")))
    for check, nodes in sorted(rows.items()):
        if check.startswith("fleet."):
            print(f"  {check[:44]:44s} " + " ".join(f"{n}={o}" for n, o in sorted(nodes.items())))
PYEOF
STATUS[compare]="rc=$?"; NOTE[compare]="$(head -1 "$WORK/compare.txt" | cut -c1-100)"
cat "$WORK/compare.txt" >>"$LOG"

{
  echo
  echo "== opgate fleet on Ray, GPU host: result ($(( $(date +%s) - START_S )) s total; level $LEVEL)"
  printf '%-13s | %-18s | %7s | %s\n' step status "wall s" note
  for s in "${ORDER[@]}"; do printf '%-13s | %-18s | %7s | %s\n' "$s" "${STATUS[$s]}" "${SECS[$s]}" "${NOTE[$s]}"; done
} | tee -a "$LOG"
