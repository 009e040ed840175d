#!/usr/bin/env bash
# GPU evidence for verify/gradients.py and verify/gaming.py (issue 13, items 5 and 8), from the repo root:
#   OUT=/some/dir scripts/gpu/gradients.sh
# 1. the gaming spec on the GPU: the side-stream implementation must fail with trick side_stream, the honest
#    twins pass, the cache/alias/mutation ones fail as on CPU;
# 2. the side-stream probe in process (a slow kernel on its own stream vs one on the current stream);
# 3. the gradient spec's Triton backward kernels compiled for this GPU: correct backwards pass, wrong ones fail
#    with failure class gradient.
# Everything goes to $OUT/gradients.log; the last lines are a result table. Each step's failure is printed and
# the next step still runs. Budget: about 100 s.
set -u
OUT="${OUT:-/tmp}"
LOG="$OUT/gradients.log"
WORK="$(mktemp -d)"
mkdir -p "$OUT"
: > "$LOG"
export PYTHONPATH=src
source "$(dirname "$0")/step.sh"  # step NAME TIMEOUT_S COMMAND...
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } >> "$LOG" 2>&1

step gaming 35 python3 -m opgate verify tests/data/verify/gaming_spec.py --budget quick --no-extras \
  --stages numerics --jobs 4 --json "$WORK/gaming.json" --out "$WORK/gaming-art"

step side_stream_probe 15 python3 - <<'PY'
import torch
from opgate.verify.backends.base import enable_empty_poisoning
from opgate.verify.gaming import probe_side_stream
enable_empty_poisoning()
x = torch.randn(1 << 20, device="cuda")
def side(args):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        torch.cuda._sleep(20_000_000)
        return [args[0] * 2]
print("side_stream findings:", [f.trick for f in probe_side_stream(side, [x])], "(expected ['side_stream'])")
print("current_stream findings:", [f.trick for f in probe_side_stream(lambda a: [a[0] * 2], [x])], "(expected [])")
PY

IMPLS=""
for impl in torch_composed triton triton_grad_no_onehot triton_grad_scaled triton_no_backward triton_dw_bug; do
  IMPLS="$IMPLS --impl $impl"
done
# shellcheck disable=SC2086
step gradients 60 python3 -m opgate verify tests/data/verify/gradients_spec.py --budget quick --no-extras \
  --stages numerics --jobs 4 --op cross_entropy.grad --op layer_norm.grad $IMPLS \
  --json "$WORK/gradients.json" --out "$WORK/gradients-art"

python3 - "$WORK" >> "$LOG" 2>&1 <<'PY'
import json, sys
from pathlib import Path
work = Path(sys.argv[1])
expected = {
    "relu.torch": ("passed", None), "relu.triton": ("passed", None), "relu.relu_cached": ("failed", "cached"),
    "relu.relu_inplace": ("failed", "mutation,alias"), "relu.relu_mutating": ("failed", "mutation"),
    "copy.torch": ("passed", None), "copy.copy_view": ("failed", "alias"), "scale.torch": ("passed", None),
    "scale.scale_side_stream": ("failed", "side_stream"),
    "cross_entropy.grad.torch_composed": ("passed", None), "cross_entropy.grad.triton": ("passed", None),
    "cross_entropy.grad.triton_grad_no_onehot": ("failed", "gradient"),
    "cross_entropy.grad.triton_grad_scaled": ("failed", "gradient"),
    "cross_entropy.grad.triton_no_backward": ("failed", "gradient"),
    "layer_norm.grad.torch_composed": ("passed", None), "layer_norm.grad.triton": ("passed", None),
    "layer_norm.grad.triton_dw_bug": ("failed", "gradient"),
}
results = {}
for name in ("gaming.json", "gradients.json"):
    try:
        for r in json.loads((work / name).read_text())["results"]:
            results[r["check_id"]] = r
    except Exception as exc:
        print(f"cannot read {name}: {exc}")
print("\n=== detail")
for key in expected:
    r = results.get(f"verify.{key}.float32")
    if r:
        print(f"{key}: {r['outcome']}: {r['reason'][:400]}")
print("\n=== result table")
print(f"{'implementation':45} {'expected':28} {'got':28} ok")
ok_count = 0
for key, (outcome, what) in expected.items():
    r = results.get(f"verify.{key}.float32")
    want = outcome + (f"/{what}" if what else "")
    if r is None:
        got, ok = "missing", False
    else:
        extra = r.get("extra", {})
        tricks = ",".join(f["trick"] for f in extra.get("gaming", {}).get("findings", []))
        klass = extra.get("failure_class")
        detail = tricks if klass == "gaming" else klass
        got = r["outcome"] + (f"/{detail}" if detail else "")
        ok = r["outcome"] == outcome and (what is None or set((detail or "").split(",")) == set(what.split(",")))
    ok_count += ok
    print(f"{key:45} {want:28} {got:28} {'OK' if ok else 'MISMATCH'}")
print(f"{ok_count}/{len(expected)} as expected")
PY
rm -rf "$WORK"
sed -n '/=== result table/,$p' "$LOG"
