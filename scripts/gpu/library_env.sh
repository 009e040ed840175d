# Sourced by the library-corpus GPU scripts after step.sh, with OUT set: `library_env LOGNAME` makes $OUT/library,
# starts $LOG there, installs the carried wheels (.whl/: scripts/library_corpus_env.sh --wheels) into /tmp/site
# and exports the PYTHONPATH and bound cache every step uses; the host's speed is measured once per machine
# (scripts/host_speed.py: $OUT/library/host_speed.json). The wheels are installed as `pip install` does by default,
# their bytecode compiled (until the fifty-fifth session --no-compile: each of a library run's ~28 processes that
# start together then compiled fla's and FlagGems' modules itself, about 0.8 CPU-s a process for fla on the 2-core
# machine).
library_env() {
  mkdir -p "$OUT/library"
  LOG="$OUT/library/$1"
  : > "$LOG"
  python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >> "$LOG" 2>&1 || { echo "wheel install failed" >> "$LOG"; }
  export PYTHONPATH="$PWD/src:/tmp/site" PYTHONUNBUFFERED=1 OPGATE_CACHE_DIR="${OPGATE_CACHE_DIR:-/tmp/opgate-bound-cache}"
  # how fast this host compiles (scripts/host_speed.py), once per machine: runs on different hosts differ by tens of
  # percent per task, and a library run's figures mean little without it. HOST_SPEED=0 skips it.
  if [ "${HOST_SPEED:-1}" != 0 ]; then
    [ -s /tmp/opgate-host-speed.json ] || python3 scripts/host_speed.py --out /tmp/opgate-host-speed.json >> "$LOG" 2>&1
    cp /tmp/opgate-host-speed.json "$OUT/library/host_speed.json" 2>/dev/null
    echo "host speed: $(cat /tmp/opgate-host-speed.json 2>/dev/null || echo 'not measured')" >> "$LOG"
  fi
}
