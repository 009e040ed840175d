#!/usr/bin/env bash
# The main job, end to end, on whatever machine this is. Each step is real work; on a CPU-only
# machine GPU checks say `skipped` with their reason. Exit code: the worst step's.
set -u
venv=${1:-.venv-demo}
report=${2:-opgate-report}
mkdir -p "$report"
opgate="$venv/bin/opgate"
worst=0
step() {
  echo
  echo "\$ opgate $*"
  "$opgate" "$@"
  code=$?
  echo "(exit code $code)"
  [ $code -gt $worst ] && worst=$code
}
step doctor --json "$report/doctor.json" --junit "$report/doctor.xml"
exit $worst
