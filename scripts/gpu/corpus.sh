#!/usr/bin/env bash
# The truth corpus on a GPU host (H200, sm_90): builds the nvcc cubins of tests/data/verify/truth_corpus/gpu/,
# runs scripts/truth_corpus.py --device gpu (CUDA C kernels through CuPy/NVRTC and nvcc cubins on PyTorch tensors)
# and prints its table last. Everything it produces goes into ONE file, $OUT/corpus.log (the JSON summary of every
# row is appended to it). Budget: at most 120 s (cubins ~10 s, spec files in parallel, each capped at 95 s).
# CORPUS_WITH_CPU=1 also runs the rows marked device="cpu" (the Triton kernels, compiled for the GPU);
# CORPUS_DEADLINE_S starts no spec file after that many seconds.
# Run from the repo root:  OUT=/some/dir bash scripts/gpu/corpus.sh
set -u
OUT="${OUT:-/tmp/opgate-corpus-out}"
mkdir -p "$OUT"
LOG="$OUT/corpus.log"
: > "$LOG"
PY="${PYTHON:-python3}"
NVCC="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
CORPUS=tests/data/verify/truth_corpus/gpu
BUILD="$(pwd)/$CORPUS/build"  # absolute: opgate's workers may run elsewhere
WORK="$(mktemp -d /tmp/opgate-corpus.XXXXXX)"
export OPGATE_CORPUS_CUBIN_DIR="$BUILD"
mkdir -p "$BUILD"

source "$(dirname "$0")/step.sh"  # step NAME TIMEOUT_S COMMAND...
section() { echo "== $*" | tee -a "$LOG"; }  # a heading, on the screen and in the log

section "host: $(date -u) $(hostname)"
{ nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader || echo "nvidia-smi failed"
  "$NVCC" --version | tail -2 || echo "nvcc not found at $NVCC"
  "$PY" -c "import torch, cupy; print('torch', torch.__version__, 'cuda', torch.version.cuda, '| cupy', cupy.__version__)" \
    || echo "torch/cupy import failed"; } >> "$LOG" 2>&1

section "nvcc cubins (sm_90): plain, -ftz=true, --use_fast_math"
for src in corpus_f32 corpus_f16; do
  for variant in plain ftz fastmath; do
    case "$variant" in plain) flags="" ;; ftz) flags="-ftz=true" ;; fastmath) flags="--use_fast_math" ;; esac
    if "$NVCC" -cubin -arch=sm_90 $flags -o "$BUILD/${src}_${variant}.cubin" "$CORPUS/kernels/$src.cu" >> "$LOG" 2>&1; then
      echo "built $BUILD/${src}_${variant}.cubin" >> "$LOG"
    else
      echo "FAILED: nvcc $flags $src.cu (the implementations using it will crash: counted, not fatal)" | tee -a "$LOG"
    fi
  done
done

section "truth corpus, device gpu, budget quick"
STEP_OUT_DIR="$WORK" step truth_corpus "${CORPUS_GUARD_S:-112}" env PYTHONPATH=src "$PY" scripts/truth_corpus.py \
  --device gpu --budget quick --parallel "${CORPUS_PARALLEL:-6}" --jobs "${CORPUS_JOBS:-3}" \
  --timeout "${CORPUS_FILE_TIMEOUT_S:-95}" --json-dir "$WORK/json" --summary "$WORK/summary.json" \
  ${CORPUS_WITH_CPU:+--with-cpu-corpus} ${CORPUS_DEADLINE_S:+--deadline "$CORPUS_DEADLINE_S"}
cat "$WORK/truth_corpus.out" >> "$LOG"
rc=${RC[truth_corpus]}
[ "$rc" -ne 0 ] && echo "runner exit code $rc (124: killed by the guard)" | tee -a "$LOG"
section "summary JSON"
cat "$WORK/summary.json" >> "$LOG" 2>/dev/null || echo "(no summary JSON)" >> "$LOG"
# The short result table, last.
tar -czf "$OUT/corpus_json.tar.gz" -C "$WORK" json 2>/dev/null || true
sed -n '/^## Truth corpus/,$p' "$LOG" | sed '/^== summary JSON/,$d' | head -90
rm -rf "$WORK"
