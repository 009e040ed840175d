#!/usr/bin/env bash
# H200: the library's heaviest gradient twins' bound terms per case on the CPU and the GPU
# (benchmarks/bound_terms_placement.py): is a plan that runs for minutes slow on the GPU too? Wheels as library_env.sh.
#   OUT=/tmp/out bash scripts/gpu/bound_terms_placement.sh
set -u
OUT="${OUT:-/tmp/opgate-terms-out}"
source "$(dirname "$0")/step.sh"
source "$(dirname "$0")/library_env.sh"
library_env bound_terms_placement.log
export OPGATE_CACHE=0
CORPUS=tests/data/verify/library_corpus
BENCH=(python3 benchmarks/bound_terms_placement.py)
step short_conv_wide_gpu 150 "${BENCH[@]}" $CORPUS/fla_sequence.py fla_short_conv.grad --match D=65535 --limit 2 --devices cuda --json "$OUT/library/short_conv_wide_gpu.json"
step short_conv_16385 120 "${BENCH[@]}" $CORPUS/fla_sequence.py fla_short_conv.grad --match D=16385 --limit 1 --json "$OUT/library/short_conv_16385.json"
step kl_div_grad 150 "${BENCH[@]}" $CORPUS/fla_losses.py fla_kl_div.grad --limit 4 --json "$OUT/library/kl_div_grad.json"
grep -v -i warn "$LOG" | tail -60
