"""benchmarks/numerics_queue_replay.py: a run's numerics queue replayed in three orders from its report; bad input
is one line and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "numerics_queue_replay.py"
sys.path.insert(0, str(REPO / "benchmarks"))

from numerics_queue_replay import numerics_checks, replay  # noqa: E402


def _report() -> dict:
    """Two slots' worth of starts: a long check written last waits behind two short ones written first."""
    def numerics(op: str, impl: str) -> dict:
        return {"check_id": f"verify.{op}.{impl}.float32", "extra": {"phase_s": {}, "cases": []}}

    return {"results": [numerics("a", "a"), numerics("b", "b"), numerics("long.grad", "long"),
                        {"check_id": "verify.a.a.float32.runtime", "extra": {}}],
            "extra": {"engine": {"calibration_spans_s": {"a float32": [0.0, 10.0], "b float32": [0.0, 10.0],
                                                         "long.grad float32": [0.0, 12.0]}},
                      "timeline": {"verify.a.a.float32": [10.0, 30.0], "verify.b.b.float32": [12.0, 32.0],
                                   "verify.long.grad.long.float32": [30.0, 90.0]}}}


def test_the_checks_and_their_plans_are_read_from_the_report() -> None:
    checks = numerics_checks(_report())
    assert [(c["id"], c["ready"], c["seconds"]) for c in checks] == [
        ("verify.a.a.float32", 10.0, 20.0), ("verify.b.b.float32", 10.0, 20.0),
        ("verify.long.grad.long.float32", 12.0, 60.0)]


def test_the_orders_replayed_on_the_runs_slots() -> None:
    checks = numerics_checks(_report())
    assert replay(checks, lambda c: c["ready"]) == 90.0  # as the run went
    assert replay(checks, lambda c: -c["seconds"]) == 72.0  # the long one takes the slot at 12 s


def test_the_script_prints_the_three_orders(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text(json.dumps(_report()))
    done = subprocess.run([sys.executable, str(SCRIPT), str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "3 numerics checks; the run's last ended at 90.0 s" in done.stdout
    assert "longest first, knowing each check's seconds" in done.stdout


def test_a_report_without_numerics_is_one_line_and_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"results": []}))
    done = subprocess.run([sys.executable, str(SCRIPT), str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == "" and len(done.stderr.strip().splitlines()) == 1
    missing = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "none.json")], capture_output=True,
                             text=True, timeout=60)
    assert missing.returncode == 2 and "not a readable JSON report" in missing.stderr


def test_an_earlier_runs_seconds_order_the_fourth_replay(tmp_path: Path) -> None:
    """What opgate does with an earlier run's seconds (verify/check_seconds.py): here the earlier run knew the long
    check as long, so the replay matches the longest-first one; bad --history input is one line and exit 2."""
    path = tmp_path / "run.json"
    path.write_text(json.dumps(_report()))
    done = subprocess.run([sys.executable, str(SCRIPT), str(path), "--history", str(path)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    line = next(row for row in done.stdout.splitlines() if "by the earlier run's (3 of 3 known)" in row)
    assert line.split()[-2] == "72.0"
    for argv in ([str(path), "--history"], [str(path), "--history", str(tmp_path / "none.json")]):
        bad = subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, timeout=60)
        assert bad.returncode == 2 and bad.stdout == "" and len(bad.stderr.strip().splitlines()) == 1
