#!/usr/bin/env bash
# H200: softmax at its default stages on an idle machine: the process wall of each run beside its report's phases.
# MODES (default "cold reuse nocache nocache"): cold = caches on, nothing stored; reuse = the same again (verdicts
# reused); nocache = --no-cache (a warm Triton cache); bcpu = --no-cache with OPGATE_BOUNDS_DEVICE=cpu; importtime =
# --no-cache under python -X importtime; spareN = --no-cache with N spare warm workers (OPGATE_SPARE_WORKERS); nosan =
# --no-cache without the sanitizer stage; numerics = --no-cache, numerics alone; calib = the float32 plan's calibration
# alone under cProfile, one torch thread (benchmarks/profile_calibration.py --gpu), what it costs with the cores idle.
# Results in $OUT/a (times.txt, runN.json, runN.log), packed as $OUT/a.tgz.
set -u
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 OPGATE_CACHE_DIR=/tmp/oc
mkdir -p "$OUT/a"
{ nvidia-smi --query-gpu=name,utilization.gpu,memory.used --format=csv; uptime; } > "$OUT/a/smi.txt" 2>&1
timed() {  # timed LABEL COMMAND...: the command's wall seconds and exit code, one line in times.txt
  local label="$1"; shift
  python3 - "$label" "$@" >> "$OUT/a/times.txt" <<'PY'
import subprocess, sys, time
started = time.perf_counter()
rc = subprocess.call(sys.argv[2:])
print(f"{sys.argv[1]}: {time.perf_counter() - started:.2f} s wall, exit {rc}")
PY
}
timed torch_cuda_init python3 -c "import torch; torch.cuda.init()"
python3 -c "import time; t = time.perf_counter(); import torch; i = time.perf_counter(); torch.cuda.is_available(); print(f'import torch {i - t:.2f} s, torch.cuda.is_available() {time.perf_counter() - i:.2f} s')" >> "$OUT/a/times.txt" 2>&1
timed opgate_version python3 -m opgate --version
i=0
for mode in ${MODES:-cold reuse nocache nocache}; do
  i=$((i + 1))
  args=(examples/ops/softmax.py --json "$OUT/a/run$i.json" --out "/tmp/art$i")
  case "$mode" in
    cold|reuse) timed "run$i $mode" python3 -m opgate verify "${args[@]}" ;;
    nocache) timed "run$i $mode" python3 -m opgate verify "${args[@]}" --no-cache ;;
    bcpu) OPGATE_BOUNDS_DEVICE=cpu timed "run$i $mode" python3 -m opgate verify "${args[@]}" --no-cache ;;
    importtime) timed "run$i $mode" python3 -X importtime -m opgate verify "${args[@]}" --no-cache ;;
    spare*) OPGATE_SPARE_WORKERS=${mode#spare} timed "run$i $mode" python3 -m opgate verify "${args[@]}" --no-cache ;;
    nosan) timed "run$i $mode" python3 -m opgate verify "${args[@]}" --no-cache --stages numerics,runtime,recovery ;;
    numerics) timed "run$i $mode" python3 -m opgate verify "${args[@]}" --no-cache --stages numerics ;;
    calib) OMP_NUM_THREADS=1 timed "run$i $mode" python3 benchmarks/profile_calibration.py examples/ops/softmax.py \
             softmax float32 --gpu --top 15 ;;
  esac > "$OUT/a/run$i.log" 2>&1
done
uptime >> "$OUT/a/smi.txt"
cat "$OUT/a/times.txt"
# each run's report: its duration, the process's age, and where each plan's bound terms ran and what that cost
python3 - "$OUT"/a/run*.json <<'PY'
import json, sys
for path in sys.argv[1:]:
    try:
        report = json.load(open(path))
    except (OSError, ValueError) as exc:
        print(f"{path}: {exc}")
        continue
    engine = report.get("extra", {}).get("engine", {})
    print(f"{path}: report {report.get('duration_s')} s, process age at checks {engine.get('process_age_at_checks_s')}"
          f" s, at end {engine.get('process_age_at_end_s')} s, spec load {engine.get('spec_load_s')} s")
    print(f"  warm workers: {engine.get('warm_workers')}")
    print(f"  calibration spans: {engine.get('calibration_spans_s')}")
    for plan, phases in engine.get("calibration_phases_s", {}).items():
        print(f"  {plan}: {phases} {engine.get('calibration_bounds_cache', {}).get(plan, {})}")
PY
tar -czf "$OUT/a.tgz" -C "$OUT" a
