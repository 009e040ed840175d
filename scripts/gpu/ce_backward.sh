#!/usr/bin/env bash
# GPU evidence for the log-space bound (branch ce13, issue 13: false alarms of correct CE backward kernels), from the
# repo root:   OUT=/some/dir bash scripts/gpu/ce_backward.sh   (about 60-100 s)
# The truth corpus's ce_backward.py, its Triton kernels compiled for this GPU: the two correct float32-lse kernels
# must pass (before the bound they failed the large and mixed cases of cross_entropy_train.grad), the three gradient
# bugs must fail with failure class `gradient`. Everything goes to $OUT/ce_backward.log; the last lines are a result table.
# A failing step is printed and the rest still runs.
set -u
OUT="${OUT:-/tmp}"
LOG="$OUT/ce_backward.log"
WORK="$(mktemp -d)"
mkdir -p "$OUT"
: > "$LOG"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
unset TRITON_INTERPRET
source "$(dirname "$0")/step.sh"  # step NAME TIMEOUT_S COMMAND...
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } >> "$LOG" 2>&1

IMPLS=""
for impl in good_ce_fused_triton good_ce_grad_in_forward_triton bad_ce_grad_in_forward_unchanged_triton \
            bad_ce_grad_ignores_upstream_triton bad_ce_grad_scalar_upstream_triton; do
  IMPLS="$IMPLS --impl $impl"
done
# shellcheck disable=SC2086
step ce_backward 105 python3 -m opgate verify tests/data/verify/truth_corpus/ce_backward.py --budget quick --no-extras \
  --stages numerics --no-shrink --jobs 4 --timeout 95 $IMPLS --json "$WORK/ce.json" --out "$WORK/ce-art"

python3 - "$WORK/ce.json" >> "$LOG" 2>&1 <<'PY'
import json, sys
expected = {"good_ce_fused_triton": ("passed", None), "good_ce_grad_in_forward_triton": ("passed", None),
            "bad_ce_grad_in_forward_unchanged_triton": ("failed", "gradient"),
            "bad_ce_grad_ignores_upstream_triton": ("failed", "gradient"),
            "bad_ce_grad_scalar_upstream_triton": ("failed", "gradient")}
try:
    results = json.load(open(sys.argv[1]))["results"]
except Exception as exc:
    print(f"cannot read the report: {exc}")
    results = []
rows = []
print("\n=== detail")
for r in results:
    extra = r.get("extra", {})
    impl, op = extra.get("implementation"), extra.get("op", "")
    if not impl:
        continue
    print(f"{r['check_id']}: {r['outcome']} [{extra.get('failure_class')}] {r['reason'][:300]}")
    for case in extra.get("cases", []):
        label = case["case"] if isinstance(case["case"], str) else json.dumps(case["case"])
        if any(regime in label for regime in ("large", "mixed")):
            print(f"    {label}: passed={case['passed']} budget_ratio={case['budget_ratio']}")
    if op.endswith(".grad"):
        want = expected.get(impl)
        got = (r["outcome"], extra.get("failure_class") if r["outcome"] == "failed" else None)
        ok = want is not None and got[0] == want[0] and (want[1] is None or got[1] == want[1])
        failing = sum(1 for c in extra.get("cases", []) if not c["passed"])
        rows.append(f"{impl} | {got[0]} [{got[1] or '-'}] | {failing}/{len(extra.get('cases', []))} cases fail | "
                    f"expected {want[0] if want else '?'} | {'OK' if ok else 'WRONG'}")
print("\n=== result table (cross_entropy_train.grad on the GPU)")
print("implementation | outcome [class] | failing cases | expected | verdict")
print("\n".join(rows) if rows else "no .grad results: see the log above")
PY
rm -rf "$WORK"
tail -n 8 "$LOG"
