#!/usr/bin/env bash
# H200: the library corpus (tests/data/verify/library_corpus, FlagGems + fla-core) in ONE `opgate verify DIR` run
# at the default stages with an empty bound cache, then the same run again with the cache kept (issue #27's goals:
# <= 10 min, re-run <= 60 s). Wheels: scripts/library_corpus_env.sh --wheels .whl, plus pyelftools lz4 zstandard.
#   OUT=/tmp/out LIB_TIMEOUT_S=420 RERUN_TIMEOUT_S=150 bash scripts/gpu/library.sh
set -u
OUT="${OUT:-/tmp/opgate-library-out}"
source "$(dirname "$0")/step.sh"
source "$(dirname "$0")/library_env.sh"
library_env library.log
step versions 60 python3 -c "import torch, triton, flag_gems, fla; print(torch.__version__, triton.__version__, flag_gems.__version__, fla.__version__, torch.cuda.get_device_name())"
[[ "${LIB_TIMEOUT_S:-420}" != 0 ]] && step one_run "${LIB_TIMEOUT_S:-420}" python3 -m opgate verify tests/data/verify/library_corpus \
  --json "$OUT/library/one.json" --out /tmp/opgate-art
if [[ "${RERUN_TIMEOUT_S:-150}" != 0 ]]; then
  step rerun "${RERUN_TIMEOUT_S:-150}" python3 -m opgate verify tests/data/verify/library_corpus \
    --json "$OUT/library/rerun.json" --out /tmp/opgate-art
fi
for name in "${ORDER[@]}"; do echo "$name: ${STATUS[$name]}"; done | tee -a "$LOG"
tar -czf "$OUT/library.tgz" -C "$OUT" library
