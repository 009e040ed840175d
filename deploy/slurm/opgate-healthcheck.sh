#!/usr/bin/env bash
# opgate as Slurm's HealthCheckProgram, as a Prolog, or by hand (srun recipe: deploy/slurm/README.md).
#
#   opgate-healthcheck.sh healthcheck   slurm.conf HealthCheckProgram=/path/opgate-healthcheck.sh
#                                       Slurm drains nothing by itself: on a problem this script runs
#                                       `scontrol update NodeName=<node> State=DRAIN Reason="opgate: ..."`;
#                                       on a pass it resumes a node that *opgate* drained (states recover).
#   opgate-healthcheck.sh prolog        slurm.conf Prolog=...: a non-zero exit drains the node and requeues
#                                       the job; the one-line reason goes to stderr (slurmd log) and, as
#                                       above, into the node's Reason.
#   opgate-healthcheck.sh check         print the one-line verdict, change nothing.
#
# Exit codes: 0 ready (passed, warnings allowed); 1 not ready (a check failed or could not complete);
# 2 opgate could not judge this node (not installed, timed out, unreadable report): never a silent pass.
#
# Environment: OPGATE_PYTHON (python with opgate installed; default python3), OPGATE_LEVEL (basic),
# OPGATE_TIMEOUT (seconds; default 50, inside Slurm's 60 s limit for HealthCheckProgram),
# OPGATE_ARGS (extra doctor options, e.g. "--check gpu_inventory --check driver_runtime"),
# SCONTROL (default scontrol), SLURMD_NODENAME (set by slurmd; default: hostname -s).
set -u

mode="${1:-healthcheck}"
case "$mode" in
  healthcheck|prolog|check) ;;
  *) echo "usage: $0 [healthcheck|prolog|check]" >&2; exit 2 ;;
esac

python="${OPGATE_PYTHON:-python3}"
level="${OPGATE_LEVEL:-basic}"
limit="${OPGATE_TIMEOUT:-50}"
scontrol="${SCONTROL:-scontrol}"
node="${SLURMD_NODENAME:-$(hostname -s)}"
read -r -a extra_args <<< "${OPGATE_ARGS:-}"

workdir="$(mktemp -d "${TMPDIR:-/tmp}/opgate-hc.XXXXXX")" || exit 2
trap 'rm -rf "$workdir"' EXIT
report="$workdir/report.json"

timeout --kill-after=5 "$limit" "$python" -m opgate doctor --level "$level" --json "$report" \
  "${extra_args[@]}" >"$workdir/stdout" 2>"$workdir/stderr"
doctor_rc=$?

if [ "$doctor_rc" -eq 124 ] || [ "$doctor_rc" -eq 137 ]; then
  reason="opgate: no verdict: opgate doctor --level $level did not finish in ${limit}s"
  verdict=2
elif [ ! -s "$report" ]; then
  last="$(tail -n 1 "$workdir/stderr" 2>/dev/null | tr -cd '[:alnum:] .,:;=+/()_-' | cut -c1-150)"
  reason="opgate: no verdict: opgate doctor exited $doctor_rc without a report: ${last:-no output}"
  verdict=2
else
  reason="$("$python" -m opgate.fleet.slurm reason "$report")"
  verdict=$?
fi

drain() {
  command -v "$scontrol" >/dev/null 2>&1 || { echo "opgate-healthcheck: $scontrol not found; node not drained" >&2; return; }
  "$scontrol" update "NodeName=$node" State=DRAIN "Reason=$reason"
}

resume_if_opgate_drained() {
  command -v "$scontrol" >/dev/null 2>&1 || return 0
  state="$("$scontrol" show node "$node" 2>/dev/null)" || return 0
  case "$state" in
    *DRAIN*Reason=opgate:*) "$scontrol" update "NodeName=$node" State=RESUME ;;
  esac
}

echo "$reason"
if [ "$verdict" -eq 0 ]; then
  [ "$mode" = healthcheck ] && resume_if_opgate_drained
  exit 0
fi
[ "$mode" = prolog ] && echo "$reason" >&2
[ "$mode" != check ] && drain
[ "$verdict" -eq 1 ] && exit 1
exit 2
