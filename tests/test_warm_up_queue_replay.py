"""benchmarks/warm_up_queue_replay.py: a run's runtime warm-ups replayed in their order and longest first from its
report; a gradient twin's warm-up waits for its operator's; bad input is one line and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "warm_up_queue_replay.py"
sys.path.insert(0, str(REPO / "benchmarks"))

from warm_up_queue_replay import replay, warm_ups  # noqa: E402


def _report() -> dict:
    """Two slots: two short warm-ups first, the long one last; the gradient twin after its operator's."""
    return {"results": [], "extra": {"timeline": {
        "verify.a.a.float32.runtime_warm_up": [0.0, 10.0], "verify.a.grad.a.float32.runtime_warm_up": [10.0, 20.0],
        "verify.long.l.float32.runtime_warm_up": [10.0, 70.0],
        "verify.a.a.float32.runtime": [80.0, 81.0]}}}


def test_the_warm_ups_are_read_from_the_timeline() -> None:
    assert [(w["id"], w["start"], w["seconds"]) for w in warm_ups(_report())] == [
        ("verify.a.a.float32.runtime_warm_up", 0.0, 10.0), ("verify.a.grad.a.float32.runtime_warm_up", 10.0, 10.0),
        ("verify.long.l.float32.runtime_warm_up", 10.0, 60.0)]


def test_the_orders_replayed_on_the_runs_slots() -> None:
    runs = warm_ups(_report())
    assert replay(runs, lambda w: w["start"]) == 70.0  # as the run went
    # longest first: the long one takes the slot at 0 s; the gradient twin waits for its operator's warm-up
    assert replay(runs, lambda w: -w["seconds"]) == 60.0


def test_the_script_prints_the_orders_and_bad_input_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text(json.dumps(_report()))
    done = subprocess.run([sys.executable, str(SCRIPT), str(path), "--history", str(path)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "3 runtime warm-ups; the run's last ended at 70.0 s" in done.stdout
    assert "longest first by the earlier run's (3 of 3 known)" in done.stdout
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"results": []}))
    for bad in ([str(empty)], [str(tmp_path / "none.json")], [str(path), "--other"]):
        done = subprocess.run([sys.executable, str(SCRIPT), *bad], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and done.stdout == "" and len(done.stderr.strip().splitlines()) == 1
