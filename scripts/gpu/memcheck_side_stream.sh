#!/usr/bin/env bash
# GPU evidence for issue 13's leftovers (items 3-5), from the repository root:  OUT=/some/dir bash scripts/gpu/memcheck_side_stream.sh
#   1. memcheck with --padding: the planted memory bugs of tests/data/verify/planted_memory.py through the sanitizer
#      stage; tail_oob_read (a read past the end only at the tail size M=4, N=257) must now be caught, every twin clean;
#      and the corpus' gpu/memory.py scale2 pair (good_scale2_exact clean, bad_scale2_oob_write caught);
#   2. the side-stream probe in process, as tests/verify/test_verify_gaming.py's GPU tests do (a fast kernel on a
#      private stream that never waits for the caller's stream, the slow one of gaming_spec.py, a current-stream twin);
#   3. the corpus' gpu/elementwise.py: bad_scale2_side_stream must fail [gaming] (it was warned: ftz),
#      bad_scale2_tail_grid [unwritten] (it was nonfinite), good_scale2_nvrtc warned ftz or passed.
# The steps run in parallel, each under its own limit (the whole script stays under 150 s); a failed step is reported
# and the others still count. Everything goes into ONE file, $OUT/memcheck_side_stream.log; the result table is printed last.
set -u
OUT="${OUT:-/tmp/opgate-memcheck-side-stream-out}"
mkdir -p "$OUT"
LOG="$OUT/memcheck_side_stream.log"
WORK="$(mktemp -d /tmp/opgate-memcheck-side-stream.XXXXXX)"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
PY="${PYTHON:-python3}"
: >"$LOG"
started=$(date +%s)
source "$(dirname "$0")/step.sh"  # step NAME TIMEOUT_S COMMAND...
STEP_OUT_DIR="$WORK"  # the steps run in parallel: each one's output in $WORK/NAME.out, its status in $WORK/NAME.status

{
  echo "=== host $(date -u) $(hostname)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  "$PY" -c "import torch, cupy; print('torch', torch.__version__, 'cuda', torch.version.cuda, '| cupy', cupy.__version__)" 2>&1
  SAN="$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)"
  echo "compute-sanitizer: ${SAN:-not found}"
  if [ -n "$SAN" ]; then
    "$SAN" --version 2>&1 | tail -2
    echo "--padding in --help: $("$SAN" --help 2>&1 | grep -c -- --padding)"
    "$SAN" --help 2>&1 | grep -A2 -- --padding
  fi
} >>"$LOG" 2>&1

CORPUS=tests/data/verify/truth_corpus/gpu
step planted 125 "$PY" -m opgate verify tests/data/verify/planted_memory.py --stages numerics,sanitizer \
  --sanitizer-tools memcheck --budget quick --no-extras --jobs 8 --json "$WORK/planted.json" --out "$WORK/art-planted" &
step memory 125 "$PY" -m opgate verify "$CORPUS/memory.py" --stages numerics,sanitizer --sanitizer-tools memcheck \
  --impl good_scale2_exact --impl bad_scale2_oob_write --budget quick --no-extras --jobs 2 \
  --json "$WORK/memory.json" --out "$WORK/art-memory" &
step elementwise 125 "$PY" -m opgate verify "$CORPUS/elementwise.py" --stages numerics --impl good_scale2_nvrtc \
  --impl bad_scale2_side_stream --impl bad_scale2_tail_grid --budget quick --no-extras --jobs 3 \
  --json "$WORK/elementwise.json" --out "$WORK/art-elementwise" &
# The probe in process, as the GPU tests of tests/verify/test_verify_gaming.py run it (the host may lack pytest).
cat >"$WORK/gaming_probe.py" <<'PYPROBE'
import torch
from opgate.verify.backends.base import enable_empty_poisoning
from opgate.verify.gaming import probe_side_stream

enable_empty_poisoning()
x = torch.randn(64, 1024, device="cuda")
expected = (x * 2).cpu()


def right(outputs):
    return bool(torch.equal(outputs[0], expected))


def private_fast(args):  # bad_scale2_side_stream's shape: no wait for the caller's stream, a microsecond kernel
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        return [args[0] * 2]


def waits_then_slow(args):  # gaming_spec.py's scale_side_stream: waits for the inputs, nobody waits for it
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(20_000_000)
        return [args[0] * 2]


ok = 0
for name, fn, want in (("private_fast", private_fast, ["side_stream"]), ("waits_then_slow", waits_then_slow,
                       ["side_stream"]), ("current_stream", lambda a: [a[0] * 2], [])):
    got = [f.trick for f in probe_side_stream(fn, [x], right)]
    ok += got == want
    print(f"probe {name}: findings {got} (expected {want})")
print(f"gaming probe: {ok}/3 as expected")
PYPROBE
step gaming_probe 60 "$PY" "$WORK/gaming_probe.py" &
wait

for name in planted memory elementwise gaming_probe; do
  { echo "=== $(cat "$WORK/$name.status" 2>/dev/null || echo "$name: no status")"; tail -n 60 "$WORK/$name.out"; } >>"$LOG" 2>&1
done

"$PY" - "$WORK" >"$WORK/table.txt" 2>&1 <<'PY'
import json, sys
from pathlib import Path

work = Path(sys.argv[1])


def load(name):
    path = work / f"{name}.json"
    if not path.is_file():
        print(f"{name}: no report ({(work / f'{name}.status').read_text().strip() if (work / f'{name}.status').is_file() else 'no status'})")
        return {}
    return {r["check_id"]: r for r in json.loads(path.read_text())["results"]}


def row(label, result, expect):
    outcome = result.get("outcome", "absent")
    extra = result.get("extra", {})
    got = outcome if outcome != "failed" else f"failed:{extra.get('failure_class') or '?'}"
    if outcome == "warned":
        got += ":" + ",".join(sorted({d.get("class", "?") for d in extra.get("deviations", [])}))
    ok = any(got.startswith(e) for e in expect)
    print(f"{label:56s} expect {'|'.join(expect):22s} got {got:22s} {'OK' if ok else 'NO'}")
    if not ok:
        print(f"    {result.get('reason', '')[:300]}")
    return ok


oks = []
print("=" * 110)
planted = load("planted")
if planted:
    sys.path.insert(0, "tests/data/verify")
    from planted_memory import PLANTED
    for impl, kind in PLANTED.items():
        result = planted.get(f"verify.double.{impl}.sanitizer", {})
        oks.append(row(f"item 3 planted {impl} (memcheck)", result, ["failed:memory"] if kind == "bug" else ["passed"]))
        if impl == "tail_oob_read":
            print(f"    {result.get('reason', '')[:300]}")
memory = load("memory")
for impl, expect in (("good_scale2_exact", ["passed"]), ("bad_scale2_oob_write", ["failed:memory"])):
    if memory:
        oks.append(row(f"item 3 corpus memory.py {impl} (memcheck)", memory.get(f"verify.scale2.{impl}.sanitizer", {}),
                       expect))
elementwise = load("elementwise")
for impl, expect in (("good_scale2_nvrtc", ["warned:ftz", "passed"]), ("bad_scale2_side_stream", ["failed:gaming"]),
                     ("bad_scale2_tail_grid", ["failed:unwritten"])):
    if elementwise:
        oks.append(row(f"items 4-5 corpus elementwise.py {impl}", elementwise.get(f"verify.scale2.{impl}.float32", {}),
                       expect))
probe_out = work / "gaming_probe.out"
for line in (probe_out.read_text().splitlines() if probe_out.is_file() else ["gaming probe: no output"]):
    if line.startswith(("probe ", "gaming probe")) or "Error" in line:
        print(f"item 4 {line}")
print(f"{sum(oks)}/{len(oks)} verdicts as expected")
PY

{
  for report in planted memory elementwise; do
    [ -f "$WORK/$report.json" ] && { echo "=== report $report"; cat "$WORK/$report.json"; echo; }
  done
  for name in planted memory elementwise gaming_probe; do cat "$WORK/$name.status" 2>/dev/null; done
  echo "=== table"; cat "$WORK/table.txt"
  echo "=== total $(( $(date +%s) - started )) s"
} >>"$LOG" 2>&1
rm -rf "$WORK"
sed -n '/^=== table$/,$p' "$LOG" | tail -n +2
