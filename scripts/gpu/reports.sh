#!/usr/bin/env bash
# Issue 16 on a GPU host (H200): the HTML reports of doctor and verify with their GPU charts (figures vs
# per-GPU bands, roofline point, runtime median/p95), the host_links verdict against the packet-size ceiling,
# and `opgate diff` on two real runs. Run from the repo root; at most ~115 s (step time limits 32+16+60+20). Everything lands in
# $OUT/reports.tar.gz (JSON, HTML, logs, reports.log); a short result table is printed last.
# Each step's failure is printed and does not stop the others.
set -u
OUT="${OUT:-/tmp/opgate-out}"
WORK="$(mktemp -d)"
LOG="$WORK/reports.log"
export PYTHONPATH=src
PY="${PYTHON:-python3}"
source "$(dirname "$0")/step.sh"  # step NAME TIMEOUT_S COMMAND...
STEP_OUT_DIR="$WORK"  # each step's output in $WORK/NAME.out, its last 40 lines copied into the log below
nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv >>"$LOG" 2>&1
step doctor_a 32 "$PY" -m opgate doctor --level standard --json "$WORK/doctor_a.json" --html "$WORK/doctor_a.html" \
  --junit "$WORK/doctor_a.xml"
step doctor_b 16 "$PY" -m opgate doctor --level standard --check hbm_bandwidth --check host_links \
  --json "$WORK/doctor_b.json" --html "$WORK/doctor_b.html"
step verify 60 "$PY" -m opgate verify examples/ops/softmax.py --budget quick --no-extras --impl triton \
  --impl torch --dtype float16 --stages numerics,runtime --json "$WORK/verify.json" --html "$WORK/verify.html"
step diff 10 "$PY" -m opgate diff "$WORK/doctor_a.json" "$WORK/doctor_b.json" --threshold 5%
step host_links 5 "$PY" - "$WORK/doctor_a.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["results"]:
    if r["check_id"] == "doctor.host_links":
        print(r["outcome"], "|", r["reason"])
        for f in r["figures"]:
            if "pinned" in f["name"] or "ceiling" in f["name"] or "basis" in f["name"] or "theoretical" in f["name"]:
                print(" ", f["key"], f["labels"], f["value"] if f["value"] is not None else f["text"], f["unit"],
                      (f["threshold"] or {}).get("value", ""))
PY
step charts 5 "$PY" - "$WORK" <<'PY'
import pathlib, re, sys
for page in sorted(pathlib.Path(sys.argv[1]).glob("*.html")):
    text = page.read_text()
    ids = re.findall(r'<svg class="chart" id="([^"]+)"', text)
    print(page.name, len(text), "bytes; charts:", ", ".join(ids) or "none")
PY
for name in "${ORDER[@]}"; do { echo "=== $name (last 40 lines)"; tail -n 40 "$WORK/$name.out"; } >>"$LOG"; done
cat "$WORK/diff.out" "$WORK/host_links.out" "$WORK/charts.out" >>"$LOG" 2>/dev/null
mkdir -p "$OUT"
tar -czf "$OUT/reports.tar.gz" -C "$WORK" . 2>>"$LOG" || echo "tar failed"
echo "---- reports.sh results (files in \$OUT/reports.tar.gz) ----"
printf "%-12s %s\n" step "exit (time)"
for name in "${ORDER[@]}"; do printf "%-12s %s\n" "$name" "${RC[$name]} (${SECS[$name]}s)"; done
echo "host_links: $(head -n 1 "$WORK/host_links.out" 2>/dev/null | cut -c1-220)"
echo "diff: $(tail -n 1 "$WORK/diff.out" 2>/dev/null)"
cat "$WORK/charts.out" 2>/dev/null
