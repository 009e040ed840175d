#!/usr/bin/env bash
# The main job, end to end, on whatever machine this is. Each step is real work; on a CPU-only machine
# GPU checks say `skipped` with their reason and Triton kernels run under Triton's interpreter.
# Exit code: the worst step's. Reports land in the report folder.
set -u
venv=${1:-.venv-demo}
report=${2:-opgate-report}
mkdir -p "$report"
opgate="$venv/bin/opgate"
worst=0
step() {
  echo
  echo "\$ opgate $*"
  "$opgate" "$@"
  code=$?
  echo "(exit code $code)"
  [ $code -gt $worst ] && worst=$code
}
# 1. the host stack
step doctor --json "$report/doctor.json" --junit "$report/doctor.xml"
# 2. binaries: an nvcc-built object with sm_75/80/90 SASS + compute_90 PTX (zstd), judged for a fleet
step inspect tests/data/inspect/compress_size.o --kernels --targets h100,a100,l4,t4,b200 --json "$report/inspect.json"
# 3. an operator's numerics: softmax through torch, Triton (interpreter on CPU) and its ONNX model in ONNX Runtime;
#    --extras adds opgate's cross-check of the budget (the reference through torch.compile)
step verify examples/ops/softmax.py --budget quick --extras --json "$report/verify.json" --junit "$report/verify.xml" \
  --out "$report"
# 4. portability, occupancy and roofline for every target GPU, no GPU needed
step analyze examples/ops/gelu.py --json "$report/analyze.json" --out "$report"
# 5. the occupancy calculator
step occupancy --gpu h200 --threads 256 --registers 96 --dynamic-shared 32768
echo
echo "demo finished: worst exit code $worst; reports in $report/"
exit $worst
