#!/usr/bin/env bash
# softmax at its default stages, --no-cache, two source trees alternating in one call: OLD_SRC (a copy of an older
# commit's src/, e.g. `git archive HEAD src | tar -x -C old`) and this checkout's src/, ROUNDS times each after one
# unmeasured run that warms Triton's cache. The process wall of each run beside its report's calibration figures;
# results in $OUT/ab (times.txt, <label>N.json), packed as $OUT/ab.tgz.
#   OUT=/tmp/out OLD_SRC=old/src ROUNDS=2 bash scripts/gpu/softmax_ab.sh
set -u
export PYTHONUNBUFFERED=1 OPGATE_CACHE_DIR=/tmp/oc
mkdir -p "$OUT/ab"
run() {  # run LABEL SRC: one verify run, its wall time and exit code in times.txt
  PYTHONPATH="$2" python3 - "$1" "$OUT/ab/$1.json" >> "$OUT/ab/times.txt" <<'PY'
import subprocess, sys, time
started = time.perf_counter()
rc = subprocess.call([sys.executable, "-m", "opgate", "verify", "examples/ops/softmax.py", "--no-cache",
                      "--json", sys.argv[2], "--out", "/tmp/art-ab"],
                     stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
print(f"{sys.argv[1]}: {time.perf_counter() - started:.2f} s wall, exit {rc}")
PY
}
run warm "$PWD/src"
for i in $(seq "${ROUNDS:-2}"); do
  run "old$i" "$OLD_SRC"
  run "new$i" "$PWD/src"
done
cat "$OUT/ab/times.txt"
python3 - "$OUT"/ab/*.json <<'PY'
import json, sys
for path in sys.argv[1:]:
    report = json.load(open(path))
    engine = report["extra"]["engine"]
    spans = engine.get("calibration_spans_s", {})
    phases = {plan: p.get("bounds") for plan, p in engine.get("calibration_phases_s", {}).items()}
    print(f"{path.rsplit('/', 1)[-1]}: report {report['duration_s']:.1f} s, age at checks "
          f"{engine.get('process_age_at_checks_s')} s, at end {engine.get('process_age_at_end_s')} s, "
          f"calibration ends {max((s[1] for s in spans.values()), default=0):.2f} s, bound terms {phases}")
PY
tar -czf "$OUT/ab.tgz" -C "$OUT" ab
