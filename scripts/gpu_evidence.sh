#!/usr/bin/env bash
# Evidence runs for `opgate inspect` and `opgate analyze` on a GPU host, beside scripts/gpu_check.sh:
#   1. occupancy: opgate's calculator vs cuOccupancyMaxActiveBlocksPerMultiprocessor (writes the JSON CI re-checks)
#   2. inspect speed: opgate vs cuobjdump --list-elf on PyTorch's libtorch_cuda.so, side by side
#   3. inspect agreement: listings (and resources where time allows) vs cuobjdump on PyTorch's CUDA libraries
# Results go to ${OUT:-/tmp/opgate-out}. Each step has its own time limit; every step runs.
set -u
OUT="${OUT:-/tmp/opgate-out}"
mkdir -p "$OUT"
cd "$(dirname "$0")/.." || exit 2
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
TORCH_LIB=$(python3 -c "import torch, os; print(os.path.join(os.path.dirname(torch.__file__), 'lib'))")
NV_LIB=$(dirname "$TORCH_LIB")/../nvidia/cu13/lib
status=0
echo "=== occupancy vs the driver"
timeout 240 python3 scripts/occupancy_driver_cases.py --out "$OUT/h200_occupancy_cases.json" >"$OUT/occupancy.log" 2>&1 || status=1
tail -25 "$OUT/occupancy.log"
echo "=== inspect vs cuobjdump: speed on libtorch_cuda.so ($(du -h "$TORCH_LIB/libtorch_cuda.so" | cut -f1))"
timeout 200 python3 benchmarks/inspect_vs_cuobjdump.py "$TORCH_LIB/libtorch_cuda.so" --repeat 3 >"$OUT/inspect_bench.md" 2>&1 || status=1
cat "$OUT/inspect_bench.md"
echo "=== inspect vs cuobjdump: agreement"
timeout 150 python3 scripts/compare_with_cuobjdump.py "$TORCH_LIB/libtorch_cuda.so" "$TORCH_LIB/libc10_cuda.so" \
  "$NV_LIB"/libcublasLt.so.* "$NV_LIB"/libcufft.so.* >"$OUT/inspect_compare.txt" 2>&1 || status=1
timeout 120 python3 scripts/compare_with_cuobjdump.py --resources "$TORCH_LIB/libc10_cuda.so" "$NV_LIB"/libcurand.so.* \
  >>"$OUT/inspect_compare.txt" 2>&1 || status=1
tail -30 "$OUT/inspect_compare.txt"
exit $status
