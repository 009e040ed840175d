#!/usr/bin/env bash
# H200, an idle machine: single operator x dtype calibrations of the library corpus under cProfile
# (benchmarks/profile_calibration.py), bound terms placed as a verify run places them (--gpu) and, for the first one,
# on the CPU too; then softmax at its default stages. Wheels in .whl/.
#   OUT=/tmp/out bash scripts/gpu/calibration_profile.sh
set -u
OUT="${OUT:-/tmp/opgate-calibration-out}"
source "$(dirname "$0")/step.sh"
source "$(dirname "$0")/library_env.sh"
library_env calibration.log
LIB=tests/data/verify/library_corpus
STEP_OUT_DIR="$OUT/library" step kl_grad_gpu 200 python3 benchmarks/profile_calibration.py $LIB/fla_losses.py fla_kl_div.grad float32 --gpu
STEP_OUT_DIR="$OUT/library" step kl_grad_cpu 200 env OPGATE_BOUNDS_DEVICE=cpu python3 benchmarks/profile_calibration.py $LIB/fla_losses.py fla_kl_div.grad float32 --gpu
STEP_OUT_DIR="$OUT/library" step gems_ce_grad_gpu 120 python3 benchmarks/profile_calibration.py $LIB/flaggems_misc.py gems_cross_entropy.grad float32 --gpu
STEP_OUT_DIR="$OUT/library" step gems_softmax_grad_gpu 120 python3 benchmarks/profile_calibration.py $LIB/flaggems_activations.py gems_softmax.grad float32 --gpu
STEP_OUT_DIR="$OUT/library" step softmax_default 90 python3 -m opgate verify examples/ops/softmax.py --json "$OUT/library/softmax.json" --out /tmp/opgate-sm
tar -czf "$OUT/calibration_profile.tgz" -C "$OUT" library
