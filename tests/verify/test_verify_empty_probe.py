"""Empty-tensor cases whose reference kills a process are dropped before calibration, in a child."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from opgate.verify import empty_probe
from opgate.verify.empty_probe import surviving_cases
from opgate.verify.inputs import Case

DATA = Path(__file__).resolve().parents[1] / "data" / "verify"


def test_a_case_that_kills_the_reference_is_dropped_and_the_rest_survive(opgate_env, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", opgate_env["PYTHONPATH"])
    cases = [Case.make({"M": 0, "N": 8}, 1, origin="edge"), Case.make({"M": 4, "N": 0}, 2, origin="edge"),
             Case.make({"M": 0, "N": 3}, 3, origin="edge")]
    assert surviving_cases(DATA / "fatal_empty_spec.py", "double", "float32", cases) == {1}


def test_a_prestarted_child_takes_its_cases_once_they_are_known_and_an_unused_one_ends(opgate_env, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", opgate_env["PYTHONPATH"])
    spec = DATA / "fatal_empty_spec.py"
    cases = [Case.make({"M": 0, "N": 8}, 1, origin="edge"), Case.make({"M": 4, "N": 0}, 2, origin="edge")]
    empty_probe.prestart(spec)  # imports the spec while the parent would load it too
    [child] = empty_probe._PRESTARTED.values()
    assert surviving_cases(spec, "double", "float32", cases) == {1}  # the first child got the cases, died on case 0
    assert empty_probe._PRESTARTED == {} and child.poll() is not None
    empty_probe.prestart(spec)
    [unused] = empty_probe._PRESTARTED.values()
    empty_probe.discard_prestarted()  # the run ends without probing (every verdict reused, no numerics stage)
    assert unused.poll() == 0 and empty_probe._PRESTARTED == {}


def test_verify_runs_past_a_reference_that_dies_on_an_empty_batch(tmp_path, opgate_env):
    report = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "opgate", "verify", str(DATA / "fatal_empty_spec.py"), "--budget",
                           "quick", "--no-extras", "--stages", "numerics", "--out", str(tmp_path / "o"), "--json",
                           str(report)], capture_output=True, text=True, timeout=600, env=opgate_env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = json.loads(report.read_text())
    assert data["extra"]["fatal_empty_cases"]["double"]


def test_an_interrupted_run_kills_the_probe_child_instead_of_waiting_for_it(tmp_path, opgate_env, monkeypatch):
    """The probe's thread is joined when the interpreter exits: a probe of a slow reference kept an interrupted
    library run alive past the CI runner's SIGTERM-to-SIGKILL grace (H200, the report lost). kill_all_children ends
    it, and no new probe child starts."""
    import threading
    import time

    from opgate.engine.children import kill_all_children, start_afresh

    spec = tmp_path / "slow_spec.py"
    entered = tmp_path / "entered"  # the reference says it runs: the child has imported torch and sits in it
    spec.write_text(f"import pathlib, time\nimport opgate\n"
                    f"def _slow(x):\n    pathlib.Path({str(entered)!r}).touch()\n    time.sleep(60)\n    return x\n"
                    "slow = opgate.Operator('slow', reference=_slow, inputs=[opgate.TensorSpec('x', ('N',))],\n"
                    "                       dims={'N': [4]}, dtypes=['float32'])\n"
                    "@slow.implementation('same', backend='torch')\ndef _same(x):\n    return x\n")
    monkeypatch.setenv("PYTHONPATH", opgate_env["PYTHONPATH"])
    cases = [Case.make({"N": 0}, 1, origin="edge"), Case.make({"N": 0}, 2, origin="edge")]
    found: list[set[int]] = []
    probe = threading.Thread(target=lambda: found.append(surviving_cases(spec, "slow", "float32", cases)))
    probe.start()
    deadline = time.monotonic() + 60
    while not entered.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert entered.exists(), "the probe child never reached the reference"
    started = time.perf_counter()
    try:
        kill_all_children()
        probe.join(timeout=20)
    finally:
        start_afresh()
    assert not probe.is_alive() and time.perf_counter() - started < 5
    assert found == [set()]


TIMED_SPEC = '''
import time

import opgate


def _slow(x):  # CPU time, not a sleep: the probe times this thread's CPU
    until = time.thread_time() + 0.03
    while time.thread_time() < until:
        pass
    return 2 * x


def _raises(x):
    if x.shape[0] > 0:
        raise RuntimeError("not on this case")
    return x


spec = dict(inputs=[opgate.TensorSpec("x", ("M", "N"))], dims={"M": [4], "N": [8]}, dtypes=["float32"])
slow = opgate.Operator("slow", reference=_slow, **spec)
fast = opgate.Operator("fast", reference=lambda x: 2 * x, **spec)
raising = opgate.Operator("raising", reference=_raises, **spec)
'''


def test_the_probe_child_times_one_call_of_each_reference_after_its_empty_cases(tmp_path, opgate_env, monkeypatch):
    """The calibration pool ranks its plans by one float64 call of each reference (verify/plan_order.py), timed in
    the probe child after the empty cases; a reference that raises there is left untimed (ranked by elements), and
    the empty cases' verdicts are those of a probe without timings."""
    from opgate.verify.empty_probe import probe_spec

    monkeypatch.setenv("PYTHONPATH", opgate_env["PYTHONPATH"])
    spec = tmp_path / "timed_spec.py"
    spec.write_text(TIMED_SPEC)
    case = Case.make({"M": 4, "N": 8}, 0)
    empty = [Case.make({"M": 0, "N": 8}, 1, origin="edge")]
    found = probe_spec(spec, {"fast": ("float32", empty)},
                       {name: ("float32", case) for name in ("slow", "fast", "raising")})
    assert found.survived == {"fast": {0}}
    assert set(found.call_seconds) == {"slow", "fast"}
    assert found.call_seconds["slow"] >= 0.03 > found.call_seconds["fast"]
    assert probe_spec(spec, {"fast": ("float32", empty)}).call_seconds == {}  # nothing asked, nothing timed


def test_a_timing_after_an_empty_case_that_killed_the_child_is_left_out(opgate_env, monkeypatch):
    """Only the first child times: a child started again after an empty case that killed it probes the rest of the
    empty cases alone."""
    from opgate.verify.empty_probe import probe_spec

    monkeypatch.setenv("PYTHONPATH", opgate_env["PYTHONPATH"])
    cases = [Case.make({"M": 0, "N": 8}, 1, origin="edge"), Case.make({"M": 4, "N": 0}, 2, origin="edge")]
    found = probe_spec(DATA / "fatal_empty_spec.py", {"double": ("float32", cases)},
                       {"double": ("float32", Case.make({"M": 4, "N": 8}, 0))})
    assert found.survived == {"double": {1}} and found.call_seconds == {}
