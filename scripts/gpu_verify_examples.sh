#!/usr/bin/env bash
# `opgate verify` of every shipped example operator on a GPU host: numerics on the GPU, plus the runtime
# stage (CUDA-event timing vs the roofline floor, CUDA graph capture), the four compute-sanitizer tools and
# out-of-memory recovery.
# Reports go to ${OUT:-/tmp/opgate-out}/verify_reports.tar.gz; a summary table is printed last.
# EXAMPLES="gelu rmsnorm" verifies only those (all seven do not fit one 10-minute device call);
# VERIFY_LIMIT_S (default 240) caps each operator: at perf_dims one takes 70-110 s on the H200 (quantize, two
# operators, over 210 s), most of it starting one Python process per check.
# SANITIZER_TOOLS (default all, as `opgate verify`; e.g. memcheck) and STAGES (default numerics,runtime,sanitizer,
# recovery, as `opgate verify`; add ncu) are passed to --sanitizer-tools and --stages.
set -u
OUT="${OUT:-/tmp/opgate-out}"
mkdir -p "$OUT/verify"
cd "$(dirname "$0")/.." || exit 2
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
LIMIT="${VERIFY_LIMIT_S:-240}"
status=0
if [ -n "${EXAMPLES:-}" ]; then
  SPECS=()
  for name in $EXAMPLES; do SPECS+=("examples/ops/$name.py"); done
else
  SPECS=(examples/ops/*.py)
fi
for spec in "${SPECS[@]}"; do
  name=$(basename "$spec" .py)
  [ "$name" = make_onnx_models ] && continue
  start=$(date +%s)
  timeout "$LIMIT" python3 -m opgate verify "$spec" --budget quick --no-extras --jobs 8 \
    --sanitizer-tools "${SANITIZER_TOOLS:-all}" --stages "${STAGES:-numerics,runtime,sanitizer,recovery}" \
    --json "$OUT/verify/$name.json" --out "$OUT/verify/art-$name" >"$OUT/verify/$name.log" 2>&1
  code=$?
  echo "$name: exit $code in $(( $(date +%s) - start )) s"
  [ $code -ne 0 ] && status=1
done
tar -czf "$OUT/verify_reports.tar.gz" -C "$OUT" verify
python3 - "$OUT/verify" <<'PY'
import json, sys
from pathlib import Path
print("=" * 110)
for path in sorted(Path(sys.argv[1]).glob("*.json")):
    data = json.loads(path.read_text())
    print(f"{path.stem}: exit {data['exit_code']} {data['counts']} in {data['duration_s']:.0f} s")
    for r in data["results"]:
        if r["outcome"] != "passed" or r["check_id"].endswith(".runtime"):
            print(f"  {r['outcome']:7s} {r['check_id']:42s} {r['reason'][:190]}")
PY
exit $status
