#!/usr/bin/env bash
# GPU validation of the gpuclasses branch (issue part 5), from the repository root on an H200 host with CuPy:
#     OUT=/some/dir bash scripts/gpu/failure_classes.sh
# 1. pytest: the GPU tests of the branch (graph-mismatch causes on real kernels, the device-memory snapshot, the side-
#    stream probes, the corpus' side-stream rows as class `stream`);
# 2. stream faults: scripts/gpu/stream_faults_spec.py through numerics and runtime (a CuPy legacy-stream kernel must be
#    [stream] in both, a racy kernel's graph mismatch "nondeterministic");
# 3. a non-opgate neighbour filling the GPU (scripts/gpu/fill_gpu.py): an 8 GiB-workspace implementation must be
#    "could not judge" (error, exit 3), and pass alone;
# 4. two concurrent opgate verify runs on the GPU, one with the recovery stage, two rounds: no numerics result may
#    mention out of memory; the guard's waits are printed.
# Everything goes to $OUT/failure_classes.log; the verdict table (scripts/gpu/failure_classes_check.py) is printed last. ~6 min.
set -u
OUT="${OUT:-/tmp/opgate-failure-classes-out}"
mkdir -p "$OUT"
LOG="$OUT/failure_classes.log"
WORK="$OUT/work"
mkdir -p "$WORK"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export OPGATE_GPU_LOCK_DIR="$WORK/locks"  # both concurrent runs share it; fresh, so no stale permissions
PY="${PYTHON:-python3}"
: >"$LOG"
source "$(dirname "$0")/step.sh"  # step NAME TIMEOUT_S COMMAND...

{
  echo "=== host $(date -u) $(hostname)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader
  "$PY" -c "import torch, cupy; print('torch', torch.__version__, 'cuda', torch.version.cuda, '| cupy', cupy.__version__)"
} >>"$LOG" 2>&1

step pytest 420 "$PY" -m pytest -q -p no:cacheprovider tests/gpu/test_graph_capture_gpu.py tests/gpu/test_device_memory.py \
  tests/gpu/test_graph_mismatch_cause.py tests/gpu/test_oom_judge.py tests/test_gpu_guard.py \
  tests/verify/test_verify_gaming.py -m "gpu or not slow" \
  tests/verify/test_truth_corpus.py::test_gpu_corpus_side_streams_are_stream_and_the_rounded_down_grid_is_unwritten

step stream_faults 300 "$PY" -m opgate verify scripts/gpu/stream_faults_spec.py --stages numerics,runtime \
  --budget quick --no-extras --json "$WORK/stream_faults.json" --out "$WORK/art-stream"

# A neighbour that is not opgate holds all but 4 GiB; --jobs 2 keeps opgate's own contexts (spares) few.
"$PY" scripts/gpu/fill_gpu.py --leave-gib 4 --hold-s 240 >"$WORK/filler.txt" 2>&1 &
FILLER=$!
for _ in $(seq 120); do grep -q filled "$WORK/filler.txt" 2>/dev/null && break; sleep 1; done
cat "$WORK/filler.txt" >>"$LOG"
step workspace_crowded 200 "$PY" -m opgate verify scripts/gpu/workspace_spec.py --stages numerics --budget quick \
  --no-extras --jobs 2 --json "$WORK/workspace_crowded.json" --out "$WORK/art-crowded"
kill "$FILLER" 2>/dev/null; wait "$FILLER" 2>/dev/null
step workspace_alone 200 "$PY" -m opgate verify scripts/gpu/workspace_spec.py --stages numerics --budget quick \
  --no-extras --jobs 2 --json "$WORK/workspace_alone.json" --out "$WORK/art-alone"

# Two runs at once on one GPU, as two CI jobs: one with the recovery stage (it fills the card), one numerics only.
for round in 1 2; do
  mkdir -p "$WORK/round$round"
  step "round${round}_recovery" 300 "$PY" -m opgate verify examples/ops/softmax.py --stages recovery --budget quick \
    --no-extras --json "$WORK/round$round/recovery.json" --out "$WORK/round$round/art-r" &
  sleep $((round - 1))  # round 2 starts the numerics run a second later
  step "round${round}_numerics" 300 "$PY" -m opgate verify examples/ops/softmax.py --stages numerics --budget quick \
    --no-extras --json "$WORK/round$round/numerics.json" --out "$WORK/round$round/art-n"
  wait
done

{
  echo "===== steps"
  for name in "${ORDER[@]}"; do echo "$name: ${STATUS[$name]:-?}"; done
  echo "(step status is lost for the backgrounded recovery runs; their reports are checked below)"
  echo "===== verdicts"
  "$PY" scripts/gpu/failure_classes_check.py "$WORK"
} 2>&1 | tee -a "$LOG"
