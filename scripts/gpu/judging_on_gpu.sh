#!/usr/bin/env bash
# GPU: does opgate's judging hold on the GPU? In one call, each step under its own limit (step.sh), in this order:
#   tests    pytest -m gpu over tests/verify (the bound terms' float64 reference and large comparisons on the GPU)
#   softmax  examples/ops/softmax.py at its default stages, --no-cache, 3 runs after one warm-up (#27: <= 15 s)
#   heldout  the held-out mamba-ssm corpus, one `opgate verify DIR` run (needs .whl/mamba_ssm-*.whl and einops:
#            carry .whl); its report and terminal output
#   corpus   the GPU truth corpus (scripts/gpu/corpus.sh: CUDA C kernels through CuPy and nvcc cubins)
#   unsloth  the held-out unsloth corpus with what is left of STEP_DEADLINE (needs .whl/unsloth-*.whl and
#            unsloth_zoo-*.whl), one `opgate verify DIR` run
# Everything lands in $OUT/judging.tgz plus $OUT/judging.log. STEP_DEADLINE (epoch seconds) ends it in time.
#   OUT=/tmp/out STEP_DEADLINE=$(( $(date +%s) + 590 )) bash scripts/gpu/judging_on_gpu.sh
set -u
OUT="${OUT:-/tmp/opgate-judging-out}"
work="$OUT/judging"
mkdir -p "$work"
LOG="$OUT/judging.log"
: > "$LOG"
export PYTHONUNBUFFERED=1 OPGATE_CACHE=0
source "$(dirname "$0")/step.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> "$LOG" 2>&1
site=/tmp/judging-site
# shellcheck disable=SC2012  # plain wheel names
wheels=$(ls .whl/mamba_ssm-*.whl .whl/einops-*.whl 2>/dev/null | tr '\n' ' ')
[ -n "$wheels" ] && python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" $wheels >> "$LOG" 2>&1

step tests 200 env PYTHONPATH=src python3 -m pytest -q -m gpu tests/verify -p no:cacheprovider
cp "$LOG" "$work/" 2>/dev/null
step softmax 90 env -u OPGATE_CACHE OPGATE_CACHE_DIR=/tmp/oc-softmax bash -c 'for i in 0 1 2 3; do s=$(date +%s%N); PYTHONPATH=src python3 -m opgate verify \
  examples/ops/softmax.py --no-cache --json '"$work"'/softmax$i.json > /dev/null 2>&1; rc=$?; \
  echo "softmax run $i: $(( ($(date +%s%N) - s) / 1000000 )) ms wall, exit $rc"; done'
if [ -n "$wheels" ]; then
  step heldout 240 env PYTHONPATH="$site:src" python3 -m opgate verify tests/data/verify/heldout_corpus \
    --json "$work/heldout.json" --time-limit 220
fi
step corpus 130 env OUT="$work" bash scripts/gpu/corpus.sh
# the held-out unsloth corpus with what is left of the call: unsloth's and unsloth_zoo's wheels only (the host has
# transformers, peft and accelerate, not bitsandbytes or xformers): where `import unsloth` fails, _unsloth_env.py
# imports the kernels bare and says why on stderr
usite=/tmp/judging-unsloth-site
# shellcheck disable=SC2012  # plain wheel names
uwheels=$(ls .whl/unsloth-*.whl .whl/unsloth_zoo-*.whl 2>/dev/null | tr '\n' ' ')
if [ -n "$uwheels" ] && [ -n "${STEP_DEADLINE:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$usite" $uwheels >> "$LOG" 2>&1
  left=$(( STEP_DEADLINE - $(date +%s) - 20 ))
  if [ "$left" -ge 60 ]; then
    step unsloth $((left + 15)) env PYTHONPATH="$usite:src" HF_HUB_OFFLINE=1 python3 -m opgate verify \
      tests/data/verify/heldout_unsloth --json "$work/heldout_unsloth.json" --time-limit "$left"
  fi
fi
for name in "${ORDER[@]}"; do echo "$name: ${STATUS[$name]}"; done | tee -a "$LOG"
tar -czf "$OUT/judging.tgz" -C "$OUT" judging judging.log 2>/dev/null
