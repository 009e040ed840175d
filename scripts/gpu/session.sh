#!/usr/bin/env bash
# One device call that runs several scripts/gpu/NAME.sh in sequence, each with its own time limit, and prints one
# table last. Usage (repo root, on the GPU host): bash scripts/gpu/session.sh NAME[:SECONDS] ...
# Each NAME.sh writes its own $OUT/NAME.log or $OUT/NAME.tar.gz; this script adds $OUT/session.txt.
# SESSION_BUDGET_S (default 560) caps the whole call so the table is printed inside a 10-minute command.
set -u
cd "$(dirname "$0")/../.." || exit 2
OUT="${OUT:-/tmp/opgate-out}"
mkdir -p "$OUT"
BUDGET_S="${SESSION_BUDGET_S:-560}"
START_S=$(date +%s)
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ROWS=()
for spec in "$@"; do
  name="${spec%%:*}"; limit="${spec#*:}"; [ "$limit" = "$spec" ] && limit=120
  left=$(( BUDGET_S - ($(date +%s) - START_S) - 10 ))
  if [ "$left" -lt 15 ]; then ROWS+=("$name | skipped: session budget spent"); continue; fi
  [ "$limit" -gt "$left" ] && limit=$left
  t0=$(date +%s)
  echo "=== $name (limit ${limit}s) $(date -u +%H:%M:%S)"
  timeout --kill-after=5 "$limit" bash "scripts/gpu/$name.sh"
  rc=$?
  ROWS+=("$name | rc=$rc | $(( $(date +%s) - t0 ))s")
done
{
  echo "session $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
  printf '%s\n' "${ROWS[@]}"
} | tee "$OUT/session.txt"
