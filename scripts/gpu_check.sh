#!/usr/bin/env bash
# opgate's GPU verification in one go, for a machine with an NVIDIA GPU (run from the repository root):
#   1. the GPU tests            python3 -m pytest -m gpu tests/gpu
#   2. the measured probes      opgate doctor --level standard --json $OUT/doctor_standard.json  (timed)
#   3. the sanitizer suite      planted bugs + clean twins under memcheck/racecheck/initcheck/synccheck
#   4. the recovery trials      a sticky error (worker restarted); out of memory is verify's recovery stage
#   5. the copy-kernel sweep    benchmarks/copy_kernel_sweep.py beside cudaMemcpy (about 20 s)
#   6. probes vs PyTorch        benchmarks/probes_vs_torch.py: each probe beside PyTorch's plain equivalent
# and prints a short summary table LAST. Installs nothing. Every step runs even when an earlier one
# failed; the exit code is non-zero when any step failed. Results go to ${OUT:-/tmp/opgate-out}:
#   doctor_standard.json sanitizer.json recovery.json copy_sweep.json probes_vs_torch.json summary.txt logs.tar.gz
# Optional wheels installed elsewhere (e.g. /tmp/site) are used when PYTHONPATH already names them.
# SKIP_PYTEST=1 / SKIP_DOCTOR=1 / SKIP_SANITIZER=1 / SKIP_RECOVERY=1 / SKIP_COPY_SWEEP=1 / SKIP_VS_TORCH=1 leave a step out.
# GPU_CHECK_BUDGET_S (default 540) caps the whole run: each step's time limit is cut to what is left, so
# the summary is printed inside a 10-minute window even when a step hangs.
set -u
BUDGET_S="${GPU_CHECK_BUDGET_S:-540}"
START_S=$(date +%s)

OUT="${OUT:-/tmp/opgate-out}"
PY="${PYTHON:-python3}"
mkdir -p "$OUT"
WORK="$(mktemp -d /tmp/opgate-gpu-check.XXXXXX)"
LOGS="$WORK/logs"
mkdir -p "$LOGS/sanitizer"
cd "$(dirname "$0")/.." || exit 2
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
# Multi-GPU hosts of this workplace must keep NVLink multicast off (no opgate code uses it; belt and braces).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

STEPS=()
declare -A RC SECS

run_step() {  # run_step NAME TIMEOUT_S command...
  local name="$1" limit="$2"
  shift 2
  local t0 t1 left
  left=$(( BUDGET_S - ($(date +%s) - START_S) - 15 ))  # keep 15 s for the summary
  if [ "$left" -lt 20 ]; then
    echo "=== $name: not run, the time budget (${BUDGET_S} s) is spent" | tee -a "$LOGS/steps.log"
    RC[$name]=124; SECS[$name]=0; STEPS+=("$name")
    return
  fi
  [ "$left" -lt "$limit" ] && limit=$left
  echo "=== $name (limit ${limit} s): $*" | tee -a "$LOGS/steps.log"
  t0=$(date +%s.%N)
  timeout --kill-after=10 "$limit" "$@" >"$LOGS/$name.log" 2>&1
  RC[$name]=$?
  t1=$(date +%s.%N)
  SECS[$name]=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  STEPS+=("$name")
  tail -n 25 "$LOGS/$name.log"
  echo "=== $name: exit ${RC[$name]} in ${SECS[$name]} s" | tee -a "$LOGS/steps.log"
}

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(hostname) kernel $(uname -r)"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max,clocks.max.sm,clocks.max.mem --format=csv 2>&1
  nvidia-smi topo -m 2>&1 | head -20
  "$PY" - <<'PY' 2>&1
import importlib, sys
print("python", sys.version.split()[0], sys.executable)
for name in ("cupy", "torch", "triton", "numpy", "pynvml", "cuda.bindings"):
    try:
        module = importlib.import_module(name)
        print(name, getattr(module, "__version__", "?"))
    except Exception as exc:
        print(name, "not importable:", exc)
try:
    import cupy
    print("cuda runtime", cupy.cuda.runtime.runtimeGetVersion(), "driver", cupy.cuda.runtime.driverGetVersion(),
          "nvrtc", cupy.cuda.nvrtc.getVersion())
except Exception as exc:
    print("cupy cuda:", exc)
PY
  command -v compute-sanitizer && compute-sanitizer --version 2>&1 | tail -2 || echo "compute-sanitizer not on PATH"
} >"$LOGS/env.txt" 2>&1
cat "$LOGS/env.txt"

[ "${SKIP_PYTEST:-0}" = 1 ] || run_step pytest_gpu 330 \
  "$PY" -m pytest -m gpu tests -ra -p no:cacheprovider --junitxml="$LOGS/pytest_gpu.xml"

[ "${SKIP_DOCTOR:-0}" = 1 ] || run_step doctor_standard 150 \
  "$PY" -m opgate doctor --level standard --verbose --json "$OUT/doctor_standard.json" --junit "$LOGS/doctor_standard.xml"

[ "${SKIP_SANITIZER:-0}" = 1 ] || run_step sanitizer 330 \
  "$PY" tests/data/gpu/gpu_sanitizer_tool.py planted --json "$OUT/sanitizer.json" --log-dir "$LOGS/sanitizer" --timeout 90

[ "${SKIP_RECOVERY:-0}" = 1 ] || run_step recovery 150 \
  "$PY" tests/data/gpu/gpu_recovery.py --trials 5 --json "$OUT/recovery.json"

[ "${SKIP_COPY_SWEEP:-0}" = 1 ] || run_step copy_sweep 120 \
  "$PY" benchmarks/copy_kernel_sweep.py --json "$OUT/copy_sweep.json"

[ "${SKIP_VS_TORCH:-0}" = 1 ] || run_step probes_vs_torch 120 \
  "$PY" benchmarks/probes_vs_torch.py --json "$OUT/probes_vs_torch.json"

STEP_LINES=""
for name in "${STEPS[@]}"; do
  STEP_LINES+="$name ${RC[$name]} ${SECS[$name]}"$'\n'
done
printf '%s' "$STEP_LINES" >"$LOGS/steps.tsv"

"$PY" - "$OUT" "$LOGS/steps.tsv" "$LOGS/pytest_gpu.xml" >"$OUT/summary.txt" 2>&1 <<'PY'
import json, sys
import xml.etree.ElementTree as ET
from pathlib import Path

out, steps_file, junit = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])

RAN = {line.split()[0] for line in steps_file.read_text().splitlines() if line.strip()}

def load(name):
    step = name.removesuffix(".json")
    if step not in RAN:
        return {"_missing": f"not run this time (step {step} left out)"}
    try:
        return json.loads((out / name).read_text())
    except (OSError, ValueError) as exc:
        return {"_missing": f"{name}: {exc}"}

def fig(result, limit=3):
    parts = []
    for f in result.get("figures", [])[:limit]:
        value = f["value"] if f.get("value") is not None else f.get("text", f["value"])  # schema 2: text figures
        value = f"{value:.4g}" if isinstance(value, float) else str(value)
        threshold = f.get("threshold")
        goal = f" (goal {threshold['comparison']} {threshold['value']})" if threshold else ""
        parts.append(f"{f['name']}={value} {f['unit']}{goal}".strip())
    return "; ".join(parts)

print("=" * 100)
print("opgate GPU check summary")
print("-" * 100)
print(f"{'step':18s} {'exit':>4s} {'seconds':>8s}")
for line in steps_file.read_text().splitlines():
    name, rc, secs = line.split()
    print(f"{name:18s} {rc:>4s} {secs:>8s}" + ("   <- FAILED" if rc != "0" else ""))
try:
    suite = ET.parse(junit).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    a = suite.attrib
    print(f"pytest -m gpu: {a.get('tests')} tests, {a.get('failures')} failed, {a.get('errors')} errors, "
          f"{a.get('skipped')} skipped in {float(a.get('time', 0)):.1f} s")
    for case in suite.iter("testcase"):
        for bad in list(case.findall("failure")) + list(case.findall("error")):
            print(f"  FAILED {case.get('name')}: {(bad.get('message') or '')[:160]}")
except (OSError, ET.ParseError, AttributeError) as exc:
    print(f"pytest -m gpu: no junit report ({exc})")
doctor = load("doctor_standard.json")
print("-" * 100)
if "_missing" in doctor:
    print("doctor --level standard:", doctor["_missing"])
else:
    print(f"doctor --level standard: {doctor['duration_s']:.1f} s wall (goal <= 30 s), exit {doctor['exit_code']}, "
          f"{doctor['counts']}")
    for r in doctor["results"]:
        print(f"  {r['outcome']:7s} {r['check_id']:24s} {r['duration_s']:6.2f}s  {r['reason'][:150]}")
        if r["check_id"] in ("doctor.hbm_bandwidth", "doctor.l2_bandwidth", "doctor.host_links",
                             "doctor.launch_latency", "doctor.stream_priority", "doctor.event_timing", "doctor.p2p"):
            detail = fig(r, 4)
            if detail:
                print(f"          {detail[:240]}")
san = load("sanitizer.json")
print("-" * 100)
if "_missing" in san:
    print("sanitizer suite:", san["_missing"])
else:
    print(f"sanitizer suite: {san['status']} {san.get('reason', '')}"
          + (f" caught {san['caught']}/{san['judged']}, clean twins {san['clean_passed']}/{san['judged']}, "
             f"{san['duration_s']} s, {san.get('sanitizer_version', '')}" if san.get("cases") else ""))
    for c in san.get("cases", []):
        first = c.get("first_finding") or {}
        where = f"{first.get('kind')} in {first.get('kernel')} thread {first.get('thread')} block {first.get('block')}" if first else ""
        print(f"  {c['status']:14s} {c['case']:18s} {c['tool']:10s} caught={c['caught']} clean={c['clean_passed']} {where} {c['note'][:120]}")
rec = load("recovery.json")
print("-" * 100)
if "_missing" in rec:
    print("recovery trials:", rec["_missing"])
else:
    s = rec.get("summary", {})
    print(f"recovery: {rec['status']}: {rec['reason']}")
    print(f"  sticky: {s.get('sticky_trials')} trials, success rate {s.get('sticky_success_rate')}, mean recover "
          f"{s.get('sticky_mean_recover_s')} s, max {s.get('sticky_max_recover_s')} s")
sweep = load("copy_sweep.json")
print("-" * 100)
if "_missing" in sweep:
    print("copy-kernel sweep:", sweep["_missing"])
else:
    for place in dict.fromkeys(r["placement"] for r in sweep["rows"]):
        final = [r for r in sweep["rows"] if r.get("final") and r["placement"] == place]
        if final:
            best = max(final, key=lambda r: r["tbs"])
            print(f"copy-kernel sweep, {place}: best {best['kernel']} threads={best['threads']} "
                  f"blocks/SM={best['blocks_per_sm']} {best['tbs']:.3f} TB/s = {100 * best['ratio']:.1f}% of "
                  f"cudaMemcpy {best['memcpy_tbs']:.3f} TB/s")
vs = load("probes_vs_torch.json")
print("-" * 100)
if "_missing" in vs:
    print("probes vs PyTorch:", vs["_missing"])
else:
    print(f"probes vs PyTorch ({vs['device']}): figure | opgate | PyTorch | reference")
    for row in vs["rows"]:
        print("  " + " | ".join(row))
    for note in vs["notes"]:
        print("  not measured:", note)
print("=" * 100)
PY

tar -czf "$OUT/logs.tar.gz" -C "$WORK" logs 2>/dev/null
FAILED=0
for name in "${STEPS[@]}"; do
  [ "${RC[$name]}" = 0 ] || FAILED=1
done
cat "$OUT/summary.txt"
echo "results in $OUT: $(cd "$OUT" && ls | tr '\n' ' ')"
exit "$FAILED"
