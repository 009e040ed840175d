"""verify/compile_ahead.py: a GPU implementation called once per distinct shape of its case plan before its plan is
written, in its numerics check's worker key, its result never reported. The calls run here on the CPU (torch eager):
what a compile-ahead saves needs a GPU and is measured there (docs/benchmarks.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from opgate.checks.base import CheckContext
from opgate.model.results import CheckResult, Outcome
from opgate.verify import compile_ahead, plan_order
from opgate.verify.inputs import Case, plan_cases
from opgate.verify.tasks import CompileAheadPayload

ROOT = Path(__file__).resolve().parents[2]
SOFTMAX = ROOT / "examples" / "ops" / "softmax.py"


def test_a_gpu_run_of_a_library_makes_compile_ahead_tasks_one_spec_file_only_where_asked(monkeypatch) -> None:
    monkeypatch.delenv(compile_ahead.ENV, raising=False)
    assert compile_ahead.wanted(True, library=True)  # measured on the H100 host: the library's numerics sooner
    assert not compile_ahead.wanted(True)  # one spec file: not measured
    monkeypatch.setenv(compile_ahead.ENV, "1")
    assert compile_ahead.wanted(True)
    assert not compile_ahead.wanted(False, library=True)  # no compiles to save under the interpreter or on the CPU
    monkeypatch.setenv(compile_ahead.ENV, "0")
    assert not compile_ahead.wanted(True, library=True)


def test_one_call_per_shape_and_layout_the_largest_first_and_no_empty_case() -> None:
    cases = [Case.make({"M": 4, "N": 8}, 0), Case.make({"M": 4, "N": 8}, 1, regime="large"),
             Case.make({"M": 4, "N": 8}, 2, layout="strided"), Case.make({"M": 1, "N": 65537}, 3),
             Case.make({"M": 0, "N": 8}, 4)]
    shapes = compile_ahead.distinct_shapes(cases, lambda case: case.dims_dict["M"] * case.dims_dict["N"])
    assert [(case.dims_dict, case.layout) for case in shapes] == [
        ({"M": 1, "N": 65537}, "contiguous"), ({"M": 4, "N": 8}, "contiguous"), ({"M": 4, "N": 8}, "strided")]


def _evaluate(tmp_path: Path, plan_written: bool) -> CheckResult:
    plan = tmp_path / "plan-0-0-softmax-float32.pt"
    if plan_written:
        plan.write_bytes(b"")
    payload = CompileAheadPayload(spec_file=str(SOFTMAX), op="softmax", impl="torch", dtype="float32",
                                  budget="quick", seed=0, plan_path=str(plan), workdir=str(tmp_path))
    return compile_ahead.CompileAheadCheck().evaluate(CheckContext(verb="verify", options=payload.to_dict()))


def test_it_calls_the_implementation_at_every_distinct_shape_and_reports_nothing(tmp_path: Path) -> None:
    from opgate.verify.loaded_specs import loaded_operators

    result = _evaluate(tmp_path, plan_written=False)
    op = next(o for o in loaded_operators(str(SOFTMAX)) if o.name == "softmax")
    expected = len(compile_ahead.distinct_shapes(plan_cases(op, "quick", 0), lambda case: 1))
    assert result.outcome is Outcome.PASSED
    assert result.extra["internal"] is True  # the engine leaves it out of the report
    assert (result.extra["calls"], result.extra["raised"], result.extra["stopped"]) == (expected, 0, "")


def test_it_stops_once_its_plan_is_written(tmp_path: Path) -> None:
    result = _evaluate(tmp_path, plan_written=True)
    assert (result.extra["calls"], result.extra["stopped"]) == (0, "its plan was written")


def test_a_compile_ahead_that_died_is_internal_too() -> None:
    from types import SimpleNamespace

    from opgate.verify.resume import follow_up

    died = CheckResult("verify.softmax.triton.float32.compile_ahead", "compile ahead", Outcome.ERROR,
                       "exited with code -11", extra={"returncode": -11})
    kept = follow_up(SimpleNamespace(target=compile_ahead.TARGET, context=None), died)
    assert kept.outcome is Outcome.ERROR and kept.extra["internal"] is True and kept.extra["returncode"] == -11


def test_the_tasks_run_in_the_numerics_checks_worker_key_and_watch_their_plan_file(tmp_path: Path) -> None:
    from opgate.core.spec import load_spec_file
    from opgate.verify.builtin_stages import NumericsStage
    from opgate.verify.calibrator import plan_file_path
    from opgate.verify.engine import TIMEOUT_BY_BUDGET, VerifyRequest, _operator_plan, select

    request = VerifyRequest(spec_file=SOFTMAX, impls=["triton", "torch"], dtypes=["float32", "float16"],
                            budget="quick")
    [sel] = select(load_spec_file(SOFTMAX), request, None)
    plan = _operator_plan(sel, request, "quick", True, tmp_path, TIMEOUT_BY_BUDGET["quick"], {}, False)
    tasks = compile_ahead.ahead_tasks(plan, 3, ["float32", "float16"], "quick", 0, tmp_path)
    assert plan.gpu_choices and len(tasks) == 2 * len(plan.gpu_choices)
    numerics = {t.labels["impl"]: t.worker for t in NumericsStage().tasks(
        _operator_plan(sel, request, "quick", True, tmp_path, 60.0,
                       {"float32": tmp_path / "p32", "float16": tmp_path / "p16"}, False)) if hasattr(t, "worker")}
    for task in tasks:
        payload = CompileAheadPayload.from_dict(task.context.options)
        k = ["float32", "float16"].index(payload.dtype)
        assert payload.plan_path == str(plan_file_path(tmp_path, 3, k, "softmax", payload.dtype))
        assert task.worker and task.worker == numerics[payload.impl]
        assert (task.order, task.exclusive, task.target) == (compile_ahead.ORDER, False, compile_ahead.TARGET)
        assert task.slot_floor == 0.0  # no slots of their own unless the A/B asks
        assert task.ranked  # queued plans-written-last first: no later task passes one for an idle worker


def _refused_in_one_line(said: str) -> None:
    """`opgate verify` with the environment as set refuses before any work: exit 2 and one line saying `said`."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "opgate", "verify", str(SOFTMAX), "--budget", "quick"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert said in proc.stderr


def test_their_floor_of_slots_is_set_for_the_ab_and_a_bad_value_is_one_line_before_any_work(
        tmp_path: Path, monkeypatch) -> None:
    from opgate.core.spec import load_spec_file
    from opgate.model.errors import InputError
    from opgate.verify.engine import TIMEOUT_BY_BUDGET, VerifyRequest, _operator_plan, select

    request = VerifyRequest(spec_file=SOFTMAX, impls=["triton"], dtypes=["float32"], budget="quick")
    [sel] = select(load_spec_file(SOFTMAX), request, None)
    plan = _operator_plan(sel, request, "quick", True, tmp_path, TIMEOUT_BY_BUDGET["quick"], {}, False)
    monkeypatch.setenv(compile_ahead.SLOT_FLOOR_ENV, "0.125")
    assert {t.slot_floor for t in compile_ahead.ahead_tasks(plan, 0, ["float32"], "quick", 0, tmp_path)} == {0.125}
    for bad in ("two", "0.75"):
        monkeypatch.setenv(compile_ahead.SLOT_FLOOR_ENV, bad)
        with pytest.raises(InputError, match="OPGATE_COMPILE_AHEAD_SLOT_FLOOR=.*between 0 and 0.5"):
            compile_ahead.slot_floor()
    _refused_in_one_line("OPGATE_COMPILE_AHEAD_SLOT_FLOOR='0.75'")


def test_a_run_with_compile_ahead_tasks_reports_the_same_checks_and_verdicts(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine path end to end, forced on the CPU (torch eager): the tasks run in the numerics checks' worker
    key beside the calibration, and the report holds the same checks with the same outcomes as without them."""
    from opgate.cli.main import make_console
    from opgate.verify.engine import VerifyRequest, run_verify

    monkeypatch.setenv("OPGATE_CACHE", "0")
    outcomes = {}
    for ahead in (False, True):
        monkeypatch.setattr(compile_ahead, "wanted", lambda gpu, library=False, ahead=ahead: bool(ahead))
        report = run_verify(VerifyRequest(spec_file=SOFTMAX, budget="quick", stages=("numerics",), jobs=2,
                                          impls=("torch",), dtypes=("float32",), out_dir=tmp_path / f"out{ahead}"),
                            make_console())
        outcomes[ahead] = {r.check_id: r.outcome for r in report.results}
        ran = [check for check in report.extra.get("timeline", {}) if check.endswith(".compile_ahead")]
        assert ran == (["verify.softmax.torch.float32.compile_ahead"] if ahead else [])
        done = report.extra["engine"].get("compile_ahead")  # what the internal results did, in the report
        assert (done["tasks"], done["not_passed"]) == (1, {}) if ahead else done is None
    assert outcomes[True] == outcomes[False]
    assert not [check for check in outcomes[True] if check.endswith(".compile_ahead")]


def test_the_tasks_of_the_plans_written_last_go_first_and_the_file_order_stays_on_request(
        monkeypatch: pytest.MonkeyPatch) -> None:
    tasks = [((0, "float32"), "a32"), ((0, "float16"), "a16"), ((1, "float32"), "b32"), ((2, "float32"), "c32")]
    ends = {(0, "float32"): 3.0, (0, "float16"): 9.0, (1, "float32"): 5.0}  # c's plan: no prediction, first
    assert plan_order.latest_plans_first(tasks, ends) == ["a16", "b32", "a32", "c32"]
    monkeypatch.delenv(compile_ahead.ORDER_ENV, raising=False)
    assert not compile_ahead.in_file_order()
    monkeypatch.setenv(compile_ahead.ORDER_ENV, "file")
    assert compile_ahead.in_file_order()


def test_the_calibrator_feeds_the_tasks_once_ranked_leaving_out_the_plans_already_written(tmp_path: Path) -> None:
    """Each side of the pool predicted with its own processes: the apart side's one process writes its two plans
    one after the other, so the second of them is predicted last of all."""
    from types import SimpleNamespace

    from opgate.engine.runner import TaskFeed
    from opgate.verify.calibrator import Calibrator

    def task(op: str, dtype: str) -> SimpleNamespace:
        payload = CompileAheadPayload(spec_file="s.py", op=op, impl="triton", dtype=dtype, budget="quick", seed=0,
                                      plan_path=str(tmp_path / f"{op}-{dtype}"), workdir=str(tmp_path))
        return SimpleNamespace(check_id=f"verify.{op}.triton.{dtype}{compile_ahead.SUFFIX}",
                               context=SimpleNamespace(options=payload.to_dict()))

    jobs = [SimpleNamespace(op=SimpleNamespace(name=name), dtypes=["float32", "float16"]) for name in "abc"]
    ahead = {k: [task(job.op.name, dtype) for dtype in job.dtypes] for k, job in enumerate(jobs)}
    feed = TaskFeed(upcoming_order=40)
    calibrator = Calibrator(jobs, [], {}, feed, "quick", 0, tmp_path, None, {}, ahead=ahead)
    calibrator.plans_done.add(("b", "float16"))  # written already: nothing to compile ahead of it
    pool = SimpleNamespace(capacity=lambda isolated: 1 if isolated else 4)
    ends = calibrator._predicted_plan_ends(pool, {0: 2.0, 1: 8.0, 2: 3.0}, apart={2})
    assert ends[(2, "float16")] == 6.0 and ends[(1, "float32")] == 8.0  # c's second plan waits for its first
    calibrator._feed_ahead(ends)
    fed = [t.check_id.split(".")[1] + " " + t.check_id.split(".")[3] for t in feed.take()]
    assert fed == ["b float32", "c float16", "c float32", "a float32", "a float16"]
    assert calibrator.info["compile_ahead_queue"]["by"] == "predicted plan end"
    calibrator._feed_ahead({})  # fed once
    assert feed.take() == []


def test_a_library_run_through_the_pool_feeds_its_tasks_and_reports_the_queue(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two spec files, two calibration processes: the path a GPU library run takes, forced on the CPU."""
    from opgate.cli.main import make_console
    from opgate.verify.engine import VerifyRequest, run_verify

    corpus = ROOT / "tests" / "data" / "verify" / "truth_corpus"
    monkeypatch.setenv("OPGATE_CACHE", "0")
    monkeypatch.setenv("OPGATE_CALIBRATION_PROCESSES", "2")
    monkeypatch.delenv(compile_ahead.ORDER_ENV, raising=False)
    monkeypatch.setattr(compile_ahead, "wanted", lambda gpu, library=False: True)
    report = run_verify(VerifyRequest(spec_file=corpus / "rowsum.py", spec_files=(corpus / "rowsum.py", SOFTMAX),
                                      budget="quick", stages=("numerics",), jobs=2, impls=("torch",),
                                      dtypes=("float32", "float16"), out_dir=tmp_path / "out"), make_console())
    queue = report.extra["engine"]["compile_ahead_queue"]
    ran = [check for check in report.extra.get("timeline", {}) if check.endswith(compile_ahead.SUFFIX)]
    assert queue["by"] == "predicted plan end" and queue["first"]
    # softmax's torch implementation is the one the spec files mark as a GPU choice: one task per dtype
    assert sorted(ran) == [f"verify.softmax.torch.{d}{compile_ahead.SUFFIX}" for d in ("float16", "float32")]
    assert report.extra["engine"]["compile_ahead"]["not_passed"] == {}
    assert not [r for r in report.results if r.outcome.value == "error"]


def test_the_queue_order_is_checked_before_any_work(monkeypatch: pytest.MonkeyPatch) -> None:
    from opgate.model.errors import InputError

    for value, file in (("", False), ("File", True)):
        monkeypatch.setenv(compile_ahead.ORDER_ENV, value)
        assert compile_ahead.in_file_order() == file
    monkeypatch.setenv(compile_ahead.ORDER_ENV, "calibration")  # measured and removed (verify/compile_ahead.py)
    with pytest.raises(InputError, match="not a compile-ahead order"):
        compile_ahead.queue_order()
    monkeypatch.setenv(compile_ahead.ORDER_ENV, "lifo")
    with pytest.raises(InputError, match="OPGATE_COMPILE_AHEAD_ORDER='lifo': not a compile-ahead order"):
        compile_ahead.queue_order()
    _refused_in_one_line("OPGATE_COMPILE_AHEAD_ORDER='lifo'")

