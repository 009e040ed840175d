#!/usr/bin/env bash
# Exit codes on a GPU host (issue 14, hardening): --require-gpu / --fail-on-skip pass where a GPU is visible, Ctrl-C in the
# middle of measured GPU probes and of a verify run exits 130 with the report so far and no process left, and a
# spec that exits at import is exit 2. Run from the repo root; everything goes to $OUT/exit_codes.log; the last
# lines printed are a result table. Each step has its own timeout (115 s in all); a failing step does not stop
# the others.
set -u
OUT="${OUT:-/tmp/opgate-out}"
mkdir -p "$OUT"
LOG="$OUT/exit_codes.log"
: > "$LOG"
T="$(mktemp -d)"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
PY="${PYTHON:-python3}"
source "$(dirname "$0")/step.sh"  # step NAME TIMEOUT_S COMMAND...
declare -a ROWS=()

row() { ROWS+=("$(printf '%-34s %-6s %s' "$1" "$2" "$3")"); }

expect_exit() {  # expect_exit NAME SECONDS EXPECTED_RC CMD...: a step whose exit code is its verdict
  local name="$1" secs="$2" want="$3"; shift 3
  echo "=== $name: expect exit $want" >> "$LOG"
  step "$name" "$secs" "$@"
  local rc="${RC[$name]}"
  if [ "$rc" = "$want" ]; then row "$name" PASS "exit $rc, ${SECS[$name]} s"; else row "$name" FAIL "exit $rc (want $want)"; fi
}

cat > "$T/interrupt.py" <<'PYEOF'
"""Start opgate, send SIGINT 2 s after its first check worker runs (at most WAIT seconds), then check: exit
130, one stderr line, report marked interrupted, no process of the run alive (found by an environment marker)."""
import json, os, signal, subprocess, sys, time, uuid
wait_s, report, args = float(sys.argv[1]), sys.argv[2], sys.argv[3:]
marker = uuid.uuid4().hex
env = dict(os.environ, OPGATE_HARDENING_RUN=marker)
proc = subprocess.Popen([sys.executable, "-m", "opgate", *args, "--json", report], env=env,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def workers():
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if (f"OPGATE_HARDENING_RUN={marker}".encode() in open(f"/proc/{pid}/environ", "rb").read()
                    and b"opgate.engine.worker" in open(f"/proc/{pid}/cmdline", "rb").read()):
                found.append(pid)
        except OSError:
            pass
    return found


start = time.time()
while not workers() and time.time() - start < wait_s and proc.poll() is None:
    time.sleep(0.2)
print(f"first worker after {time.time() - start:.1f} s" if workers() else "no worker seen")
time.sleep(2)
if proc.poll() is not None:
    print("FAIL: the run ended before the interrupt, exit", proc.returncode); print(proc.stdout[-2000:], proc.stderr[-2000:]); sys.exit(3)
t0 = time.time(); proc.send_signal(signal.SIGINT); out, err = proc.communicate(timeout=60)
print(f"exit {proc.returncode} {time.time() - t0:.1f} s after SIGINT; stderr: {err.strip()!r}")
time.sleep(1)
left = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        if f"OPGATE_HARDENING_RUN={marker}".encode() in open(f"/proc/{pid}/environ", "rb").read():
            left.append((pid, open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ")[:120]))
    except OSError:
        pass
print("processes left:", left)
ok = proc.returncode == 130 and len(err.strip().splitlines()) == 1 and not left
try:
    data = json.load(open(report))
    print("report: interrupted", data.get("interrupted"), "results", len(data["results"]),
          "not run", data["extra"].get("not_run"))
    ok = ok and data.get("interrupted") is True
except (OSError, ValueError, KeyError) as exc:
    print("no readable report:", exc); ok = False
sys.exit(0 if ok else 1)
PYEOF

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> "$LOG" 2>&1
expect_exit "doctor --require-gpu" 35 0 "$PY" -m opgate doctor --require-gpu --json "$T/doctor.json"
"$PY" - "$T/doctor.json" >> "$LOG" 2>&1 <<'PYEOF'
import json, sys
try:
    results = {r["check_id"]: r for r in json.load(open(sys.argv[1]))["results"]}
    print("gpu.required:", results.get("gpu.required", {}).get("outcome"), results.get("gpu.required", {}).get("reason"))
    print("skipped:", [k for k, r in results.items() if r["outcome"] == "skipped"])
except Exception as exc:
    print("no doctor report:", exc)
PYEOF
expect_exit "doctor --fail-on-skip (inventory)" 15 0 "$PY" -m opgate doctor --fail-on-skip --check gpu_inventory --check driver_runtime
expect_exit "SIGINT in doctor --level standard" 30 0 "$PY" "$T/interrupt.py" 15 "$T/standard.json" doctor --level standard
expect_exit "spec that calls sys.exit(0)" 10 2 "$PY" -m opgate verify tests/data/bad_input/spec_exits_0.py
expect_exit "SIGINT in verify (GPU children)" 25 0 "$PY" "$T/interrupt.py" 15 "$T/verify.json" verify tests/data/bad_input/slow_spec.py --budget quick --no-extras --out "$T/out"
rm -rf "$T"
{
  echo
  echo "exit codes on the GPU host ($(date -u +%FT%TZ))"
  printf '%-34s %-6s %s\n' step result detail
  for r in "${ROWS[@]}"; do echo "$r"; done
} | tee -a "$LOG"
