"""Every figure of the shipped checks is keyed where it is made (issue #29): a key and labels set at the source,
equal to what opgate.reporting.metrics derived from its check id and prose name before (the derived keys are the
contract that reports, `opgate diff` and `opgate history` rely on). Results as the checks produce them on this
CPU machine, and, for what needs a GPU, built by the checks' judging layers from recorded inputs."""

from __future__ import annotations

import dataclasses
import importlib
import sys
from pathlib import Path
from typing import Any, Iterable

import pytest
from opgate_testing import source_key_problems

from opgate.checks.base import CheckContext
from opgate.model.results import CheckResult, Figure, Outcome


def figure_count(results: Iterable[CheckResult]) -> int:
    return sum(len(result.figures) for result in results)


def test_the_check_finds_a_figure_without_a_key_or_with_another_key() -> None:
    keyless = CheckResult("doctor.mine", "t", Outcome.PASSED, "r", (Figure("fan speed", 40, "%"),))
    wrong = CheckResult("doctor.mine", "t", Outcome.PASSED, "r",
                        (Figure("GPU1 fan speed", 40, "%", key="mine.fan_speed", labels={"gpu": "0"}),))
    right = CheckResult("doctor.mine", "t", Outcome.PASSED, "r",
                        (Figure("GPU1 fan speed", 40, "%", key="mine.fan_speed", labels={"gpu": "1"}),))
    assert len(source_key_problems([keyless, wrong, right])) == 2


@pytest.fixture(scope="module")
def doctor_here() -> list[CheckResult]:
    """`opgate doctor --level standard` on this machine, through the runner as the CLI runs it (the GPU probes
    skip without a GPU; their figures are built below)."""
    from opgate.checks.base import CheckContext
    from opgate.checks.registry import select_checks
    from opgate.engine.runner import run_checks
    from opgate.engine.session import tasks_for

    tasks, broken = tasks_for(select_checks("doctor.", None), CheckContext(verb="doctor", level="standard"))
    return [*broken, *run_checks(tasks, jobs=2)]


def test_the_doctor_keys_its_figures_at_the_source(doctor_here: list[CheckResult]) -> None:
    assert figure_count(doctor_here) >= 20
    assert source_key_problems(doctor_here) == []


# -- the doctor's multi-GPU and QoS judges, on tests/data's recorded and hand-written inputs -----------------------
DOCTOR_TESTS = Path(__file__).resolve().parents[1] / "doctor"


def doctor_test_module(name: str) -> Any:
    if str(DOCTOR_TESTS) not in sys.path:
        sys.path.insert(0, str(DOCTOR_TESTS))
    return importlib.import_module(name)


def as_result(check_id: str, figures: Iterable[Figure], extra: dict[str, Any] | None = None) -> CheckResult:
    return CheckResult(check_id, check_id, Outcome.PASSED, "r", tuple(figures), extra=extra or {})


def test_the_contention_link_matrix_collectives_and_qos_judges_key_their_figures() -> None:
    from opgate.gpu.judge.contention import combine_contention, judge_contention
    from opgate.gpu.judge.link_matrix import link_matrix_verdict, unknown_links
    from opgate.gpu.judge.qos import judge_qos
    from opgate.gpu.judge.collectives import CollectiveRun, judge_collectives, link_reference

    contention = doctor_test_module("test_contention_judge")
    _, _, figures = combine_contention([judge_contention(m, contention.SHARE, contention.SPREAD)
                                        for m in contention.measurements()])
    results = [as_result("doctor.contention", figures)]
    matrix = doctor_test_module("test_link_matrix")
    pairs, links, numa = matrix.fixture()
    results.append(as_result("doctor.p2p", link_matrix_verdict(pairs, links, numa, matrix.BAND).figures))
    results.append(as_result("doctor.p2p", link_matrix_verdict(pairs[:2], unknown_links(4, "no NVML"), [],
                                                               matrix.BAND).figures))
    collectives = doctor_test_module("test_collectives_judge")
    reference = link_reference(collectives.links("links_h200x8_nvswitch.json"))
    for name in ("nccl_h200x8_handwritten.json", "gloo_3ranks_cpu_recorded.json"):
        run = CollectiveRun.from_dict(collectives.load(name))
        results.append(as_result("doctor.collectives", judge_collectives(run, reference).figures))
    qos = doctor_test_module("test_qos")
    for measurement in (qos._measurement(2500, 95, 90), qos._measurement(2500, 1800, None, pinned=None)):
        results.append(as_result("doctor.qos", judge_qos(measurement)[2]))
    assert figure_count(results) >= 80
    assert source_key_problems(results) == []


def test_a_fanned_out_probe_keeps_its_keys_with_each_gpu_as_a_label() -> None:
    from opgate.doctor.fanout import merge_per_gpu

    one = as_result("doctor.launch_latency", [Figure("eager p95", 5.1, "us", key="launch_latency.eager_p95")])
    merged = merge_per_gpu("doctor.launch_latency", "launch", [(0, one), (1, one)])
    assert [f.labels for f in merged.figures] == [{"gpu": "0"}, {"gpu": "1"}]
    assert source_key_problems([merged]) == []


def test_the_gpu_inventory_and_topology_key_their_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    """One GPU (the host's figures then carry that GPU's labels, as the derivation gave them) and two."""
    from opgate.doctor.gpu_inventory import GpuInventoryCheck
    from opgate.gpu.judge.topology import judge_topology
    from opgate.probes import gpu_inventory
    from opgate.probes.gpu_inventory import Inventory

    if str(DOCTOR_TESTS.parent) not in sys.path:
        sys.path.insert(0, str(DOCTOR_TESTS.parent))
    judges = importlib.import_module("test_doctor_judges")
    second = judges.h200(index=1, uuid="GPU-2")
    results = []
    for gpus in ([judges.h200()], [judges.h200(), second]):
        monkeypatch.setattr(gpu_inventory, "collect_inventory", lambda gpus=gpus: Inventory("570.1", 12080, gpus))
        results.append(GpuInventoryCheck().run(CheckContext()))
    topology = doctor_test_module("test_topology")
    links = [["X" if i == j else "NV18" for j in range(4)] for i in range(4)]
    results.append(as_result("doctor.topology", judge_topology(topology._snapshot([0, 0, 1, -1], [0, 1], links))[2]))
    assert figure_count(results) >= 40
    assert source_key_problems(results) == []


# -- analyze and inspect -------------------------------------------------------------------------------------------
REPORTS = Path(__file__).resolve().parents[1] / "data" / "reports"


def test_analyze_keys_its_figures_at_the_source() -> None:
    """Portability and occupancy rebuilt from the compile outcomes of a recorded analyze run (tests/data/reports,
    recorded on this CPU), the roofline of a matmul with a measured point, and a GPU without its precision."""
    pytest.importorskip("torch")
    import opgate
    from opgate.analyze.portability import CompileOutcome, with_occupancy
    from opgate.analyze.roofline import analyze_operator, measurement_key
    from opgate.analyze.run import _occupancy_result, _portability_result, _roofline_results
    from opgate.core.gpus import lookup_gpu
    from opgate.reporting.json_report import read_json

    recorded = read_json(REPORTS / "analyze_ops.v1.json")
    outcomes = [with_occupancy(CompileOutcome.from_dict(r.extra["compile"]))
                for r in recorded.results if "compile" in r.extra]
    results = [_portability_result(o, True) for o in outcomes] + [_occupancy_result(o) for o in outcomes]
    matmul = opgate.Operator("matmul", reference=lambda a, b: a @ b,
                             inputs=[opgate.TensorSpec("a", ("M", "K")), opgate.TensorSpec("b", ("K", "N"))],
                             dims={"M": [64, 4096], "N": [4096], "K": [4096]}, dtypes=["bfloat16", "float32"])
    gpus = [lookup_gpu("h100"), lookup_gpu("v100")]
    measured = {measurement_key("h100", "bfloat16", {"M": 64, "N": 4096, "K": 4096}): 1e-4}
    results += _roofline_results(analyze_operator(matmul, gpus, measured=measured), gpus)
    assert {r.check_id.split(".")[1] for r in results if r.figures} == {"portability", "occupancy", "roofline"}
    assert figure_count(results) >= 30
    assert source_key_problems(results) == []


def test_inspect_keys_its_figures_at_the_source() -> None:
    """Verdicts on tests/data/inspect's binaries for five targets, and a comparison of two builds."""
    from opgate.inspect.compare import compare_builds, to_run_report
    from opgate.inspect.command import judge_all, verdict_result
    from opgate.inspect.compat import parse_targets
    from opgate.inspect.sources import inspect_paths

    data = REPORTS.parent / "inspect"
    reports = inspect_paths([data / "compress_size.o", data / "sm89.cubin", data / "ptx_only.o"])
    results = [verdict_result(v) for v in judge_all(reports, parse_targets("h100,a100,l4,t4,b200"))]
    toolchain = REPORTS.parent / "toolchain"
    builds = [inspect_paths([toolchain / name], kernels=True) for name in ("kernels_nvcc.o", "kernels_clang.o")]
    comparison = compare_builds("nvcc", builds[0], "clang", builds[1], parse_targets("h200,a100"))
    results += to_run_report(comparison, "2026-01-01T00:00:00+00:00", 0.0).results
    assert figure_count(results) >= 60
    assert source_key_problems(results) == []


def test_explain_keys_its_figures_at_the_source() -> None:
    """Every launch of the recorded H200 Nsight Compute profiles in tests/data/ncu, diagnosed."""
    from opgate.gpu.explain import diagnosis_result
    from opgate.gpu.judge.limiter import Ceilings, diagnose, load_profiles

    ncu = REPORTS.parent / "ncu"
    ceilings = Ceilings(hbm_bytes_per_s=4.8e12, hbm_source="NVIDIA H200 datasheet")
    results = [diagnosis_result(diagnose(profile, ceilings))
               for path in [ncu / "gelu_triton_h200.csv", *sorted((ncu / "h200").glob("*.csv"))]
               for profile in load_profiles(path)]
    assert figure_count(results) >= 20
    assert source_key_problems(results) == []


# -- verify --------------------------------------------------------------------------------------------------------
ROOT = REPORTS.parents[2]


@pytest.mark.slow
@pytest.mark.parametrize("spec, extras, case_timeout_s, impls", [
    # the example, with opgate's extras (torch.compile, ONNX Runtime, TVM)
    ("examples/ops/softmax.py", True, None, ()),
    # planted bugs: a correct implementation, failing cases with shrinking and replay (the tail bug), NaN where the
    # truth is finite (no max subtracted); the spec's other twins add no kind of figure and cost 40 s in `make test`
    ("tests/data/verify/softmax_spec.py", False, None, ("torch", "triton_tail_bug", "triton_no_max")),
    # a case that kills its process: the crash figures. Its hanging implementation's case times out in 4 s (as in
    # test_verify_resume) instead of spinning for most of the default case timeout
    ("tests/data/verify/crash_on_one_case.py", False, 4, ()),
])
def test_verify_keys_its_figures_at_the_source(spec: str, extras: bool, case_timeout_s: float | None,
                                               impls: tuple[str, ...], tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """`opgate verify SPEC --budget quick --stages numerics --dtype float32` on this CPU, through the engine as the
    CLI runs it (one dtype: every kind of figure is there, at a third of the cost in `make test`)."""
    pytest.importorskip("torch")
    from opgate.cli.console import make_console
    from opgate.verify.engine import VerifyRequest, run_verify

    monkeypatch.setenv("OPGATE_CACHE_DIR", str(tmp_path / "cache"))
    report = run_verify(VerifyRequest(spec_file=ROOT / spec, budget="quick", stages=("numerics",), jobs=2,
                                      extras=extras, dtypes=("float32",), case_timeout_s=case_timeout_s,
                                      impls=impls, out_dir=tmp_path / "out"),
                         make_console())
    numerics = [r for r in report.results if r.stage == "numerics"]
    assert numerics and all(r.labels.keys() >= {"op", "impl", "dtype"} for r in numerics)
    assert figure_count(report.results) >= 20
    assert source_key_problems(report.results) == []


def test_the_gpu_stages_key_their_figures_at_the_source() -> None:
    """What of verify's GPU stages runs without a GPU: the runtime stage's roofline, the sanitizer's figures, the
    qos judge; each result labelled as the runner and the stage's check label it (planned op/impl, the check's own
    dtype and sizes), under the check id the engine gives it."""
    pytest.importorskip("torch")
    import opgate
    from opgate.verify.qos_stage import VerifyQosCheck, judge_operator_qos
    from opgate.verify.runtime import VerifySanitizerCheck, VerifyRuntimeCheck, _sanitizer_figures, roofline_fraction

    def as_stage_result(check: Any, check_id: str, stage: str, planned: dict[str, str], figures: list[Figure],
                        extra: dict[str, Any], **own: str) -> CheckResult:
        result = check.result(Outcome.PASSED, "r", figures, extra=extra, labels=own or None)
        return dataclasses.replace(result, check_id=check_id).with_identity(stage, planned)

    softmax = opgate.Operator("softmax", reference=lambda x: x.softmax(-1), inputs=[opgate.TensorSpec("x", ("M", "N"))],
                              dims={"M": [4096], "N": [4096]}, dtypes=["float16"])
    dims = {"M": 4096, "N": 4096}
    planned = {"op": "softmax", "impl": "triton"}
    results = []
    for gpu in ("NVIDIA H200", "no such GPU"):
        figures, _ = roofline_fraction(softmax, "float16", dims, 2e-5, gpu)
        results.append(as_stage_result(VerifyRuntimeCheck(), "verify.softmax.triton.float16.runtime", "runtime",
                                       {**planned, "dtype": "float16"}, figures, {"dtype": "float16", "dims": dims}))
    for tool, suffix in (("memcheck", "sanitizer"), ("racecheck", "racecheck")):
        figures = _sanitizer_figures(tool, 0, "first size M=8", ["--padding 65536"], ["--racecheck-report"], [])
        results.append(as_stage_result(VerifySanitizerCheck(), f"verify.softmax.triton.{suffix}", "sanitizer",
                                       {**planned, "tool": tool}, figures, {"dtype": "float16", "tool": tool}))
    qos = doctor_test_module("test_qos")
    for slo in (None, 400.0):
        figures = judge_operator_qos(qos._measurement(2500, 95, None), slo, "the spec")[2]
        results.append(as_stage_result(VerifyQosCheck(), "verify.softmax.triton.qos", "qos", planned, figures,
                                       {"dims": dims}, dims="M=4096,N=4096"))
    assert figure_count(results) >= 25
    assert source_key_problems(results) == []


def test_the_fleet_baseline_keys_its_outlier_rows_at_the_source() -> None:
    """`NODE:fleet.baseline.KEY` rows: a GPU's figure (its index a label), a GPU pair's, a host-level one, and a node
    name with a dot (the derived stem stops at its first dot: kept as reports had it)."""
    from opgate.fleet.node_task import NodeOutcome
    from opgate.fleet.report import baseline_results

    def outcome(name: str, slow: bool) -> NodeOutcome:
        figures = (Figure("GPU1 HBM read (opgate kernel)", 4.1 if slow else 4.5, "TB/s"),
                   Figure("GPU0->GPU1 copy bandwidth", 200.0 if slow else 300.0, "GB/s"),
                   Figure("host memory", 10.0 if slow else 512.0, "GiB"))
        report = {"results": [CheckResult("doctor.mixed", "t", Outcome.PASSED, "r", figures).to_dict()]}
        gpus = [{"index": i, "model": "NVIDIA H200", "driver": "580.159.04"} for i in range(2)]
        return NodeOutcome(node=name, hostname=name, gpus=gpus, driver="580.159.04", exit_code=0, duration_s=1.0,
                           report=report)

    outcomes = [outcome(f"node-{i:02d}", False) for i in range(8)]
    outcomes += [outcome("slow", True), outcome("slow.cluster.local", True)]
    results, _ = baseline_results(outcomes)
    assert {r.check_id.split(":")[0] for r in results} == {"slow", "slow.cluster.local"} and len(results) == 6
    assert figure_count(results) == 30
    assert source_key_problems(results) == []


def test_the_runners_gpu_wait_figure_is_keyed_at_the_source(tmp_path: Path) -> None:
    """The runner's "waited for the GPU" figure, on a result that waited and on the error of a task whose GPU
    stayed held, for every GPU-guarded task verify's stages plan (softmax, triton, float16): keyed by the runner
    with its task's stage, the labels its task's (the runner copies them onto the result)."""
    from types import SimpleNamespace

    import opgate.core.spec as spec
    from opgate.engine.gpu_guard import Waiting
    from opgate.engine.runner import CheckTask, gpu_wait_error, with_gpu_wait
    from opgate.engine.stages import OperatorPlan, discover_stages
    from opgate.verify.backends.base import ImplementationChoice

    softmax = Path(__file__).resolve().parents[2] / "examples" / "ops" / "softmax.py"
    [op] = spec.load_spec_file(softmax)
    choice = ImplementationChoice("triton", "triton", "user")
    plan = OperatorPlan(op, [choice], ["float16"], softmax, "quick", 0, True, 1, tmp_path, tmp_path, 900.0,
                        plans={"float16": tmp_path / "plan.json"}, gpu_choices=[choice])
    # a runtime warm-up's result is internal (left out of the report): its check id names no stage
    tasks = [task for stage in discover_stages().values() for task in stage.tasks(plan)
             if isinstance(task, CheckTask) and task.uses_gpu and not task.check_id.endswith("_warm_up")]
    assert {task.stage for task in tasks} >= {"numerics", "runtime", "sanitizer", "recovery", "ncu", "qos"}
    request = SimpleNamespace(mode="exclusive", keys=("0",), directory=tmp_path)
    claim = Waiting(request, limit_s=600.0, blocked=True, granted_after_s=12.5)  # type: ignore[arg-type]
    results = []
    for task in tasks:
        done = CheckResult(task.check_id, task.title, Outcome.PASSED, "r").with_identity(task.stage, task.labels)
        results.append(with_gpu_wait(done, claim))
        results.append(gpu_wait_error(task, claim, "pid 42").with_identity(task.stage, task.labels))
    assert figure_count(results) == 2 * len(tasks)
    assert {f.key for r in results for f in r.figures} >= {
        "verify.numerics.waited_for_the_gpu_another_opgate_run_held_it",
        "verify.sanitizer.waited_for_the_gpu_another_opgate_run_held_it"}
    assert source_key_problems(results) == []
