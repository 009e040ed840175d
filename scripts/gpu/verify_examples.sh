#!/usr/bin/env bash
# opgate verify on example operators on the GPU, numerics + runtime at the quick budget: no false alarm may come
# from the verdict changes (accumulation bound, deviations, the new case plan). Writes $OUT/verify_examples.log.
set -u
cd "$(dirname "$0")/../.." || exit 2
OUT="${OUT:-/tmp/opgate-out}"; mkdir -p "$OUT"
LOG="$OUT/verify_examples.log"; : > "$LOG"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
for ex in ${EXAMPLES:-softmax layernorm matmul}; do
  t0=$(date +%s)
  python3 -m opgate verify "examples/ops/$ex.py" --budget quick --stages "${STAGES:-numerics}" --no-extras \
    --json "/tmp/verify_$ex.json" >> "$LOG" 2>&1
  rc=$?
  python3 - "$ex" "$rc" "$(( $(date +%s) - t0 ))" >> "$LOG" 2>&1 <<'PY'
import json, sys
ex, rc, secs = sys.argv[1:]
try:
    r = json.load(open(f"/tmp/verify_{ex}.json"))
except Exception as exc:
    print(f"VERIFY {ex} rc={rc} {secs}s no report: {exc}"); raise SystemExit
for res in r["results"]:
    cls = res["extra"].get("failure_class") or ",".join(d["class"] for d in res["extra"].get("deviations", []))
    print(f"VERIFY {ex} {res['check_id']} {res['outcome']} {cls} :: {res['reason'][:300]}")
print(f"VERIFY {ex} rc={rc} {secs}s")
PY
done
grep "^VERIFY" "$LOG" | grep -v " passed " | tail -40
