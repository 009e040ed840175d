#!/usr/bin/env bash
# H200: FlagGems' log_softmax beside PyTorch's without opgate (gems_log_softmax_check.py), softmax at its default
# stages twice (#27's 15 s goal), then the library corpus in one `opgate verify DIR` run at the default stages
# (#27's 10-minute goal), all into one tarball. Wheels in .whl/, as library.sh.
#   OUT=/tmp/out LIB_TIMEOUT_S=330 bash scripts/gpu/library_default.sh
# CPU_PROFILE=1 samples every process's CPU seconds during the library runs (cpu_by_process.py -> library/cpu.json).
set -u
OUT="${OUT:-/tmp/opgate-library-out}"
source "$(dirname "$0")/step.sh"
source "$(dirname "$0")/library_env.sh"
library_env default.log
step versions 60 python3 -c "import torch, triton, flag_gems, fla; print(torch.__version__, triton.__version__, flag_gems.__version__, fla.__version__, torch.cuda.get_device_name()); from triton import knobs; print('autotuning cache knob', knobs.autotuning.cache)"
[[ -n "${GEMS_CHECK-1}" ]] && step gems_log_softmax 90 python3 scripts/gpu/gems_log_softmax_check.py
for run in ${SOFTMAX_RUNS-cold warm}; do
  step "softmax_$run" 120 python3 -m opgate verify examples/ops/softmax.py --json "$OUT/library/softmax_$run.json" \
    --out /tmp/opgate-art-softmax
done
if [[ -n "${CPU_PROFILE:-}" ]]; then python3 scripts/gpu/cpu_by_process.py "$OUT/library/cpu.json" & SAMPLER=$!; fi
[[ "${LIB_TIMEOUT_S:-330}" != 0 ]] && step library_default "${LIB_TIMEOUT_S:-330}" python3 -m opgate verify \
  ${LIB_PATHS:-tests/data/verify/library_corpus} --json "$OUT/library/default.json" --out /tmp/opgate-art
[[ "${RERUN_TIMEOUT_S:-0}" != 0 ]] && step library_rerun "${RERUN_TIMEOUT_S}" python3 -m opgate verify \
  ${LIB_PATHS:-tests/data/verify/library_corpus} --json "$OUT/library/rerun.json" --out /tmp/opgate-art
if [[ -n "${SAMPLER:-}" ]]; then
  sleep 6; kill "$SAMPLER"; python3 scripts/gpu/cpu_by_process.py --summary "$OUT/library/cpu.json" | tee -a "$LOG"
fi
for name in "${ORDER[@]}"; do echo "$name: ${STATUS[$name]}"; done | tee -a "$LOG"
tar -czf "$OUT/library_default.tgz" -C "$OUT" library
