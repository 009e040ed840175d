"""A construct Triton's CPU interpreter cannot run is the `interpreter` deviation (not judged here), not the kernel's
crash; the kernel's own errors and its wrapper's stay crashes, and a failure elsewhere in the plan stands.

tests/data/verify/interpreter_gap_probe.py raises each kind of error under TRITON_INTERPRET=1 (in a child: Triton
reads it at import); tests/data/verify/interpreter_gap_spec.py is a soft-capped cross-entropy whose looped kernel
uses `(1.0 / softcap).to(tl.float32)`, valid Triton the interpreter keeps as a Python float.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from opgate.verify.backends.base import BackendLimitation
from tests_verify_support import DATA, ROOT, SRC


def _child_env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(SRC), **extra}
    return env


def test_a_limitation_round_trips_through_its_reason_line():
    limitation = BackendLimitation("interpreter", "Triton's CPU interpreter does not support `x.to(tl.float32)` at "
                                                 "k.py:3 (AttributeError: 'float' object has no attribute 'to')",
                                   "run on a GPU to judge it")
    assert limitation.reason().startswith("not judged here [interpreter]: ")
    assert BackendLimitation.from_reason(limitation.reason()) == limitation
    assert BackendLimitation.from_reason("raised AttributeError: 'float' object has no attribute 'to'") is None


def test_a_failed_assertion_inside_the_interpreter_is_the_kernels_own():
    from triton.runtime.errors import InterpreterError

    from opgate.verify.backends.triton_interpreter_gaps import interpreter_gap

    def wrapped(inner: Exception) -> Exception:
        try:
            try:
                raise inner
            except Exception as exc:
                raise InterpreterError(repr(exc)) from exc
        except InterpreterError as outer:
            return outer

    assert interpreter_gap(wrapped(AssertionError("N must exceed the block"))) is None
    assert interpreter_gap(wrapped(NotImplementedError("inline_asm not supported in interpreter mode"))) is not None
    assert interpreter_gap(AttributeError("'float' object has no attribute 'to'")) is None  # no interpreter involved


@pytest.mark.slow
def test_the_interpreters_gaps_are_named_and_the_kernels_own_errors_are_not():
    proc = subprocess.run([sys.executable, str(DATA / "interpreter_gap_probe.py")], cwd=ROOT,
                          env=_child_env(TRITON_INTERPRET="1"), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout)
    for name, construct, error in [
            ("float_argument_to", "x * cap.to(tl.float32)", "AttributeError: 'float' object has no attribute 'to'"),
            ("constexpr_expression_to", "(1.0 / CAP).to(tl.float32)", "'float' object has no attribute 'to'"),
            ("inline_asm", "tl.inline_asm_elementwise(", "NotImplementedError: inline_asm not supported"),
            ("libdevice_in_a_helper", "_libdevice_tanh(x) + 1.0", "stubs that return None"),
            ("builtin_alias", "cast_alias(x, tl.float32)", "which the interpreter does not patch")]:
        limitation = BackendLimitation.from_reason(found[name])
        assert limitation is not None and limitation.deviation == "interpreter", (name, found[name])
        assert construct in limitation.what and error in limitation.what, (name, limitation.what)
        assert "interpreter_gap_probe.py:" in limitation.what and limitation.remedy == "run on a GPU to judge it"
    for name in ("shape_error", "typo_on_a_tensor", "wrapper_attribute_error"):
        assert found[name] is None, (name, found[name])


@pytest.fixture(scope="module")
def gap_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("verify-interpreter-gap")
    env = _child_env()
    env.pop("TRITON_INTERPRET", None)
    proc = subprocess.run([sys.executable, "-m", "opgate", "verify", str(DATA / "interpreter_gap_spec.py"), "--budget",
                           "quick", "--stages", "numerics", "--no-extras", "--json", str(out / "report.json"), "--out",
                           str(out / "art")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    results = {r["check_id"]: r for r in json.loads((out / "report.json").read_text())["results"]}
    return proc, results


def _deviations(result) -> list[dict]:
    return result["extra"]["deviations"]


@pytest.mark.slow
def test_cases_the_interpreter_cannot_run_warn_with_the_construct_and_the_others_are_judged(gap_run):
    proc, results = gap_run
    assert proc.returncode == 1, proc.stderr[-3000:]  # the buggy twin and the wrapper's crash fail
    result = results["verify.softcap_ce.triton.float16"]
    assert result["outcome"] == "warned", result["reason"]
    assert "cases judged and within budget" in result["reason"] and "not judged [interpreter]" in result["reason"]
    assert "`inv_cap = (1.0 / softcap).to(tl.float32)` at interpreter_gap_spec.py:" in result["reason"]
    assert "'float' object has no attribute 'to'" in result["reason"] and "run on a GPU to judge it" in result["reason"]
    assert [d["class"] for d in _deviations(result)] == ["interpreter"]
    judged = [c for c in result["extra"]["cases"] if c["passed"]]
    assert judged and all(c["case"].split("V=")[1].split()[0] != "16385" for c in judged)


@pytest.mark.slow
def test_when_no_case_runs_the_verdict_says_nothing_was_judged(gap_run):
    _, results = gap_run
    result = results["verify.softcap_ce.triton_gap_everywhere.float16"]
    assert result["outcome"] == "warned", result["reason"]
    assert result["reason"].startswith("no case was judged here [interpreter]")
    n = len(result["extra"]["cases"])
    assert f"{n}/{n} case(s) cannot be judged here" in result["reason"]


@pytest.mark.slow
def test_a_failure_where_the_interpreter_runs_stands_beside_the_gap(gap_run):
    _, results = gap_run
    result = results["verify.softcap_ce.triton_gap_and_bug.float16"]
    assert result["outcome"] == "failed" and result["extra"]["failure_class"] == "typical", result["reason"]
    assert [d["class"] for d in _deviations(result)] == ["interpreter"]
    assert "also documented deviation(s)" in result["reason"]
    assert "V=16385" not in result["extra"]["smallest_failing_label"]


@pytest.mark.slow
def test_the_wrappers_own_exception_stays_a_crash(gap_run):
    _, results = gap_run
    result = results["verify.softcap_ce.wrapper_error.float16"]
    assert result["outcome"] == "failed" and result["extra"]["failure_class"] == "crash", result["reason"]
    assert "raised AttributeError: 'float' object has no attribute 'to'" in result["reason"]
    assert "interpreter" not in [d["class"] for d in _deviations(result)]
    assert results["verify.softcap_ce.torch.float16"]["outcome"] == "passed"
