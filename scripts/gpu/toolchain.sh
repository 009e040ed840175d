#!/usr/bin/env bash
# Issue 19 on a GPU host (NVIDIA H200 expected), from the repository root:
#   OUT=/some/dir bash scripts/gpu/toolchain.sh
# 1. builds tests/data/toolchain/planted_limiters.cu with nvcc (four kernels, one planted limiter each);
# 2. measures this card's HBM and L2 read ceilings (opgate doctor, two probes) into a private cache;
# 3. profiles each planted kernel: ncu --clock-control none --set full, saved as .ncu-rep, exported as CSV
#    (--page raw and --page details) -> planted_<kernel>.{ncu-rep,raw.csv,details.csv};
# 4. opgate explain on the CSVs (and once on a .ncu-rep through ncu --import): the limiter named per kernel;
# 5. runs the nvcc and the clang build of tests/data/toolchain/kernels.cu on the same inputs (CuPy), then
#    opgate verify tests/data/toolchain/two_builds_spec.py with the time left.
# Everything goes into $OUT/toolchain.tar.gz (toolchain.log inside holds every command's output); the files
# planted_*.{raw.csv,details.csv,ncu-rep} and explain.json are what tests/data/ncu/h200/ expects. A failing
# step is printed and the rest still run; the whole run stays inside TOOLCHAIN_BUDGET_S (default 115 s).
# The result table is printed last.
set -u
BUDGET_S="${TOOLCHAIN_BUDGET_S:-115}"
START_S=$(date +%s)
OUT="${OUT:-/tmp/opgate-out}"
PY="${PYTHON:-python3}"
mkdir -p "$OUT"
source "$(dirname "$0")/step.sh"  # step NAME MAX_S COMMAND...
STEP_DEADLINE=$(( START_S + BUDGET_S - 8 ))  # each step runs with min(MAX_S, budget left - 8) seconds
cd "$(dirname "$0")/../.." || exit 2
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
WORK="$(mktemp -d /tmp/opgate-toolchain.XXXXXX)"
LOG="$WORK/toolchain.log"
export OPGATE_CACHE_DIR="$WORK/cache"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | tail -1)
NCU=${NCU:-ncu}
[ -x "$NCU" ] && export PATH="$(dirname "$NCU"):$PATH"  # opgate explain reads .ncu-rep through the same ncu
KERNELS=(barrier_bound latency_bound register_bound bank_conflicts)
EXPECTED=(barrier latency occupancy bank-conflicts)

{ echo "opgate toolchain run $(date -u +%FT%TZ) on $(hostname)"; git rev-parse HEAD 2>/dev/null;
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>&1; echo "ncu: $NCU"; command -v nvcc;
  "$NCU" --version 2>&1 | tail -1; nvcc --version 2>&1 | tail -1; } > "$LOG"

step build 40 nvcc -O3 -arch=sm_90 -lineinfo -Xptxas -v -o "$WORK/planted_limiters" tests/data/toolchain/planted_limiters.cu
step ceilings 35 "$PY" -m opgate doctor --level standard --check hbm_bandwidth --check l2_bandwidth --json "$WORK/doctor.json"
cp -f "$OPGATE_CACHE_DIR/ceilings.json" "$WORK/ceilings.json" 2>/dev/null

for k in "${KERNELS[@]}"; do
  if [ -x "$WORK/planted_limiters" ]; then
    step "ncu:$k" 25 "$NCU" --clock-control none --set full --launch-count 1 -f -o "$WORK/planted_$k" "$WORK/planted_limiters" "$k"
    if [ -f "$WORK/planted_$k.ncu-rep" ]; then
      "$NCU" --import "$WORK/planted_$k.ncu-rep" --csv --page raw > "$WORK/planted_$k.raw.csv" 2>> "$LOG"
      "$NCU" --import "$WORK/planted_$k.ncu-rep" --csv --page details > "$WORK/planted_$k.details.csv" 2>> "$LOG"
    fi
  fi
done

# only exports that hold launches (a failed profile leaves an empty CSV, which explain would refuse)
CSVS=(); DETAILS=()
for k in "${KERNELS[@]}"; do
  grep -q '^"ID"' "$WORK/planted_$k.raw.csv" 2>/dev/null && CSVS+=("$WORK/planted_$k.raw.csv")
  grep -q '^"ID"' "$WORK/planted_$k.details.csv" 2>/dev/null && DETAILS+=("$WORK/planted_$k.details.csv")
done
if [ "${#CSVS[@]}" -gt 0 ]; then
  step explain 25 "$PY" -m opgate explain "${CSVS[@]}" --verbose --json "$WORK/explain.json" --chart "$WORK/roofline.png"
  [ "${#DETAILS[@]}" -gt 0 ] && step explain-details 15 "$PY" -m opgate explain "${DETAILS[@]}" --json "$WORK/explain_details.json"
  REP=$(ls "$WORK"/planted_*.ncu-rep 2>/dev/null | head -1)
  [ -n "$REP" ] && step explain-import 20 "$PY" -m opgate explain "$REP"
fi

step two-builds 30 "$PY" - <<'EOF'
"""Both builds' kernels on the same inputs: each against the other and against torch."""
import sys
sys.path.insert(0, "tests/data/toolchain")
import torch
import two_builds_spec as spec

torch.manual_seed(0)
worst = 0.0
for M, N in ((64, 1024), (3, 4097), (1000, 97)):
    x = torch.randn(M, N, device="cuda", dtype=torch.float32)
    for name, fn, ref in (("row_sum", spec._row_sum, x.double().sum(-1)), ("transpose", spec._transpose, x.t())):
        a, b = fn("nvcc", x), fn("clang", x)
        torch.cuda.synchronize()
        between = (a - b).abs().max().item()
        vs_ref = max((a.double() - ref).abs().max().item(), (b.double() - ref).abs().max().item())
        worst = max(worst, between)
        print(f"{name} M={M} N={N}: max |nvcc - clang| = {between:.3g}, max |build - float64 truth| = {vs_ref:.3g}")
print(f"worst difference between the builds: {worst:.3g}")
EOF
step verify 80 "$PY" -m opgate verify tests/data/toolchain/two_builds_spec.py --budget quick --stages numerics \
  --no-extras --no-shrink --jobs 4 --json "$WORK/verify_two_builds.json"

tar czf "$OUT/toolchain.tar.gz" -C "$WORK" --exclude planted_limiters --exclude cache . 2>/dev/null \
  || echo "tar failed" >&2

for name in "${ORDER[@]}"; do
  [ "${RC[$name]:-0}" -ne 0 ] && echo "step $name failed (rc=${RC[$name]}); see toolchain.log" >&2
done
echo
echo "== opgate toolchain ($(($(date +%s) - START_S)) s; $OUT/toolchain.tar.gz)"
printf '%-18s %s\n' step status
for name in "${ORDER[@]}"; do printf '%-18s %s\n' "$name" "${STATUS[$name]}"; done
if [ -f "$WORK/explain.json" ]; then
  "$PY" - "$WORK/explain.json" "${KERNELS[*]}" "${EXPECTED[*]}" <<'EOF'
import json, sys
launches = [r["extra"] for r in json.load(open(sys.argv[1]))["results"]]
expected = dict(zip(sys.argv[2].split(), sys.argv[3].split()))
print(f"{'kernel':<16} {'expected':<15} {'named':<15} ok")
for kernel, want in expected.items():
    got = next((l["limiter"] for l in launches if kernel in l["kernel"]), "missing")
    print(f"{kernel:<16} {want:<15} {got:<15} {'yes' if got == want else 'NO'}")
EOF
fi
grep -E "^worst difference" "$LOG" || true
grep -E "passed|failed" "$LOG" | grep -E "exit code" | tail -1 || true
