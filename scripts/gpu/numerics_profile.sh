#!/usr/bin/env bash
# H200: where a library's numerics time goes. One spec file (PROFILE_SPEC, default fla_sequence.py), numerics
# only: run A fills the bound cache (Triton cache empty); B the same with the bound cache kept and an empty Triton
# cache, under py-spy (every process, raw stacks); C as B with --jobs 4 (fewer processes time-slicing the GPU).
#   OUT=/tmp/out bash scripts/gpu/numerics_profile.sh   (wheels in .whl/, py-spy among them)
set -u
OUT="${OUT:-/tmp/opgate-library-out}"
source "$(dirname "$0")/step.sh"
source "$(dirname "$0")/library_env.sh"
library_env profile.log
SPEC="${PROFILE_SPEC:-tests/data/verify/library_corpus/fla_sequence.py}"
LIMIT="${PROFILE_TIMEOUT_S:-150}"
# an array, not a shell function: `timeout` (inside step) runs programs only
VERIFY=(python3 -m opgate verify "$SPEC" --stages numerics --out /tmp/opgate-art)
TRITON_CACHE_DIR=/tmp/triton-a step a_jobs16_cold "$LIMIT" "${VERIFY[@]}" --json "$OUT/library/a.json"
TRITON_CACHE_DIR=/tmp/triton-b step b_jobs16_profiled "$LIMIT" /tmp/site/bin/py-spy record --subprocesses \
  --nonblocking --rate 25 --duration $((LIMIT - 20)) --format raw -o "$OUT/library/b.prof" -- python3 -m opgate verify "$SPEC" --stages numerics \
  --out /tmp/opgate-art --json "$OUT/library/b.json"
[[ -s "$OUT/library/b.prof" ]] || TRITON_CACHE_DIR=/tmp/triton-b2 step b_jobs16 "$LIMIT" "${VERIFY[@]}" --json "$OUT/library/b.json"
TRITON_CACHE_DIR=/tmp/triton-c step c_jobs4 "$LIMIT" "${VERIFY[@]}" --jobs 4 --json "$OUT/library/c.json"
for name in "${ORDER[@]}"; do echo "$name: ${STATUS[$name]}"; done | tee -a "$LOG"
gzip -f "$OUT/library/b.prof" 2>/dev/null
tar -czf "$OUT/numerics_profile.tgz" -C "$OUT" library
