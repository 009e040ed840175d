# Sourced by the GPU-session scripts: `step NAME TIMEOUT_S COMMAND...` runs one step into "$LOG" under its own
# time limit, a failure printed and not fatal; STATUS[NAME] holds "rc=N Ss" and ORDER the steps in run order.
declare -A STATUS
ORDER=()

step() {
  local name="$1" limit="$2"; shift 2
  ORDER+=("$name")
  echo "===== $name ($(date -u +%H:%M:%S), limit ${limit}s): $*" >> "$LOG"
  local started=$SECONDS
  timeout --kill-after=5 "$limit" "$@" >> "$LOG" 2>&1
  local rc=$?
  STATUS[$name]="rc=$rc $((SECONDS - started))s"
  echo "===== $name done: rc=$rc in $((SECONDS - started))s" >> "$LOG"
}
