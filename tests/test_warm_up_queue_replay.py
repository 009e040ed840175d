"""benchmarks/warm_up_queue_replay.py: a run's runtime warm-ups replayed in their order and longest first from its
report, on the slots the run gave them; a gradient twin's warm-up waits for its operator's, and longest chain first
weighs the two together; bad input is one line and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "warm_up_queue_replay.py"
sys.path.insert(0, str(REPO / "benchmarks"))

from queue_replay_cli import slots  # noqa: E402
from warm_up_queue_replay import by_chain, replay, warm_ups  # noqa: E402


def _report() -> dict:
    """One slot, then two: a short warm-up first, then its gradient twin and the long one."""
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


def test_the_slots_are_those_the_run_gave_until_its_last_warm_up_began_then_the_most_at_once() -> None:
    at, changes = slots(warm_ups(_report()))
    assert (at(0.0), at(9.0), at(10.0), at(75.0)) == (1, 1, 2, 2) and changes == [0.0, 10.0, 20.0, 70.0]


def test_longest_chain_first_weighs_a_short_warm_up_with_its_gradient_twins() -> None:
    """Longest first starts the 40 s warm-up in the one slot and the 50 s gradient twin only after its short forward;
    weighed as a chain, the forward and its twin go first and the 40 s one takes the second slot when it comes."""
    runs = warm_ups({"results": [], "extra": {"timeline": {
        "verify.f.f.float32.runtime_warm_up": [0.0, 5.0], "verify.f.grad.f.float32.runtime_warm_up": [5.0, 55.0],
        "verify.w.w.float32.runtime_warm_up": [50.0, 90.0]}}})
    assert replay(runs, lambda w: -w["seconds"]) == 95.0
    assert replay(runs, by_chain(runs)) == 90.0


def test_the_script_prints_the_orders_and_bad_input_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text(json.dumps(_report()))
    done = subprocess.run([sys.executable, str(SCRIPT), str(path), "--history", str(path)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "3 runtime warm-ups; the run's last ended at 70.0 s" in done.stdout
    assert "longest first by the earlier run's (3 of 3 known)" in done.stdout
    assert "longest chain first by the earlier run's (3 of 3 known)" in done.stdout
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"results": []}))
    for bad in ([str(empty)], [str(tmp_path / "none.json")], [str(path), "--other"]):
        done = subprocess.run([sys.executable, str(SCRIPT), *bad], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and done.stdout == "" and len(done.stderr.strip().splitlines()) == 1
