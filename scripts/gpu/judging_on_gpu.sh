#!/usr/bin/env bash
# GPU: does opgate's judging hold on the GPU? In one call, each step under its own limit (step.sh), in this order:
#   tests    pytest -m gpu over tests/verify (the bound terms' float64 reference and large comparisons on the GPU)
#   softmax  examples/ops/softmax.py at its default stages, --no-cache, 3 runs after one warm-up (#27: <= 15 s)
#   heldout  the held-out mamba-ssm corpus, one `opgate verify DIR` run (needs .whl/mamba_ssm-*.whl and einops:
#            carry .whl); its report and terminal output
#   corpus   the GPU truth corpus (scripts/gpu/corpus.sh: CUDA C kernels through CuPy and nvcc cubins)
#   unsloth  the held-out unsloth corpus with what is left of STEP_DEADLINE (needs .whl/unsloth-*.whl and
#            unsloth_zoo-*.whl), one `opgate verify DIR` run
#   cce      the held-out cut-cross-entropy corpus likewise (needs .whl/cut_cross_entropy-*.whl)
# STEPS="softmax tests ..." picks the steps and their order (default: the order above).
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

run_tests() {
  step tests 200 env PYTHONPATH=src python3 -m pytest -q -m gpu tests/verify -p no:cacheprovider
  cp "$LOG" "$work/" 2>/dev/null
}
run_softmax() {
  step softmax 90 env -u OPGATE_CACHE OPGATE_CACHE_DIR=/tmp/oc-softmax bash -c 'for i in 0 1 2 3; do s=$(date +%s%N); PYTHONPATH=src python3 -m opgate verify \
    examples/ops/softmax.py --no-cache --json '"$work"'/softmax$i.json > /dev/null 2>&1; rc=$?; \
    echo "softmax run $i: $(( ($(date +%s%N) - s) / 1000000 )) ms wall, exit $rc"; done'
}
run_heldout() {
  [ -n "$wheels" ] || return 0
  step heldout 240 env PYTHONPATH="$site:src" python3 -m opgate verify tests/data/verify/heldout_corpus \
    --json "$work/heldout.json" --time-limit 220
}
run_corpus() {
  step corpus 130 env OUT="$work" bash scripts/gpu/corpus.sh
}
# a held-out corpus with its wheels installed apart and what is left of the call (at most LIMIT s):
#   held_out NAME FOLDER LIMIT WHEEL_GLOB...
held_out() {
  local name="$1" folder="$2" most="$3"; shift 3
  local target="/tmp/judging-$name-site" found
  # shellcheck disable=SC2012,SC2068  # plain wheel names; the globs expand here
  found=$(ls $@ 2>/dev/null | tr '\n' ' ')
  [ -n "$found" ] || return 0
  # shellcheck disable=SC2086  # a list of wheel paths
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$target" $found >> "$LOG" 2>&1
  local left=$most
  if [ -n "${STEP_DEADLINE:-}" ]; then
    left=$(( STEP_DEADLINE - $(date +%s) - 20 ))
    [ "$left" -gt "$most" ] && left=$most
  fi
  [ "$left" -ge 60 ] || { echo "===== $name: skipped, ${left} s left of the call" >> "$LOG"; return 0; }
  step "$name" $((left + 15)) env PYTHONPATH="$target:src" HF_HUB_OFFLINE=1 python3 -m opgate verify \
    "$folder" --json "$work/$name.json" --time-limit "$left"
}
# unsloth's and unsloth_zoo's wheels only (the host has transformers, peft and accelerate, not bitsandbytes or
# xformers): where `import unsloth` fails, _unsloth_env.py imports the kernels bare and says why on stderr
run_unsloth() { held_out unsloth tests/data/verify/heldout_unsloth 300 ".whl/unsloth-*.whl" ".whl/unsloth_zoo-*.whl"; }
run_cce() { held_out cce tests/data/verify/heldout_cce 240 ".whl/cut_cross_entropy-*.whl"; }

for name in ${STEPS:-tests softmax heldout corpus unsloth cce}; do
  case "$name" in
    tests|softmax|heldout|corpus|unsloth|cce) "run_$name" ;;
    *) echo "judging_on_gpu.sh: STEPS: no step '$name'" >&2 ;;
  esac
done
for name in "${ORDER[@]}"; do echo "$name: ${STATUS[$name]}"; done | tee -a "$LOG"
tar -czf "$OUT/judging.tgz" -C "$OUT" judging judging.log 2>/dev/null
