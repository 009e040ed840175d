# shellcheck shell=bash disable=SC2034  # ORDER, STATUS, RC and SECS are read by the scripts that source this file
# Sourced by the GPU-session scripts: `step NAME TIMEOUT_S COMMAND...` runs one step under its own time limit, a
# failure printed and not fatal. Its start and end lines go into "$LOG", and so does the command's output, unless
# STEP_OUT_DIR is set: then the output goes to $STEP_OUT_DIR/NAME.out and the status line to $STEP_OUT_DIR/NAME.status
# (what a step run in the background with & leaves for the caller). After it, ORDER holds the steps in run order,
# STATUS[NAME] "rc=N Ss", RC[NAME] the exit code and SECS[NAME] the seconds. STEP_DEADLINE (seconds since the epoch),
# when set, shortens each limit to the time left and skips a step left with less than 3 s.
declare -A STATUS RC SECS
ORDER=()

step() {
  local name="$1" limit="$2"; shift 2
  ORDER+=("$name")
  if [ -n "${STEP_DEADLINE:-}" ]; then
    local left=$(( STEP_DEADLINE - $(date +%s) ))
    [ "$left" -lt "$limit" ] && limit=$left
    if [ "$limit" -lt 3 ]; then
      STATUS[$name]="skipped (budget)"
      echo "===== $name: skipped, budget spent" >> "$LOG"
      return 0
    fi
  fi
  local out="$LOG"
  if [ -n "${STEP_OUT_DIR:-}" ]; then out="$STEP_OUT_DIR/$name.out"; : > "$out"; fi
  echo "===== $name ($(date -u +%H:%M:%S), limit ${limit}s): $*" >> "$LOG"
  local started=$SECONDS
  timeout --kill-after=5 "$limit" "$@" >> "$out" 2>&1
  local rc=$?
  RC[$name]=$rc
  SECS[$name]=$((SECONDS - started))
  STATUS[$name]="rc=$rc ${SECS[$name]}s"
  echo "===== $name done: rc=$rc in ${SECS[$name]}s" >> "$LOG"
  if [ -n "${STEP_OUT_DIR:-}" ]; then
    echo "$name: exit $rc in ${SECS[$name]} s (limit $limit s)" > "$STEP_OUT_DIR/$name.status"
  fi
  return 0
}
