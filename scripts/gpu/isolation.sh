#!/usr/bin/env bash
# GPU evidence for the `isolation` work (issue 13 items 6-7, issue 14 item 5), from the repository root:
#   1. the planted memory-safety bugs of tests/data/verify/planted_memory.py (CUDA C through CuPy RawModule on
#      PyTorch tensors from the caching allocator, and CuPy pool arrays) through
#      `opgate verify --stages numerics,sanitizer --sanitizer-tools memcheck`: each bug must be caught by the
#      sanitizer stage (allocator caches off, --track-stream-ordered-races all, a tail size), each twin clean;
#   2. tests/data/verify/gpu_crash_spec.py: a sticky CUDA error (illegal address) on one case must be a `crash`
#      failure of that implementation, the other cases judged in a fresh process, the twin passing.
# Everything goes into ONE file, $OUT/isolation.log; the result table is printed last. Under 120 s on an H200
# (each step has its own limit; a failed step is reported and the next one still runs).
set -u
OUT="${OUT:-/tmp/opgate-out}"
mkdir -p "$OUT"
LOG="$OUT/isolation.log"
WORK="$(mktemp -d /tmp/opgate-isolation.XXXXXX)"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
: >"$LOG"
started=$(date +%s)
source "$(dirname "$0")/step.sh"  # step NAME TIMEOUT_S COMMAND...

{
  echo "=== host"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  python3 -c "import torch, cupy; print('torch', torch.__version__, 'cuda', torch.version.cuda, '| cupy', cupy.__version__)" 2>&1
  SAN="$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)"
  echo "compute-sanitizer: ${SAN:-not found}"
  if [ -n "$SAN" ]; then
    "$SAN" --version 2>&1 | tail -2
    echo "--track-stream-ordered-races in --help: $("$SAN" --help 2>&1 | grep -c -- --track-stream-ordered-races)"
  fi
} >>"$LOG" 2>&1

# Beside it (in the background, its own limit): the planted out-of-bounds write under plain memcheck with
# PyTorch's caching allocator on (what the stage did before: expected to miss it) and off (expected to catch it).
(
  for caching in on off; do
    if [ "$caching" = off ]; then export PYTORCH_NO_CUDA_MEMORY_CACHING=1; fi
    echo "--- memcheck of oob_write at the declared size, caching allocator $caching"
    timeout 33 python3 tests/data/gpu/gpu_sanitizer_tool.py run --tool memcheck opgate.verify.runtime \
      tests/data/verify/planted_memory.py double oob_write float32 2>&1 | tail -4
  done
) >"$WORK/baseline.txt" 2>&1 &
baseline=$!

step planted_memory 70 python3 -m opgate verify tests/data/verify/planted_memory.py --stages numerics,sanitizer \
  --sanitizer-tools memcheck --budget quick --no-extras --jobs 8 --json "$WORK/planted.json" --out "$WORK/art"
step gpu_crash 36 python3 -m opgate verify tests/data/verify/gpu_crash_spec.py --stages numerics --budget quick \
  --no-extras --jobs 2 --json "$WORK/crash.json" --out "$WORK/art"
for name in "${ORDER[@]}"; do echo "$name: exit ${RC[$name]} in ${SECS[$name]} s"; done

wait "$baseline"
{ echo "=== baseline (caching allocator on vs off, plain memcheck)"; cat "$WORK/baseline.txt"; } >>"$LOG"

python3 - "$WORK" >"$WORK/table.txt" 2>&1 <<'PY'
import json, sys
from pathlib import Path

work = Path(sys.argv[1])
print("=" * 100)
planted_path = work / "planted.json"
if planted_path.is_file():
    sys.path.insert(0, "tests/data/verify")
    from planted_memory import PLANTED

    results = {r["check_id"]: r for r in json.loads(planted_path.read_text())["results"]}
    stage = results.get("verify.double.sanitizer")
    if stage:
        print(f"sanitizer stage {stage['outcome']}: {stage['reason'][:200]}")
    print(f"{'planted implementation':28s} {'kind':5s} {'numerics':9s} {'memcheck':9s} verdict")
    for impl, kind in PLANTED.items():
        numerics = results.get(f"verify.double.{impl}.float32", {}).get("outcome", "absent")
        sanitizer = results.get(f"verify.double.{impl}.sanitizer", {})
        outcome = sanitizer.get("outcome", "absent")
        if kind == "bug":
            verdict = "caught" if outcome == "failed" else f"MISSED ({outcome})"
        else:
            verdict = "clean" if outcome == "passed" else f"FALSE ALARM ({outcome})"
        print(f"{impl:28s} {kind:5s} {numerics:9s} {outcome:9s} {verdict}")
        print(f"    {sanitizer.get('reason', '')[:300]}")
else:
    print("planted_memory: no report (see the step's exit above)")
crash_path = work / "crash.json"
if crash_path.is_file():
    results = {r["check_id"]: r for r in json.loads(crash_path.read_text())["results"]}
    for impl in ("sticky_error", "sticky_error_twin"):
        r = results.get(f"verify.double.{impl}.float32", {})
        extra = r.get("extra", {})
        print(f"gpu_crash {impl:18s} {r.get('outcome', 'absent'):7s} class={extra.get('failure_class', '-')} "
              f"crashes={len(extra.get('crashes', []))} judged={extra.get('cases_judged', '-')}/"
              f"{extra.get('cases_planned', '-')}")
        print(f"    {r.get('reason', '')[:300]}")
else:
    print("gpu_crash: no report (see the step's exit above)")
baseline = work / "baseline.txt"
if baseline.is_file():
    for line in baseline.read_text().splitlines():
        if line.startswith("---") or line.startswith("memcheck:"):
            print(f"baseline {line}")
PY

{
  for report in "$WORK"/planted.json "$WORK"/crash.json; do
    [ -f "$report" ] && { echo "=== report $report"; cat "$report"; echo; }
  done
  echo "=== table"; cat "$WORK/table.txt"
  echo "=== total $(( $(date +%s) - started )) s"
} >>"$LOG" 2>&1
rm -rf "$WORK"
cat "$LOG" | sed -n '/^=== table$/,$p' | tail -n +2
