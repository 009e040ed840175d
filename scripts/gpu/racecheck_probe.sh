#!/usr/bin/env bash
# H200 diagnostic: what makes a racecheck run of a library spec take minutes. The sanitizer's kernel filter
# options, the kernels each member launches (racecheck_kernels.py), racecheck on each member alone with and without
# an exclusion, and the process tree of a sanitized child (does a kill of compute-sanitizer's process group reach
# the target?). OUT=/tmp/out MEMBERS="op ..." bash scripts/gpu/racecheck_probe.sh
set -u
OUT="${OUT:-/tmp/racecheck-probe}"
source "$(dirname "$0")/step.sh"
source "$(dirname "$0")/library_env.sh"
library_env racecheck.log
SPEC=tests/data/verify/library_corpus/fla_losses.py
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
"$CS" --version >> "$LOG" 2>&1
"$CS" --help 2>&1 | grep -i -B1 -A8 "kernel-name\|kernel-regex\|filter" >> "$LOG"
# the process tree: compute-sanitizer started in its own session, as opgate starts it
setsid "$CS" --tool racecheck python3 -c "import time; time.sleep(25)" > /dev/null 2>&1 &
sleep 12
echo "--- process tree under compute-sanitizer" >> "$LOG"
ps -eo pid,ppid,pgid,sid,comm,args | grep -E "compute-sanit|TreeLauncher|time.sleep" | grep -v grep >> "$LOG"
wait
for m in ${MEMBERS:-fla_kl_div.grad fla_linear_cross_entropy fla_linear_cross_entropy.grad fla_kl_div}; do
  impl=${m%.grad}
  step "kernels_$m" 120 python3 scripts/gpu/racecheck_kernels.py "$SPEC" "$m" "$impl" float32
  for excl in ${EXCLUDES:-none}; do
    opts=(); [[ "$excl" != none ]] && opts=(--kernel-name-exclude "$excl")
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 step "racecheck_${m}_${excl}" "${RACE_S:-150}" "$CS" --tool racecheck --racecheck-report analysis \
      "${opts[@]}" --print-limit 5 python3 -m opgate.verify.runtime "$SPEC" "$m" "$impl" float32 --sanitized
  done
done
for s in "${ORDER[@]}"; do echo "$s: ${STATUS[$s]}"; done | tee -a "$LOG"
