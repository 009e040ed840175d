#!/usr/bin/env bash
# H200: fla's and FlagGems' eight library files in one `opgate verify` run with compile-ahead tasks on or off
# (OPGATE_COMPILE_AHEAD, verify/compile_ahead.py), for an A/B over two calls on the same or a fresh machine. Each run
# starts from an empty Triton cache of its own and judges everything (OPGATE_CACHE=0: no stored verdicts or bound
# terms), after the shared bytecode of torch, triton, fla and FlagGems was written once (so neither run pays it).
# Results in $OUT/library (ahead$AHEAD.json, its summary and the manifest agreement), packed as $OUT/library_ahead.tgz.
#   OUT=/tmp/out AHEAD=1 LIMIT=540 bash scripts/gpu/library_compile_ahead.sh
set -u
OUT="${OUT:-/tmp/opgate-library-out}"
source "$(dirname "$0")/step.sh"
source "$(dirname "$0")/library_env.sh"
library_env "ahead${AHEAD:-1}.log"
export OPGATE_CACHE=0 OPGATE_COMPILE_AHEAD="${AHEAD:-1}" TRITON_CACHE_DIR="/tmp/triton-ahead${AHEAD:-1}-$$"
# the run's processes read bytecode from opgate's cache folder (engine/bytecode.py): written here once, beforehand
step bytecode 120 env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX="$OPGATE_CACHE_DIR/bytecode" \
  python3 -c "import torch, triton, fla.modules, flag_gems, opgate.verify.engine"
FILES="$(ls tests/data/verify/library_corpus/fla_*.py tests/data/verify/library_corpus/flaggems_*.py | tr '\n' ' ')"
# shellcheck disable=SC2086  # FILES is a list of paths
step "ahead${AHEAD:-1}" $(( ${LIMIT:-540} + 30 )) python3 -m opgate verify $FILES --time-limit "${LIMIT:-540}" \
  --json "$OUT/library/ahead${AHEAD:-1}.json" --out "/tmp/opgate-art-ahead${AHEAD:-1}"
if [[ -s "$OUT/library/ahead${AHEAD:-1}.json" ]]; then
  python3 scripts/gpu/library_summary.py "$OUT/library/ahead${AHEAD:-1}.json" >> "$LOG" 2>&1
  python3 scripts/gpu/library_agreement.py "$OUT/library/ahead${AHEAD:-1}.json" >> "$LOG" 2>&1
fi
tail -40 "$LOG"
tar -czf "$OUT/library_ahead.tgz" -C "$OUT" library
