#!/usr/bin/env bash
# GPU: one arm of an A/B of the library run (fla's and FlagGems' eight spec files, or LIB_PATHS) from empty caches of
# its own: Triton's kernels and autotuning, FlagGems' tuning database, opgate's bound terms and verdicts. Two arms on
# one machine, one call each, then compare like with like (the host measured once: scripts/host_speed.py); run the
# arms in the other order on the next machine. The sampler and the memory log are on, as in the library records.
# ARM names the arm in the log; what differs between the arms is the environment the caller gives each.
#   OUT=/tmp/out ARM=ahead LIMITS=552 bash scripts/gpu/library_ab.sh
#   OUT=/tmp/out ARM=no-ahead OPGATE_COMPILE_AHEAD=0 LIMITS=552 bash scripts/gpu/library_ab.sh
# SECONDS_FROM=FILE starts the arm's opgate cache with an earlier run's numerics seconds (check-seconds.json,
# verify/check_seconds.py) and nothing else of it: the next arm of an A/B of the numerics order, after a first arm
# whose own file (/tmp/opgate-ab-<arm>-*/opgate/check-seconds.json) it names.
#   OUT=/tmp/out ARM=by-seconds SECONDS_FROM=/tmp/opgate-ab-default-*/opgate/check-seconds.json bash scripts/gpu/library_ab.sh
set -u
OUT="${OUT:-/tmp/opgate-library-out}"
case "${ARM:-}" in
  ''|*[!A-Za-z0-9_-]*) echo "library_ab.sh: ARM='${ARM:-}': name the arm (letters, digits, - and _)" >&2; exit 2 ;;
esac
fresh="/tmp/opgate-ab-$ARM-$(date +%s)"
mkdir -p "$fresh" "$OUT/library"
export TRITON_CACHE_DIR="$fresh/triton" FLAGGEMS_CACHE_DIR="$fresh/flaggems" OPGATE_CACHE_DIR="$fresh/opgate"
if [ -n "${SECONDS_FROM:-}" ]; then
  # shellcheck disable=SC2086  # a glob the caller may give
  from=$(ls $SECONDS_FROM 2>/dev/null | head -1)
  [ -s "$from" ] || { echo "library_ab.sh: SECONDS_FROM='$SECONDS_FROM': no such check-seconds.json" >&2; exit 2; }
  mkdir -p "$OPGATE_CACHE_DIR" && cp "$from" "$OPGATE_CACHE_DIR/check-seconds.json"
fi
corpus=tests/data/verify/library_corpus
python3 scripts/gpu/gpu_memory_sampler.py --out "$OUT/library/gpu_memory.jsonl" --every 3 &
sampler=$!
# shellcheck disable=SC2012  # the corpus' file names are plain
OPGATE_WORKER_MEMORY_LOG="$OUT/library/held.jsonl" \
  LIB_PATHS="${LIB_PATHS:-$(ls $corpus/fla_*.py $corpus/flaggems_*.py | tr '\n' ' ')}" LIMITS="${LIMITS:-552}" \
  OUT="$OUT" bash "$(dirname "$0")/library_rerun.sh"
kill "$sampler" 2>/dev/null
python3 scripts/gpu/gpu_memory_sampler.py --summary "$OUT/library/gpu_memory.jsonl" > "$OUT/library/gpu_memory_summary.txt" 2>&1
[ -s "$OUT/library/run1.json" ] && python3 scripts/gpu/library_agreement.py "$OUT/library/run1.json" \
  > "$OUT/library/agreement.txt" 2>&1
# which config Triton's autotuner kept at each key of the run, and whether one holds over 64 elements a thread (the
# configs the runtime stage leaves out unless OPGATE_RUNTIME_AUTOTUNE=all): read from the arm's Triton cache; in an
# arm with OPGATE_RUNTIME_AUTOTUNE=all it says whether that leaves out a config the autotuner would keep
{ echo "===== autotune winners ($TRITON_CACHE_DIR)"; python3 scripts/gpu/autotune_winners.py "$TRITON_CACHE_DIR"; } \
  >> "$OUT/library/rerun.log" 2>&1
echo "arm $ARM (OPGATE_* set: $(env | grep ^OPGATE_ | sort | tr '\n' ' ')), caches in $fresh" >> "$OUT/library/rerun.log"
