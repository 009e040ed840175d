#!/usr/bin/env bash
# The CPU truth corpus (Triton under TRITON_INTERPRET=1, torch on the CPU) on the GPU host's 16 CPU cores, where it
# runs several times faster than on a 2-core CI runner: scripts/truth_corpus.py --device cpu --budget quick, every
# spec file. Everything goes into $OUT/cpu_corpus.log (the table, then the JSON summary) and the opgate JSON reports
# into $OUT/cpu_corpus_json.tar.gz; the table is printed last.
# Run from the repo root:  OUT=/some/dir bash scripts/gpu/cpu_corpus.sh   (CPU_CORPUS_ONLY=SUBSTR for a subset)
set -u
OUT="${OUT:-/tmp/opgate-cpu-corpus-out}"
mkdir -p "$OUT"
LOG="$OUT/cpu_corpus.log"
WORK="$(mktemp -d /tmp/opgate-cpu-corpus.XXXXXX)"
PY="${PYTHON:-python3}"
echo "== host: $(date -u) $(hostname), $(nproc) CPUs" > "$LOG"
ONLY=()
[ -n "${CPU_CORPUS_ONLY:-}" ] && ONLY=(--only "$CPU_CORPUS_ONLY")
timeout "${CPU_CORPUS_GUARD_S:-520}" env PYTHONPATH=src "$PY" scripts/truth_corpus.py --device cpu --budget quick \
  "${ONLY[@]}" --parallel "${CPU_CORPUS_PARALLEL:-6}" --jobs "${CPU_CORPUS_JOBS:-3}" \
  --timeout "${CPU_CORPUS_FILE_TIMEOUT_S:-480}" --json-dir "$WORK/json" --summary "$WORK/summary.json" \
  > "$WORK/table.txt" 2>&1
rc=$?
cat "$WORK/table.txt" >> "$LOG"
[ "$rc" -ne 0 ] && echo "runner exit code $rc (124: killed by the guard)" | tee -a "$LOG"
echo "== summary JSON" >> "$LOG"
cat "$WORK/summary.json" >> "$LOG" 2>/dev/null || echo "(no summary JSON)" >> "$LOG"
tar -czf "$OUT/cpu_corpus_json.tar.gz" -C "$WORK" json 2>/dev/null || echo "(no JSON reports)" >> "$LOG"
rm -rf "$WORK"
sed -n '/^## Truth corpus/,$p' "$LOG" | sed '/^== summary JSON/,$d' | head -70
