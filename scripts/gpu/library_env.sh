# Sourced by the library-corpus GPU scripts after step.sh, with OUT set: `library_env LOGNAME` makes $OUT/library,
# starts $LOG there, installs the carried wheels (.whl/: scripts/library_corpus_env.sh --wheels) into /tmp/site
# and exports the PYTHONPATH and bound cache every step uses.
library_env() {
  mkdir -p "$OUT/library"
  LOG="$OUT/library/$1"
  : > "$LOG"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >> "$LOG" 2>&1 || { echo "wheel install failed" >> "$LOG"; }
  export PYTHONPATH="$PWD/src:/tmp/site" PYTHONUNBUFFERED=1 OPGATE_CACHE_DIR=/tmp/opgate-bound-cache
}
