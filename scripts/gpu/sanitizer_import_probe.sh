#!/usr/bin/env bash
# H200: what importing a library spec costs under compute-sanitizer (#27: the sanitized children spent ~21 CPU-s each
# in load_spec_file, twice a check worker's import). Each import is timed plain and under memcheck with opgate's
# options (wall, user and system CPU seconds from /usr/bin/time), one library at a time on an idle GPU, then the
# sanitizer's help lines about module loading and patching. Wheels as library_env.sh.
#   OUT=/tmp/out bash scripts/gpu/sanitizer_import_probe.sh
set -u
OUT="${OUT:-/tmp/opgate-sanitizer-out}"
source "$(dirname "$0")/step.sh"
source "$(dirname "$0")/library_env.sh"
library_env sanitizer_import.log
CS="$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)"
OPTS=(--tool memcheck --print-limit 100 --error-exitcode 86 --track-stream-ordered-races all --padding 65536)
TIMED=(/usr/bin/time -f "%e s wall, %U s user, %S s system")
declare -A IMPORTS=(
  [torch]="import torch"
  [torch_cuda]="import torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize()"
  [fla]="import torch; torch.zeros(1, device='cuda'); import fla.modules"
  [flag_gems]="import torch; torch.zeros(1, device='cuda'); import flag_gems"
  [spec_fla_norms]="import torch; torch.zeros(1, device='cuda'); from opgate.core.spec import load_spec_file; load_spec_file('tests/data/verify/library_corpus/fla_norms.py')"
)
for name in torch torch_cuda fla flag_gems spec_fla_norms; do
  step "${name}_plain" 120 "${TIMED[@]}" python3 -c "${IMPORTS[$name]}"
  step "${name}_memcheck" 180 "${TIMED[@]}" "$CS" "${OPTS[@]}" --target-processes all python3 -c "${IMPORTS[$name]}"
done
step "spec_fla_norms_memcheck_lazy" 180 env CUDA_MODULE_LOADING=LAZY "${TIMED[@]}" "$CS" "${OPTS[@]}" --target-processes all python3 -c "${IMPORTS[spec_fla_norms]}"
step "spec_fla_norms_memcheck_app_only" 180 "${TIMED[@]}" "$CS" "${OPTS[@]}" --target-processes application-only python3 -c "${IMPORTS[spec_fla_norms]}"
"$CS" --help 2>&1 | grep -i -E -A2 "lazy|patch|module|target-processes|injection" >> "$LOG"
grep -E "^===== .*done|s wall" "$LOG" | tee "$OUT/library/sanitizer_import_summary.txt"
