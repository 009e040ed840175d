"""`opgate verify`'s GPU runtime stages: skipped with the reason on a CPU machine; on a GPU, timed against
the roofline, captured in a CUDA graph and run under compute-sanitizer."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from opgate_testing import REPO, run_opgate

import opgate
from opgate.core.spec import SpecError

GELU = REPO / "examples" / "ops" / "gelu.py"


def test_bad_stage_is_bad_usage() -> None:
    out = run_opgate(["verify", str(GELU), "--stages", "numerics,warp-speed"])
    assert out.returncode == 2
    assert "warp-speed" in out.stderr and "Traceback" not in out.stderr


def test_bad_sanitizer_tool_is_bad_usage() -> None:
    out = run_opgate(["verify", str(GELU), "--sanitizer-tools", "memcheck,leakcheck"])
    assert out.returncode == 2
    assert "leakcheck" in out.stderr and "racecheck" in out.stderr and "Traceback" not in out.stderr


def test_sanitizer_tools_parse() -> None:
    from opgate.verify.engine import parse_sanitizer_tools

    assert parse_sanitizer_tools("all") == ["memcheck", "racecheck", "initcheck", "synccheck"]
    assert parse_sanitizer_tools("racecheck, memcheck,racecheck") == ["racecheck", "memcheck"]


def test_every_requested_sanitizer_tool_is_one_check_per_implementation(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from opgate.verify import builtin_stages

    monkeypatch.setattr(builtin_stages.SanitizerStage, "find_tool", lambda self, tool: "/bin/true")
    from opgate.verify.engine import VerifyRequest, gpu_stage_tasks, select
    from opgate.core.spec import load_spec_file

    request = VerifyRequest(spec_file=GELU, impls=["triton"], sanitizer_tools=["memcheck", "racecheck",
                                                                                "initcheck", "synccheck"])
    [op] = load_spec_file(GELU)
    [sel] = select([op], request, None)
    tasks, skipped = gpu_stage_tasks(sel, request, tmp_path)
    assert skipped == []
    sanitizer = {t.check_id: t.context.options["tool"] for t in tasks if t.target.endswith("VerifySanitizerCheck")}
    assert sanitizer == {"verify.gelu.triton.sanitizer": "memcheck", "verify.gelu.triton.racecheck": "racecheck",
                         "verify.gelu.triton.initcheck": "initcheck", "verify.gelu.triton.synccheck": "synccheck"}


def test_each_timing_check_follows_a_warm_up_beside_other_work_in_the_same_worker(tmp_path: Path) -> None:
    """The compile at the timing size happens in a non-exclusive warm-up of the same worker key, queued after the
    numerics (order 40); the exclusive check, which the runner starts only once no side-by-side task of its GPU
    waits (tests/test_runner.py), only times. The warm-up's result is the engine's own: left out of the report."""
    from opgate.core.spec import load_spec_file
    from opgate.model.results import CheckResult, Outcome
    from opgate.verify.engine import VerifyRequest, _internal, gpu_stage_tasks, select

    request = VerifyRequest(spec_file=GELU, impls=["triton"], stages=["numerics", "runtime"])
    [op] = load_spec_file(GELU)
    [sel] = select([op], request, None)
    tasks, _ = gpu_stage_tasks(sel, request, tmp_path)
    timing = {t.check_id: t for t in tasks if t.check_id.endswith(".runtime")}
    warm = {t.check_id: t for t in tasks if t.check_id.endswith(".runtime_warm_up")}
    assert set(warm) == {f"{k}_warm_up" for k in timing} and timing
    for check_id, task in timing.items():
        twin = warm[f"{check_id}_warm_up"]
        assert task.exclusive and not twin.exclusive and twin.order > 40 and twin.worker == task.worker
        # the warm-up counts the work at the timing size where the measurement reads it, and pauses for windows
        assert twin.pausable and not task.pausable
        counts = {t.context.options["work_count_path"] for t in (task, twin)}
        assert len(counts) == 1 and counts.pop().endswith(f"{op.name}.{task.labels['dtype']}.json")
    assert _internal(CheckResult("x", "x", Outcome.PASSED, "warm-up", extra={"internal": True}))


def _op(**kwargs: object) -> opgate.Operator:
    return opgate.Operator("rows", reference=lambda x: x, inputs=[opgate.TensorSpec("x", ("M", "N"))],
                           dims={"M": [32, 7], "N": [1024, 77]}, **kwargs)  # type: ignore[arg-type]


def test_timing_dims_default_to_the_largest_declared_sizes() -> None:
    assert _op().timing_dims() == {"M": 32, "N": 1024}


def test_perf_dims_override_the_timing_size_dim_by_dim() -> None:
    assert _op(perf_dims={"M": 16384}).timing_dims() == {"M": 16384, "N": 1024}


@pytest.mark.parametrize("perf_dims, complaint", [
    ({"K": 8}, "'K', which `dims` does not list"),
    ({"M": 0}, "must be a positive int"),
    ({"M": 2.5}, "must be a positive int"),
    ({"N": 4096}, "exact dim 'N' allows"),
])
def test_bad_perf_dims_are_named(perf_dims: dict, complaint: str) -> None:
    with pytest.raises(SpecError, match=re.escape(complaint)):
        _op(perf_dims=perf_dims, exact_dims=["N"])


def test_shipped_examples_time_at_production_sizes() -> None:
    from opgate.core.spec import load_spec_file

    for spec in sorted((REPO / "examples" / "ops").glob("*.py")):
        if spec.stem == "make_onnx_models":
            continue
        for op in load_spec_file(spec):
            assert op.perf_dims, f"{spec.name}: {op.name} declares no perf_dims"


def test_runtime_stages_skip_with_reason_without_gpu(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the runtime stages run instead")
    report = tmp_path / "r.json"
    out = run_opgate(["verify", str(GELU), "--impl", "torch", "--dtype", "float32", "--budget", "quick",
                      "--no-extras", "--json", str(report)], timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    results = {r["check_id"]: r for r in json.loads(report.read_text())["results"]}
    for stage in ("runtime", "sanitizer", "recovery"):  # the default GPU stages
        result = next(r for k, r in results.items() if k.endswith(f".{stage}"))
        assert result["outcome"] == "skipped" and "CUDA GPU" in result["reason"]


@pytest.mark.gpu
def test_default_gpu_stages_on_gpu(tmp_path: Path) -> None:
    """With no --stages, a GPU run times, captures, runs all four sanitizer tools and the OOM recovery."""
    report = tmp_path / "r.json"
    out = run_opgate(["verify", str(GELU), "--impl", "triton", "--dtype", "float32", "--budget", "quick",
                      "--no-extras", "--json", str(report)], timeout=900)
    results = {r["check_id"]: r for r in json.loads(report.read_text())["results"]}
    runtime = results["verify.gelu.triton.float32.runtime"]
    assert runtime["outcome"] == "passed", runtime["reason"]
    assert "roofline floor" in runtime["reason"] and "CUDA graph" in runtime["reason"]
    for suffix in ("sanitizer", "racecheck", "initcheck", "synccheck", "recovery"):
        result = results[f"verify.gelu.triton.{suffix}"]
        assert result["outcome"] == "passed", f"{suffix}: {result['reason']}"
    assert out.returncode == 0, out.stdout[-3000:]


def test_strided_layout_stays_on_the_tensors_device() -> None:
    torch = pytest.importorskip("torch")
    from opgate.verify.inputs import apply_layout

    x = torch.arange(6.0).reshape(2, 3).to("meta")
    y = apply_layout(x, "strided")
    assert y.device == x.device and y.stride() == (6, 2)


@pytest.mark.gpu
def test_ncu_stage_reads_counters_or_says_why(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    run_opgate(["verify", str(GELU), "--impl", "triton", "--dtype", "float32", "--budget", "quick", "--no-extras",
                "--stages", "numerics,ncu", "--json", str(report)], timeout=900)
    results = {r["check_id"]: r for r in json.loads(report.read_text())["results"]}
    ncu = next(r for k, r in results.items() if k.endswith(".ncu"))
    assert ncu["outcome"] in ("passed", "skipped"), ncu["reason"]
    if ncu["outcome"] == "passed":
        assert "DRAM" in ncu["reason"]
        # opgate's occupancy model, fed ncu's launch facts, agrees with ncu's theoretical occupancy.
        for kernel in ncu["extra"]["kernels"]:
            ours = ncu["extra"]["model_occupancy_pct"].get(str(kernel["launch_id"]))
            if ours is not None:
                assert abs(ours - kernel["values"]["theoretical_occupancy_pct"]) <= 1.0, kernel


@pytest.mark.gpu
def test_all_four_sanitizer_tools_pass_a_correct_kernel(tmp_path: Path) -> None:
    """memcheck, racecheck, initcheck and synccheck each run the Triton gelu once; a correct kernel is clean."""
    report = tmp_path / "r.json"
    out = run_opgate(["verify", str(GELU), "--impl", "triton", "--dtype", "float32", "--budget", "quick",
                      "--no-extras", "--stages", "numerics,sanitizer", "--sanitizer-tools", "all",
                      "--json", str(report)], timeout=900)
    results = {r["check_id"]: r for r in json.loads(report.read_text())["results"]}
    for suffix, tool in (("sanitizer", "memcheck"), ("racecheck", "racecheck"), ("initcheck", "initcheck"),
                         ("synccheck", "synccheck")):
        result = results[f"verify.gelu.triton.{suffix}"]
        assert result["outcome"] == "passed", f"{tool}: {result['reason']}"
        assert result["reason"].startswith(f"{tool}:")
    assert out.returncode == 0, out.stdout[-3000:]


def test_rotating_input_sets_are_new_buffers_of_the_same_values() -> None:
    torch = pytest.importorskip("torch")
    from opgate.verify.runtime import rotating_input_sets

    probs = torch.softmax(torch.randn(4, 5, dtype=torch.float64), dim=-1)
    column = torch.arange(4.0).reshape(4, 1)
    index = torch.tensor([3, 0, 2])
    sets = rotating_input_sets((probs, column, index, 0.5), count=3)
    assert len(sets) == 3 and sets[0][0] is probs
    for k, (p, c, i, scalar) in enumerate(sets[1:], start=1):
        assert p.data_ptr() != probs.data_ptr() and not torch.equal(p, probs)
        assert torch.allclose(p.sum(-1), probs.sum(-1))  # rows rolled within themselves keep their sums
        assert torch.equal(p, probs.roll(k, dims=1))
        assert torch.equal(c, column.roll(k, dims=0))  # last dim of size 1: the next one is rolled
        assert sorted(i.tolist()) == sorted(index.tolist()) and scalar == 0.5


def test_a_gradient_twins_warm_up_waits_for_its_operators_own(tmp_path: Path) -> None:
    """X.grad's call runs X's forward kernels at the same sizes: its warm-up starts after X's, so the forward's
    autotuning comes from Triton's disk cache instead of being benchmarked twice side by side."""
    from opgate.core.spec import load_spec_file
    from opgate.verify.engine import VerifyRequest, gpu_stage_tasks, select
    from opgate.verify.gradients import with_gradient_operators

    spec = REPO / "tests" / "data" / "verify" / "precision_spec.py"
    request = VerifyRequest(spec_file=spec, ops=["softmax", "softmax.grad"], impls=["torch"],
                            stages=["numerics", "runtime"])
    ops = with_gradient_operators(load_spec_file(spec))
    warm = {}
    for sel in select(ops, request, None):
        tasks, _ = gpu_stage_tasks(sel, request, tmp_path)
        warm.update({t.check_id: t for t in tasks if t.check_id.endswith(".runtime_warm_up")})
    assert warm and all(warm[k].after == () for k in warm if k.startswith("verify.softmax.torch."))
    twins = {k: t for k, t in warm.items() if k.startswith("verify.softmax.grad.")}
    assert twins and all(t.after == (k.replace("softmax.grad.", "softmax.", 1),) for k, t in twins.items())
    assert all(t.after[0] in warm for t in twins.values())


GRADIENT_SPEC = '''
import torch
import opgate

silu = opgate.Operator(
    "silu", reference=lambda x: torch.nn.functional.silu(x),
    inputs=[opgate.TensorSpec("x", ("M", "N"), requires_grad=True)],
    dims={"M": [64], "N": [256]}, dtypes=["float32"], perf_dims={"M": 8192, "N": 8192})


@silu.implementation("torch", backend="torch")
def _silu(x):
    return torch.nn.functional.silu(x)
'''


@pytest.mark.gpu
def test_a_gradient_twin_is_timed_without_opgates_upstream_gradient_in_the_calls(tmp_path: Path) -> None:
    """silu.grad's timed call is its forward and backward kernels: the upstream gradient stays on the GPU, so the
    call is within a few times the roofline floor and captures in a CUDA graph (it drew and copied the upstream
    gradient from the host inside every timed call: 651 ms against a 300 us floor, "not capturable")."""
    spec = tmp_path / "silu_spec.py"
    spec.write_text(GRADIENT_SPEC)
    report = tmp_path / "r.json"
    out = run_opgate(["verify", str(spec), "--op", "silu.grad", "--budget", "quick", "--no-extras",
                      "--stages", "numerics,runtime", "--json", str(report)], timeout=600)
    results = {r["check_id"]: r for r in json.loads(report.read_text())["results"]}
    runtime = results["verify.silu.grad.torch.float32.runtime"]
    assert runtime["outcome"] == "passed", runtime["reason"]
    assert "captures in a CUDA graph" in runtime["reason"]
    floor = next(f["value"] for f in runtime["figures"] if f["key"] == "verify.runtime.roofline_floor")
    median = runtime["extra"]["timing"]["median_us"]
    assert median < 20 * floor, (median, floor)
    assert runtime["extra"]["timing"]["first_call_s"] > 0  # where a slow timing phase went: its untimed first call
    assert isinstance(runtime["extra"]["warmed_here"], bool)
    assert out.returncode == 0, out.stdout[-3000:]


CAPTURE_OUT_OF_MEMORY_SPEC = '''
import torch
import opgate

twice = opgate.Operator(
    "twice", reference=lambda x: x * 2,
    inputs=[opgate.TensorSpec("x", ("N",))], dims={"N": [1024]}, dtypes=["float32"], perf_dims={"N": 1 << 20})


@twice.implementation("torch", backend="torch")
def _twice(x):
    if torch.cuda.is_current_stream_capturing():  # the capture alone asks for more than the card holds
        torch.empty(torch.cuda.get_device_properties(x.device).total_memory, dtype=torch.uint8, device=x.device)
    return x * 2
'''


@pytest.mark.gpu
def test_a_capture_that_runs_out_of_memory_keeps_the_timing_and_says_the_capture_was_not_checked(
        tmp_path: Path) -> None:
    """Not an error and not 'not capturable': the timing stands, the capture is unjudged (fla's cross-entropy
    gradient at its timing size on the H100, forty-first session)."""
    spec = tmp_path / "twice_spec.py"
    spec.write_text(CAPTURE_OUT_OF_MEMORY_SPEC)
    report = tmp_path / "r.json"
    out = run_opgate(["verify", str(spec), "--budget", "quick", "--no-extras", "--stages", "numerics,runtime",
                      "--json", str(report)], timeout=600)
    results = {r["check_id"]: r for r in json.loads(report.read_text())["results"]}
    runtime = results["verify.twice.torch.float32.runtime"]
    assert runtime["outcome"] == "warned", runtime["reason"]
    assert "CUDA graph capture not checked" in runtime["reason"] and "us median" in runtime["reason"]
    assert runtime["extra"]["graph"] == {"checked": False, "cause": "out of memory"}
    assert out.returncode == 0, out.stdout[-3000:]


def test_out_of_memory_in_the_graph_check_is_judged_by_who_held_the_memory() -> None:
    """The memory readings stand in for torch's on this CPU machine (the GPU test above plants the real thing): the
    check's own tensors filled the card, so the capture is unjudged (warned, the timing kept); other processes held
    more than a quarter of it, so opgate cannot tell (error)."""
    from types import SimpleNamespace

    from opgate.gpu.judge.oom import BESIDE_OTHERS_KEY
    from opgate.model.results import Outcome
    from opgate.verify.runtime import VerifyRuntimeCheck

    gib = 2**30

    def readings(free: int, reserved_here: int) -> SimpleNamespace:
        return SimpleNamespace(cuda=SimpleNamespace(mem_get_info=lambda: (free, 80 * gib),
                                                    memory_reserved=lambda: reserved_here))

    check = VerifyRuntimeCheck()
    own = check._graph_out_of_memory(readings(1 * gib, 75 * gib), "N=8 float32", "9.0 us median", [], {"op": "x"})
    assert own.outcome is Outcome.WARNED and own.reason.startswith("9.0 us median; CUDA graph capture not checked")
    assert own.extra == {"op": "x", "graph": {"checked": False, "cause": "out of memory"}}
    shared = check._graph_out_of_memory(readings(1 * gib, 10 * gib), "N=8 float32", "9.0 us median", [], {})
    assert shared.outcome is Outcome.ERROR and "other processes held 69.0" in shared.reason
    assert shared.extra[BESIDE_OTHERS_KEY] == 69.0  # the runner's follow-up runs it again with the GPU emptied
    # what this worker held before the check (an earlier check's leftovers) is no demand of this size's: the same
    # readings that were the check's own are then no fact about the size (a false "does not fit" on an H100)
    leftovers = check._graph_out_of_memory(readings(1 * gib, 75 * gib), "N=8 float32", "9.0 us median", [], {},
                                           held_before=56 * gib)
    assert leftovers.outcome is Outcome.ERROR and "other processes held 60.0" in leftovers.reason
    assert "56.0 GiB of it this process's from before the check" in leftovers.reason


def test_the_warm_ups_summary_adds_their_steps_compiles_and_autotuning_and_names_the_longest() -> None:
    """extra.engine.warm_ups, from the warm-ups' internal results: where a library's warm-up seconds went."""
    from opgate.model.results import CheckResult, Outcome
    from opgate.verify.runtime import warm_up_summary

    def warm_up(op: str, seconds: float, call: float, autotune: dict | None) -> CheckResult:
        extra = {"internal": True, "seconds": seconds, "phase_s": {"load": 1.0, "inputs": 0.5, "call": call},
                 "compiles": 3, "compile_s": call / 2, "autotune": autotune}
        return CheckResult(f"verify.{op}.{op}.float32.runtime_warm_up", "warm-up", Outcome.PASSED, "compiled",
                           extra=extra)

    results = [warm_up("swish", 4.0, 2.5, None), warm_up("matmul", 40.0, 38.0, {"runs": 2, "seconds": 20.0}),
               CheckResult("verify.swish.swish.float32", "numerics", Outcome.PASSED, "ok", extra={"op": "swish"})]
    summary = warm_up_summary(results)
    assert (summary["tasks"], summary["seconds"], summary["compiles"], summary["compile_s"]) == (2, 44.0, 6, 20.2)
    assert summary["phase_s"] == {"load": 2.0, "inputs": 1.0, "call": 40.5, "room": 0.0, "work_count": 0.0}
    assert (summary["autotune_runs"], summary["autotune_s"]) == (2, 20.0)
    assert list(summary["longest"]) == ["matmul.matmul.float32", "swish.swish.float32"]
    assert warm_up_summary(results[2:]) == {}
    # no warm-up could count its autotuning (a Triton without the listener): not measured, never 0
    uncounted = warm_up_summary([results[0]])
    assert (uncounted["autotune_runs"], uncounted["autotune_s"]) == (None, None)
    assert "raised" not in summary
    # a warm-up whose call raised warmed nothing: the summary says what it raised (its result is internal)
    failed = warm_up("loss", 0.05, 0.0, None)
    failed.extra["raised"] = "OutOfMemoryError: CUDA out of memory."
    assert warm_up_summary([failed, results[0]])["raised"] == {"loss.loss.float32": "OutOfMemoryError: CUDA out of "
                                                                                    "memory."}
    retried = warm_up("norm", 3.0, 2.0, None)
    retried.extra["out_of_memory_retried"] = ["OutOfMemoryError: CUDA out of memory."]
    failed.extra["out_of_memory_retried"] = ["OutOfMemoryError: a", "OutOfMemoryError: b"]
    assert warm_up_summary([failed, retried])["retried"] == {
        "norm.norm.float32": {"out_of_memory": 1, "then_compiled": True},
        "loss.loss.float32": {"out_of_memory": 2, "then_compiled": False}}
    assert "within_limit" not in summary
    # OPGATE_RUNTIME_AUTOTUNE=within-limit: the keys autotuned over fewer configs and the configs left out there
    retried.extra["autotune_within_limit"] = {
        "swish_fwd_kernel": {"configs": 30, "benchmarked": {"(11008,)": 27},
                             "over_thread_limit": {"B=8192, num_warps=1": 1, "B=8192, num_warps=2": 1,
                                                   "B=4096, num_warps=1": 1}}}
    assert warm_up_summary([retried])["within_limit"] == {"keys": 1, "configs_left_out": 3}


def test_the_warm_ups_first_call_times_its_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """The steps of a warm-up's one call, here with the loading and the inputs stood in for (they need CUDA)."""
    import contextlib
    from types import SimpleNamespace

    from opgate.verify import runtime

    calls = []
    op = SimpleNamespace(timing_dims=lambda: {"N": 4})
    monkeypatch.setattr(runtime, "load_implementation", lambda options: (op, SimpleNamespace(fn=calls.append)))
    monkeypatch.setattr(runtime, "cuda_inputs", lambda *args: ["x"])
    torch = SimpleNamespace(cuda=SimpleNamespace(synchronize=lambda: None))
    options = SimpleNamespace(dtype="float32", seed=0)
    clock = runtime.PhaseClock()
    found, note, retried = runtime.VerifyRuntimeWarmUpCheck._first_call(options, torch, contextlib.nullcontext,
                                                                        clock)
    assert (found, note, retried, calls) == (op, "compiled", [], ["x"])
    assert set(clock.laps) == {"load", "inputs", "call"}
    clock = runtime.PhaseClock()
    monkeypatch.setattr(runtime, "cuda_inputs", lambda *args: (_ for _ in ()).throw(MemoryError("no room")))
    found, note, retried = runtime.VerifyRuntimeWarmUpCheck._first_call(options, torch, contextlib.nullcontext,
                                                                        clock)
    assert (note, retried) == ("MemoryError: no room", []) and set(clock.laps) == {"load"}


class _OutOfMemoryError(RuntimeError):
    """Named as torch's is: what opgate.gpu.judge.oom reads as running out of memory."""


_OutOfMemoryError.__name__ = "OutOfMemoryError"


def _stand_in_torch(free_readings: list[int], total: int = 80 * 2**30, peak: int = 0) -> object:
    """torch.cuda as far as a warm-up's retry reads it: cudaMemGetInfo's free bytes, one reading a call (the last
    repeats), the allocator's peak; emptying the cache does nothing."""
    from types import SimpleNamespace

    readings = iter(free_readings)
    last = [free_readings[0]]

    def mem_get_info() -> tuple[int, int]:
        last[0] = next(readings, last[0])
        return last[0], total

    return SimpleNamespace(cuda=SimpleNamespace(
        synchronize=lambda: None, mem_get_info=mem_get_info, max_memory_reserved=lambda: peak,
        is_available=lambda: True, is_initialized=lambda: True, empty_cache=lambda: None))


def test_a_warm_up_that_runs_out_of_memory_tries_again_once_the_card_has_room(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An out-of-memory try waits for the memory it asked for (and what it held) to be free, then calls again: a
    warm-up that raised beside the run's other work left its check to compile while holding the GPU alone."""
    import contextlib
    from types import SimpleNamespace

    from opgate.gpu.probes import device_memory
    from opgate.verify import runtime

    gib = 2**30
    tries: list[str] = []

    def call(x: str) -> None:
        tries.append(x)
        if len(tries) == 1:
            raise _OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB. GPU 0 has 5 GiB free")

    op = SimpleNamespace(timing_dims=lambda: {"N": 4})
    monkeypatch.setattr(runtime, "load_implementation", lambda options: (op, SimpleNamespace(fn=call)))
    monkeypatch.setattr(runtime, "cuda_inputs", lambda *args: ["x"])
    waits: list[float] = []
    monkeypatch.setattr(device_memory.time, "sleep", waits.append)
    # free: 5 GiB, 9 GiB, then 16 GiB; the try held 4 GiB and asked for 8: it waits for 15 GiB (x 1.25)
    torch = _stand_in_torch([5 * gib, 5 * gib, 9 * gib, 16 * gib], peak=4 * gib)
    clock = runtime.PhaseClock()
    options = SimpleNamespace(dtype="float32", seed=0)
    found, note, retried = runtime.VerifyRuntimeWarmUpCheck._first_call(options, torch, contextlib.nullcontext,
                                                                        clock)
    assert (found, note, tries) == (op, "compiled", ["x", "x"])
    assert retried == ["OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB. GPU 0 has 5 GiB free"]
    assert len(waits) == 2 and "room" in clock.laps


def test_a_warm_up_tries_at_most_three_times_and_only_after_running_out_of_memory(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Another error ends the warm-up at once; out-of-memory ones end it after WARM_UP_TRIES calls, each retry
    waiting at most WARM_UP_ROOM_WAIT_S for half the card (no size in the message)."""
    import contextlib
    from types import SimpleNamespace

    from opgate.gpu.probes import device_memory
    from opgate.verify import runtime

    tries: list[str] = []

    def call(x: str) -> None:
        tries.append(x)
        raise RuntimeError("Triton Error [CUDA]: out of memory")

    op = SimpleNamespace(timing_dims=lambda: {"N": 4})
    monkeypatch.setattr(runtime, "load_implementation", lambda options: (op, SimpleNamespace(fn=call)))
    monkeypatch.setattr(runtime, "cuda_inputs", lambda *args: ["x"])
    now = [0.0]
    monkeypatch.setattr(device_memory.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(device_memory.time, "sleep", lambda s: now.__setitem__(0, now[0] + s))
    torch = _stand_in_torch([2**30])  # 1 of 80 GiB free, for good
    options = SimpleNamespace(dtype="float32", seed=0)
    found, note, retried = runtime.VerifyRuntimeWarmUpCheck._first_call(options, torch, contextlib.nullcontext,
                                                                        runtime.PhaseClock())
    assert len(tries) == runtime.WARM_UP_TRIES and len(retried) == runtime.WARM_UP_TRIES - 1
    assert note == "RuntimeError: Triton Error [CUDA]: out of memory"
    assert now[0] == pytest.approx(runtime.WARM_UP_ROOM_WAIT_S * (runtime.WARM_UP_TRIES - 1))

    tries.clear()

    def wrong(x: str) -> None:
        tries.append(x)
        raise ValueError("bad shape")

    monkeypatch.setattr(runtime, "load_implementation", lambda options: (op, SimpleNamespace(fn=wrong)))
    found, note, retried = runtime.VerifyRuntimeWarmUpCheck._first_call(options, torch, contextlib.nullcontext,
                                                                        runtime.PhaseClock())
    assert (tries, note, retried) == (["x"], "ValueError: bad shape", [])


def _timed(*us: float):
    from opgate.gpu.probes.timing import Samples, TimedCalls

    return TimedCalls(Samples.of(us), l2_flushed=True, input_sets=3)


def test_a_disturbed_timing_is_timed_once_more_and_the_lower_median_kept() -> None:
    """A timing whose median is over STEADY_SPREAD times its fastest call (fla_swish float16 in a library run: 1,352
    us median, 327 us fastest) is timed again; a steady one is not, and a second timing no better is not kept."""
    from opgate.verify.runtime import steady_timing, timed_twice_note

    steady = _timed(330.0, 331.0, 335.0, 340.0)
    timings = iter([steady])
    kept, other = steady_timing(lambda: next(timings))
    assert kept is steady and other is None and timed_twice_note(kept, other) == ""

    disturbed = _timed(327.0, 1300.0, 1352.0, 1400.0, 1489.0)
    timings = iter([disturbed, steady])
    kept, other = steady_timing(lambda: next(timings))
    assert kept is steady and other is disturbed
    note = timed_twice_note(kept, other)
    assert "timed twice" in note and "4.1x their fastest" in note and "333.0 us kept, 1352.0 us not" in note

    worse = _timed(300.0, 1500.0, 1600.0)
    timings = iter([disturbed, worse])
    kept, other = steady_timing(lambda: next(timings))
    assert kept is disturbed and other is worse
