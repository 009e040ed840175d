#!/usr/bin/env bash
# GPU evidence for issue 20 (multi-GPU hosts): NCCL collectives, the link matrix, contention, and a plain
# torch.distributed all-reduce for contrast.
# Run from the repo root on a GPU host:  bash scripts/gpu/multigpu.sh
# Writes everything into ONE file, $OUT/multigpu.log (OUT defaults to ./opgate-report), within 120 s (the step
# limits add up to 120: host 10, collectives 45, links 8, P2P + contention 35, plain all-reduce 22), and prints a
# short result table last. On one GPU it shows doctor.collectives `skipped` (exit 0) and stops there.
# Each step's failure is printed and does not stop the others. NVLink multicast stays off in every process.
set -u
OUT="${OUT:-opgate-report}"
mkdir -p "$OUT"
LOG="$OUT/multigpu.log"
: > "$LOG"
export PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PY="${PYTHON:-python3}"
source "$(dirname "$0")/step.sh"  # step NAME TIMEOUT_S COMMAND...

step host 10 bash -c 'date -u; hostname; nvidia-smi -L; nvidia-smi topo -m; nvidia-smi nvlink --status | head -60'
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
echo "GPUS=$GPUS" >> "$LOG"

# the check as a user runs it; on one GPU: skipped, "collectives need 2 or more GPUs; this host has 1", exit 0
step doctor_collectives 45 "$PY" -m opgate doctor --level standard --check collectives \
  --json "$OUT/multigpu-collectives.json" -v

# an installed opgate older than these checks hides them from the CLI (its entry points win): run the classes
# through opgate's own runner then, writing the same JSON report shape
DIRECT="$(mktemp "${TMPDIR:-/tmp}/opgate-direct-XXXXXX.py")"
trap 'rm -f "$DIRECT"' EXIT
cat > "$DIRECT" <<'PYEOF'
import json, sys
from opgate.checks.base import CheckContext
from opgate.engine.runner import CheckTask, run_checks
out, targets = sys.argv[1], sys.argv[2:]
names = ["doctor." + t.split(":")[0].split(".")[-1] for t in targets]
tasks = [CheckTask(n, n, t, 200.0, CheckContext(level="standard"), exclusive=True) for n, t in zip(names, targets)]
results = run_checks(tasks)
for r in results:
    print(r.check_id, r.outcome.value, r.reason)
with open(out, "w") as fh:
    json.dump({"results": [r.to_dict() for r in results]}, fh)
PYEOF
if [[ "${STATUS[doctor_collectives]}" == rc=2* ]]; then
  step collectives_direct 43 "$PY" "$DIRECT" "$OUT/multigpu-collectives.json" opgate.doctor.collectives:CollectivesCheck
fi

if [ "${GPUS:-0}" -ge 2 ]; then
  step links 8 "$PY" - <<'PYEOF'
import json
from opgate.probes.nvlink import collect_links
from opgate.gpu.judge.collectives import link_reference
snap = collect_links()
print(json.dumps(snap.to_dict()))
ref = link_reference(snap)
print("LINKREF", ref.topology, ref.per_direction_gbs, ref.basis, "|", "; ".join(ref.findings) or "no findings")
PYEOF
  step doctor_p2p_contention 35 "$PY" -m opgate doctor --level standard --check p2p --check contention \
    --json "$OUT/multigpu-links.json" -v
  if [[ "${STATUS[doctor_p2p_contention]}" == rc=2* ]]; then
    step p2p_contention_direct 33 "$PY" "$DIRECT" "$OUT/multigpu-links.json" opgate.doctor.gpu_checks.p2p:P2PCheck \
      opgate.doctor.contention:ContentionCheck
  fi
  step plain_allreduce 22 "$PY" benchmarks/collectives.py --plain-only --max-bytes 1073741824
fi

"$PY" - "$OUT" >> "$LOG" 2>&1 <<'PYEOF' || echo "summary: could not read the JSON reports" >> "$LOG"
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
for name in ("multigpu-collectives.json", "multigpu-links.json"):
    path = out / name
    if not path.exists():
        print(f"RESULT {name}: no report")
        continue
    for r in json.loads(path.read_text()).get("results", []):
        print(f"RESULT {r['check_id']:20s} {r['outcome']:8s} {r['duration_s']:.1f}s {r['reason'][:400]}")
        extra = r.get("extra", {})
        if "matrix_text" in extra:
            print(extra["matrix_text"])
        run = extra.get("run")
        if run:
            for row in run["results"]:
                if row["op"] == "all_reduce" or row["size_bytes"] >= (1 << 30):
                    print(f"SWEEP {row['op']:15s} {row['size_bytes']:>12d} B {row['time_s'] * 1e6:12.2f} us "
                          f"algbw {row['algbw_gbs']:9.2f} busbw {row['busbw_gbs']:9.2f} GB/s")
PYEOF

{
  echo
  echo "=== multigpu results (GPUs: ${GPUS:-0}) ==="
  for name in "${ORDER[@]}"; do printf '%-22s %s\n' "$name" "${STATUS[$name]:-not run}"; done
  grep -E '^(LINKREF|SWEEP|\| )' "$LOG" | tail -40
  grep -E '^RESULT' "$LOG"
} | tee -a "$LOG"
