"""A calibration that raises something other than the reference's own error (a bug in opgate, the GPU out of
memory in the bound terms) costs that operator x dtype its verdict, not the run: the other dtypes are judged and
the report says what failed (the H200 library run of 2026-12-02 lost its whole report to one bound term's OOM)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from opgate.model.results import Outcome

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "tests" / "data" / "verify" / "softmax_spec.py"


def test_a_dtype_whose_calibration_raises_is_an_error_and_the_others_are_judged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from opgate.cli.main import make_console
    from opgate.verify import calibrator
    from opgate.verify.engine import VerifyRequest, run_verify

    real = calibrator.calibrate_plan

    def failing_in_float16(op, dtype, *args, **kwargs):  # type: ignore[no-untyped-def]
        if dtype == "float16":
            raise RuntimeError("CUDA error: an illegal memory access was encountered (planted)")
        return real(op, dtype, *args, **kwargs)

    monkeypatch.setattr(calibrator, "calibrate_plan", failing_in_float16)
    monkeypatch.setenv("OPGATE_CACHE_DIR", str(tmp_path / "cache"))
    # two correct implementations (torch, Triton) are enough to be judged: the buggy twins add nothing here, and
    # triton_fp16_acc's 16-wide tiles alone ran 20-55 s under the interpreter
    report = run_verify(VerifyRequest(spec_file=SPEC, budget="quick", stages=("numerics",), jobs=2,
                                      impls=("torch", "triton"), dtypes=("float32", "float16"),
                                      out_dir=tmp_path / "out"), make_console())
    by_id = {r.check_id: r for r in report.results}
    calibration = next(r for r in report.results if r.check_id.endswith(".calibration"))
    assert calibration.outcome is Outcome.ERROR
    assert "float16" in calibration.reason and "illegal memory access" in calibration.reason
    assert "float32 calibrated and judged" in calibration.reason
    judged = [r for r in by_id.values() if r.check_id.endswith(".float32") and r.outcome is not Outcome.ERROR]
    judged_ids = {r.check_id for r in judged}
    assert judged_ids == {"verify.softmax.torch.float32", "verify.softmax.triton.float32"}, sorted(by_id)
    assert not [r for r in by_id if r.endswith(".float16")]  # no plan, no numerics for that dtype


def test_bound_terms_that_run_out_of_gpu_memory_are_computed_on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the GPU is full, the float64 terms are the same arithmetic on the CPU."""
    import contextlib

    import torch

    from opgate.verify import bounds_device, calibrate
    from opgate.verify.inputs import Case, plan_cases
    from opgate.verify.loaded_specs import loaded_operators

    op = loaded_operators(str(SPEC))[0]
    case = next(c for c in plan_cases(op, "quick", 0) if c.origin == "declared")
    truth = calibrate.truth_and_baseline(op, case, "float32")[0]
    calls: list[str] = []
    real = calibrate.CaseBounds._computed.__func__  # type: ignore[attr-defined]

    def computed(cls, op, case, dtype, truth, where):  # type: ignore[no-untyped-def]
        calls.append("gpu" if not calls else "cpu")
        if len(calls) == 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 MiB (planted)")
        return real(cls, op, case, dtype, truth, where)

    @contextlib.contextmanager
    def on_gpu(reference, inputs, truth):  # type: ignore[no-untyped-def]
        yield list(inputs), "cuda"  # as if the terms had been placed on a GPU

    monkeypatch.setattr(calibrate.CaseBounds, "_computed", classmethod(computed))
    monkeypatch.setattr(bounds_device, "placed", on_gpu)
    monkeypatch.delenv("OPGATE_CACHE_DIR", raising=False)
    monkeypatch.setattr("opgate.verify.bounds_cache.cache_root", lambda: None)
    before = calibrate.CACHE_COUNTS["gpu_out_of_memory"]
    bounds = calibrate.CaseBounds.of(op, case, "float32", truth)
    assert calls == ["gpu", "cpu"] and bounds.sensitivity
    assert calibrate.CACHE_COUNTS["gpu_out_of_memory"] == before + 1


def test_an_interrupted_calibration_pool_is_killed_all_at_once() -> None:
    """close() kills every calibration process before reaping any, inside REAP_S in all (one after another, 8
    processes with CUDA contexts outlasted a 5 s SIGTERM-to-SIGKILL grace on the H200 host)."""
    import time

    from opgate.verify.calibrator import CalibrationPool

    pool = CalibrationPool(2)
    busy = [pool.executor.submit(time.sleep, 60) for _ in range(2)]
    deadline = time.monotonic() + 60
    while not all(f.running() for f in busy) and time.monotonic() < deadline:
        time.sleep(0.1)
    processes = list(pool.executor._processes.values())
    started = time.monotonic()
    pool.close()
    assert time.monotonic() - started < CalibrationPool.REAP_S + 1.0
    assert processes and not any(_still_running(p.pid) for p in processes)


def _still_running(pid: int) -> bool:
    """Whether a process runs (not gone, not a zombie), asked of /proc: the executor's own thread may reap a killed
    process at the moment close() does, and then Process.is_alive() can miss its exit status."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def test_a_sigterm_to_the_process_group_does_not_kill_the_calibration_processes() -> None:
    """Ctrl-C and a CI runner's SIGTERM reach every process of the group; a calibration process that died of it
    turned every pending plan into a BrokenProcessPool error in the interrupted report. opgate kills them itself."""
    import os
    import signal
    import time

    from opgate.verify.calibrator import CalibrationPool

    pool = CalibrationPool(1)
    try:
        assert pool.executor.submit(os.getpid).result(timeout=120) > 0  # started, initializer done
        sleeping = pool.executor.submit(time.sleep, 1.0)
        for process in pool.executor._processes.values():
            os.kill(process.pid, signal.SIGTERM)
            os.kill(process.pid, signal.SIGINT)
        assert sleeping.result(timeout=60) is None
    finally:
        pool.close()


def _interrupted_verify_of_the_softmax_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """run_verify of SPEC (numerics, float32), which the test's patches interrupt: the RunInterrupted it raised."""
    from opgate.cli.console import make_console
    from opgate.engine.children import start_afresh
    from opgate.engine.interrupts import RunInterrupted
    from opgate.verify.engine import VerifyRequest, run_verify

    monkeypatch.setenv("OPGATE_CACHE_DIR", str(tmp_path / "cache"))
    try:
        with pytest.raises(RunInterrupted) as stop:
            run_verify(VerifyRequest(spec_file=SPEC, budget="quick", stages=("numerics",), jobs=2,
                                     dtypes=("float32",), out_dir=tmp_path / "out"), make_console())
    finally:
        start_afresh()  # the interrupt path stops this process's child starts; later tests start children
    return stop


def test_an_interrupted_run_writes_its_report_before_it_reaps_any_child(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reaping waits for each CUDA context's teardown: on the H200 a library run stopped by SIGTERM was SIGKILLed 5 s
    later in that wait, with no report (2026-12-02). The report must be on disk before the first reap, the HTML
    report too (it was left out of the interrupt path)."""
    from opgate.engine import session
    from opgate.engine.interrupts import RunInterrupted
    from opgate.reporting import emit
    from opgate.model.results import RunReport
    from opgate.engine.runner import WarmPool
    from opgate.verify import calibrator

    report_path, html_path = tmp_path / "r.json", tmp_path / "r.html"
    monkeypatch.setattr(emit, "_PLANNED", [emit.ReportOutputs(json=report_path, html=html_path)])
    on_disk_at_reap: list[bool] = []
    real_close = WarmPool.close

    def close(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        on_disk_at_reap.append(report_path.is_file())
        return real_close(self, *args, **kwargs)

    def interrupted_session(verb, *args, **kwargs):  # type: ignore[no-untyped-def]
        raise RunInterrupted(report=RunReport(verb=verb, results=(), started_at="", duration_s=1.0,
                                             extra={"interrupted": True, "not_run": ["planted"]}))

    monkeypatch.setattr(WarmPool, "close", close)
    monkeypatch.setattr(calibrator.CalibrationPool, "close", lambda self: on_disk_at_reap.append(report_path.is_file()))
    monkeypatch.setattr(session, "run_session", interrupted_session)
    stop = _interrupted_verify_of_the_softmax_spec(tmp_path, monkeypatch)
    assert on_disk_at_reap and all(on_disk_at_reap), on_disk_at_reap
    import json

    assert json.loads(report_path.read_text())["interrupted"] is True
    assert 'id="verdict">INTERRUPTED<' in html_path.read_text()
    # main says where they are without writing them a second time
    written = html_path.stat().st_mtime_ns
    said = emit.emit_interrupted(stop.value.report)
    assert str(report_path) in said and str(html_path) in said and html_path.stat().st_mtime_ns == written



def test_an_interrupt_after_every_check_ended_still_writes_the_report(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run with measurement windows on the H200 ended its 84 checks and met its --time-limit while it closed its
    workers: the interrupt came outside the checks' loop, and the report was lost ("interrupted before any check
    finished"). Now the report of the ended checks is written and carried, marked interrupted."""
    from opgate.engine import session
    from opgate.reporting import emit
    from opgate.model.results import CheckResult, Outcome, RunReport
    from opgate.engine.runner import WarmPool

    report_path = tmp_path / "r.json"
    monkeypatch.setattr(emit, "_PLANNED", [emit.ReportOutputs(json=report_path)])
    planted = CheckResult("verify.planted.check", "planted", Outcome.PASSED, "ran to the end")
    real_close = WarmPool.close

    def ended_session(verb, *args, **kwargs):  # type: ignore[no-untyped-def]
        return RunReport(verb=verb, results=(planted,), started_at="", duration_s=1.0)

    def close(self, grace_s: float = 10.0):  # type: ignore[no-untyped-def]
        real_close(self, grace_s=0.0)
        raise KeyboardInterrupt  # the --time-limit's SIGTERM while the workers close

    monkeypatch.setattr(session, "run_session", ended_session)
    monkeypatch.setattr(WarmPool, "close", close)
    stop = _interrupted_verify_of_the_softmax_spec(tmp_path, monkeypatch)
    assert stop.value.report is not None and planted in stop.value.report.results
    import json

    written = json.loads(report_path.read_text())
    assert written["interrupted"] is True
    assert any(r["check_id"] == "verify.planted.check" for r in written["results"])


SLOW_SPEC = '''
import time
import torch
import opgate

fast = opgate.Operator("fast", reference=lambda x: x * 2, inputs=[opgate.TensorSpec("x", ("N",))],
                       dims={"N": [8]}, dtypes=["float32"])
slow = opgate.Operator("slow", reference=lambda x: x * 3, inputs=[opgate.TensorSpec("x", ("N",))],
                       dims={"N": [8]}, dtypes=["float32"])


@fast.implementation("torch")
def fast_torch(x):
    return x * 2


@slow.implementation("torch")
def slow_torch(x):
    time.sleep(60)
    return x * 3
'''


def test_a_second_sigterm_while_the_run_stops_does_not_lose_its_report(tmp_path: Path) -> None:
    """timeout(1) sends SIGTERM to opgate and then to its whole process group: opgate gets it twice. The second
    one raised a new KeyboardInterrupt in the middle of the first one's report writing, and an H200 library run ended
    with "interrupted before any check finished" and no report after 40 finished checks (2026-12-02)."""
    import json
    import os
    import signal
    import subprocess
    import sys
    import time

    spec = tmp_path / "slow.py"
    spec.write_text(SLOW_SPEC)
    report = tmp_path / "r.json"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    proc = subprocess.Popen([sys.executable, "-m", "opgate", "verify", str(spec), "--budget", "quick",
                             "--stages", "numerics", "--jobs", "2", "--json", str(report)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # a check has finished: the report will hold it
            if "verify.fast.torch.float32" in line:
                break
        proc.send_signal(signal.SIGTERM)
        for _ in range(20):  # and again, while it stops (writes the report, stops its children)
            time.sleep(0.02)
            proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, stderr
    assert "before any check finished" not in stderr, stderr
    written = json.loads(report.read_text())
    assert written["interrupted"] is True
    assert "verify.fast.torch.float32" in {r["check_id"] for r in written["results"]}


def test_the_calibration_pool_takes_the_costliest_ready_plan_first(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Longest first across the library: in file order a library's heaviest plans (fla's loss gradients) started
    last and ran on alone while everything else waited (H200 host); costliest by the probe's timed reference call
    where there is one (verify/plan_order.py)."""
    from concurrent.futures import Future
    from types import SimpleNamespace

    from opgate.engine.runner import TaskFeed
    from opgate.verify import calibrator, plan_order

    def op(name: str, rows: int) -> SimpleNamespace:
        shape = SimpleNamespace(concrete_shape=lambda dims: (dims["M"], 64))
        return SimpleNamespace(name=name, derived_dims={}, tensor_inputs=[shape], with_derived=dict)

    def cases(rows: int) -> list[SimpleNamespace]:
        return [SimpleNamespace(dims=(("M", rows),), to_dict=dict, is_empty=False)]

    submitted: list[tuple[str, str]] = []

    class OneProcessPool:
        processes = 1

        def capacity(self, isolated: bool) -> int:
            return 1

        def submit(self, spec: str, name: str, dtype: str, *rest: object, isolated: bool = False) -> Future:
            submitted.append((name, dtype))
            future: Future = Future()
            future.set_result(None)
            return future

    def pool_order(call_seconds: dict[str, float]) -> list[tuple[str, str]]:
        """The order the one-process pool got the plans in, with the probes' timed calls `call_seconds`."""
        probed: dict[Path, Future] = {}
        for file, names in ((first, ["small"]), (second, ["big.grad", "large"])):
            probed[file] = Future()
            probed[file].set_result(({name: [] for name in names},
                                     {name: s for name, s in call_seconds.items() if name in names}))
        info: dict = {}
        run = calibrator.Calibrator(jobs, [], {}, TaskFeed(40), "quick", 0, tmp_path, None, info)
        run._done_dtype = lambda *args: None  # type: ignore[method-assign]
        run._done_operator = lambda *args: None  # type: ignore[method-assign]
        submitted.clear()
        run._calibrate_in_pool(OneProcessPool(), {first: [0], second: [1, 2]}, probed)  # type: ignore[arg-type]
        assert set(info["plan_estimates_s"]) == {"small", "big.grad", "large"}
        return list(submitted)

    first, second = tmp_path / "a.py", tmp_path / "b.py"
    jobs = [calibrator.CalibrationJob(op("small", 8), ["float32", "float16"], lambda plans: None, first, cases(8)),
            calibrator.CalibrationJob(op("big.grad", 8), ["float32"], lambda plans: None, second, cases(8)),
            calibrator.CalibrationJob(op("large", 1024), ["float32"], lambda plans: None, second, cases(1024))]
    # no call timed (the probe failed): by elements, the 1024-row plan, then the gradient twin (3 x 8 rows), then
    # the rest
    assert pool_order({}) == [("large", "float32"), ("big.grad", "float32"), ("small", "float32"),
                              ("small", "float16")]
    assert plan_order.plan_cost(jobs[1].op, jobs[1].cases) == 3 * plan_order.plan_cost(jobs[0].op, jobs[0].cases)
    # timed: the slow reference of 8 rows goes first (fla_short_conv.grad ranked eighth by elements and took the
    # longest), and a plan whose call was not timed still ranks among them by its elements
    assert pool_order({"small": 0.5, "large": 0.001}) == [("small", "float32"), ("small", "float16"),
                                                            ("large", "float32"), ("big.grad", "float32")]
    # OPGATE_PLAN_ORDER=elements: the order before, whatever was timed
    monkeypatch.setenv("OPGATE_PLAN_ORDER", "elements")
    assert pool_order({"small": 0.5, "large": 0.001})[0] == ("large", "float32")


REPLACING_SPEC = '''
import os

import torch
import opgate

if os.environ.get("PLANTED_REPLACE_KERNELS"):  # in the calibration processes only: the test process stays clean
    _library = torch.library.Library("aten", "IMPL")  # as flag_gems.only_enable registers its Triton kernels
    _library.impl("_test_serialization_subcmul", lambda a, b, alpha=1: a - alpha * b, "CUDA")

replacing = opgate.Operator("replacing", reference=lambda x: x * 2, inputs=[opgate.TensorSpec("x", ("N",))],
                            dims={"N": [4096]}, dtypes=["float32"])
'''

PLAIN_SPEC = '''
import opgate

plain = opgate.Operator("plain", reference=lambda x: x + 1, inputs=[opgate.TensorSpec("x", ("N",))],
                        dims={"N": [4]}, dtypes=["float32"])
'''


@pytest.mark.parametrize("gpu", [False, True])
def test_a_spec_that_replaces_torchs_gpu_kernels_calibrates_in_processes_of_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gpu: bool) -> None:
    """FlagGems' import replaces aten's GPU kernels for good in its process, and every later plan there would keep its
    bound terms on the CPU. In a run that uses the GPU its plans go to processes of their own, which take the
    replacement back before they calibrate: no plan is calibrated beside replaced kernels. Without the GPU one process
    calibrates both, beside them. Real calibration processes, one each side."""
    from opgate.engine import specload
    from opgate.engine.runner import TaskFeed
    from opgate.engine.specload import import_spec_guarded, replaces_gpu_kernels
    from opgate.verify.calibrator import CalibrationJob, CalibrationPool, Calibrator
    from opgate.verify.inputs import plan_cases

    replacing, plain = tmp_path / "replacing.py", tmp_path / "plain.py"
    replacing.write_text(REPLACING_SPEC)
    plain.write_text(PLAIN_SPEC)
    jobs = []
    for path in (replacing, plain):
        for op in import_spec_guarded(path):
            jobs.append(CalibrationJob(op, ["float32"], lambda plans: None, path, plan_cases(op, "quick", 0)))
    # what the parent's import of a replacing spec records (specload.import_spec_guarded), without replacing this
    # process's kernels; the calibration processes replace theirs
    monkeypatch.setattr(specload, "_REPLACING", {str(replacing.resolve())})
    monkeypatch.setenv("PLANTED_REPLACE_KERNELS", "1")
    monkeypatch.setenv("OPGATE_PLAN_ORDER", "elements")  # the replacing plan (4096 elements) first, as counted below
    assert replaces_gpu_kernels(replacing) and not replaces_gpu_kernels(plain)
    info: dict = {"gpu": gpu, "case_counts": {}}
    pool = CalibrationPool(1)
    try:
        run = Calibrator(jobs, [], {}, TaskFeed(40), "quick", 0, tmp_path, None, info, pool=pool)
        run.run()
    finally:
        pool.close()
    assert run.operators_done == {"replacing", "plain"}
    beside = info["bounds_cache"]["plans_beside_replaced_kernels"]
    # one process for both without the GPU (nothing to gain apart): the plain plan followed the costlier replacing one.
    # With the GPU the calibration process takes the replaced kernels back before it calibrates
    # (core/torch_kernels.restore_native_kernels), so no plan is calibrated beside them
    assert beside == (0 if gpu else 2)


def test_plans_of_kernel_replacing_specs_go_apart_only_beside_others_and_take_any_process_at_the_end(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The routing alone (a pool that records): on a GPU run, the replacing spec's plans go to the isolated side, sized
    by their share of the plans; once nothing of another spec is left to submit they take any free process; a run of
    replacing specs alone keeps nothing apart (FlagGems alone must not calibrate on a quarter of the processes)."""
    from concurrent.futures import Future
    from types import SimpleNamespace

    from opgate.engine import specload
    from opgate.engine.runner import TaskFeed
    from opgate.verify import calibrator

    def op(name: str, rows: int) -> SimpleNamespace:
        shape = SimpleNamespace(concrete_shape=lambda dims: (dims["M"],))
        return SimpleNamespace(name=name, derived_dims={}, tensor_inputs=[shape], with_derived=dict)

    def cases(rows: int) -> list[SimpleNamespace]:
        return [SimpleNamespace(dims=(("M", rows),), to_dict=dict, is_empty=False)]

    class RecordingPool:
        processes = 4

        def __init__(self) -> None:
            self.isolated_processes = 0
            self.submitted: list[tuple[str, bool]] = []

        def isolate(self, processes: int) -> None:
            self.isolated_processes = processes

        def capacity(self, isolated: bool) -> int:
            return self.isolated_processes if isolated else self.processes

        def submit(self, spec: str, name: str, dtype: str, *rest: object, isolated: bool = False) -> Future:
            self.submitted.append((f"{name} {dtype}", isolated))
            future: Future = Future()
            future.set_result(None)
            return future

    gems, fla = tmp_path / "gems.py", tmp_path / "fla.py"
    monkeypatch.setattr(specload, "_REPLACING", {str(gems.resolve())})
    dtypes = ["float32", "float16", "bfloat16"]

    def routed(files: list[Path], gpu: bool) -> RecordingPool:
        jobs, by_file, fatal = [], {}, {}
        for file in files:
            names = [f"{file.stem}_{rows}" for rows in (4096, 64)]
            by_file[file] = []
            for name, rows in zip(names, (4096, 64)):
                by_file[file].append(len(jobs))
                jobs.append(calibrator.CalibrationJob(op(name, rows), dtypes, lambda plans: None, file, cases(rows)))
            fatal[file] = Future()
            fatal[file].set_result(({name: [] for name in names}, {}))  # (fatal cases, timed calls)
        run = calibrator.Calibrator(jobs, [], {}, TaskFeed(40), "quick", 0, tmp_path, None, {"gpu": gpu})
        run._done_dtype = lambda *args: None  # type: ignore[method-assign]
        run._done_operator = lambda *args: None  # type: ignore[method-assign]
        pool = RecordingPool()
        run._calibrate_in_pool(pool, by_file, fatal)  # type: ignore[arg-type]
        return pool

    mixed = routed([gems, fla], gpu=True)
    assert mixed.isolated_processes == 2  # 6 of the 12 plans: half of the 4 processes
    monkeypatch.setenv(calibrator.APART_PROCESSES_ENV, "3")  # for the A/B of that side's size
    assert routed([gems, fla], gpu=True).isolated_processes == 3
    from opgate.model.errors import InputError

    for bad in ("three", "0", "-2"):  # a bad value is bad input, never silently the default
        monkeypatch.setenv(calibrator.APART_PROCESSES_ENV, bad)
        with pytest.raises(InputError, match="OPGATE_CALIBRATION_APART_PROCESSES=.*positive integer"):
            calibrator.apart_processes(4, 0.5)
    monkeypatch.delenv(calibrator.APART_PROCESSES_ENV)
    assert {plan for plan, apart in mixed.submitted if apart} == {f"gems_{r} {d}" for r in (4096, 64) for d in dtypes}
    assert not any(apart for plan, apart in mixed.submitted if plan.startswith("fla_"))
    alone = routed([gems], gpu=True)
    assert alone.isolated_processes == 0 and not any(apart for _, apart in alone.submitted)
    no_gpu = routed([gems, fla], gpu=False)
    assert not any(apart for _, apart in no_gpu.submitted)


def test_the_last_replacing_plans_take_any_free_process_once_no_other_plan_is_left(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing is left that a replaced kernel could keep off the GPU: a replacing plan waiting for the isolated side
    takes a free main process instead."""
    from concurrent.futures import Future
    from types import SimpleNamespace

    from opgate.engine import specload
    from opgate.engine.runner import TaskFeed
    from opgate.verify import calibrator

    shape = SimpleNamespace(concrete_shape=lambda dims: (dims["M"],))
    gems, fla = tmp_path / "gems.py", tmp_path / "fla.py"
    monkeypatch.setattr(specload, "_REPLACING", {str(gems.resolve())})
    jobs = [calibrator.CalibrationJob(SimpleNamespace(name=f"gems_{k}", derived_dims={}, tensor_inputs=[shape],
                                                      with_derived=dict), ["float32"], lambda plans: None, gems,
                                      [SimpleNamespace(dims=(("M", 64),), to_dict=dict)]) for k in range(3)]
    jobs.append(calibrator.CalibrationJob(SimpleNamespace(name="fla_0", derived_dims={}, tensor_inputs=[shape],
                                                          with_derived=dict), ["float32"], lambda plans: None, fla,
                                          [SimpleNamespace(dims=(("M", 8),), to_dict=dict)]))
    submitted: list[tuple[str, bool]] = []

    class Pool:
        processes = 4

        def isolate(self, processes: int) -> None:
            assert processes == 3

        def capacity(self, isolated: bool) -> int:
            return 1 if isolated else 4  # one isolated process is busy with a long plan: the others must not wait

        def submit(self, spec: str, name: str, dtype: str, *rest: object, isolated: bool = False) -> Future:
            submitted.append((name, isolated))
            future: Future = Future()
            if name != "gems_0":
                future.set_result(None)
            return future

    fatal = {}
    for file, names in ((gems, ["gems_0", "gems_1", "gems_2"]), (fla, ["fla_0"])):
        fatal[file] = Future()
        fatal[file].set_result(({name: [] for name in names}, {}))  # (fatal cases, timed calls)
    run = calibrator.Calibrator(jobs, [], {}, TaskFeed(40), "quick", 0, tmp_path, None, {"gpu": True})
    run._done_dtype = lambda *args: None  # type: ignore[method-assign]
    run._done_operator = lambda *args: None  # type: ignore[method-assign]
    import threading
    import time

    worker = threading.Thread(target=run._calibrate_in_pool, args=(Pool(), {gems: [0, 1, 2], fla: [3]}, fatal),
                              daemon=True)
    worker.start()
    deadline = time.monotonic() + 10
    while len(submitted) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    run.stopped.set()
    assert sorted(submitted) == [("fla_0", False), ("gems_0", True), ("gems_1", False), ("gems_2", False)]


def test_a_calibration_process_pays_the_first_reverse_pass_imports_before_its_first_plan() -> None:
    """first_uses: torch imports what autograd.grad needs on its first call (sympy, through
    torch.fx.experimental.symbolic_shapes); a calibration process pays that at start-up, while the parent loads the
    specs. Without a GPU, warm_gpu's torch.cuda.init fails and is left to the bound terms to meet."""
    import os
    import subprocess
    import sys

    from opgate_testing import child_pythonpath

    code = ("import sys, torch\n"
            "from opgate.verify.calibrator import first_uses\n"
            "before = 'torch.fx.experimental.symbolic_shapes' in sys.modules\n"
            "first_uses(torch, warm_gpu=not torch.cuda.is_available())\n"
            "print(before, 'torch.fx.experimental.symbolic_shapes' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": child_pythonpath()})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]


def test_a_released_calibration_pool_has_no_process_left() -> None:
    """Once every plan is calibrated the processes exit (each held a CUDA context through the run's measurements on
    the H100 host); the run's close afterwards is harmless."""
    import os

    from opgate.verify.calibrator import CalibrationPool

    pool = CalibrationPool(2)
    assert pool.executor.submit(os.getpid).result(timeout=120) > 0
    processes = list(pool.executor._processes.values())
    pool.release()
    assert processes and not any(_still_running(p.pid) for p in processes)
    pool.close()


def test_the_probe_times_the_references_only_where_plans_wait_for_a_process(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A single file's few plans all start at once: nothing to rank, so its probe child times nothing (and a file
    with no empty case starts none). More plans than processes: the probe times each reference once."""
    from types import SimpleNamespace

    from opgate.engine.runner import TaskFeed
    from opgate.verify import calibrator

    asked: list[bool] = []

    def probe_file(spec_file, jobs, timed):  # type: ignore[no-untyped-def]
        asked.append(timed)
        return {job.op.name: [] for job in jobs}, {}

    monkeypatch.setattr(calibrator, "_probe_file", probe_file)
    monkeypatch.setattr(calibrator, "plan_cases", lambda op, budget, seed: [])
    monkeypatch.setattr(calibrator.Calibrator, "_calibrate_in_pool",
                        lambda self, pool, by_file, probed: [future.result() for future in probed.values()])
    spec = tmp_path / "a.py"
    for dtypes, processes, timed in ((["float32", "float16"], 4, False), (["float32", "float16", "bfloat16"], 2, True)):
        asked.clear()
        jobs = [calibrator.CalibrationJob(SimpleNamespace(name="op"), dtypes, lambda plans: None, spec)]
        pool = SimpleNamespace(processes=processes, release=lambda: None)
        run = calibrator.Calibrator(jobs, [], {}, TaskFeed(40), "quick", 0, tmp_path, None, {},
                                    pool=pool)  # type: ignore[arg-type]
        run.run()
        assert asked == [timed]
