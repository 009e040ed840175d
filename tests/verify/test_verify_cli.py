"""`opgate verify` end to end: real child processes, the Triton interpreter, ONNX Runtime, exit codes.

The buggy twins in tests/data/verify/softmax_spec.py must be flagged, the correct implementations must
pass (zero false positives), failures must shrink and replay, and reports must round-trip.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests_verify_support import DATA, ROOT, SRC

SPEC = DATA / "softmax_spec.py"
CORRECT = ("torch", "triton", "torch_out")
BUGGY = ("triton_tail_bug", "triton_fp16_acc", "triton_no_max", "triton_grid_bug", "triton_stride_bug")


def run_cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """`opgate verify ARGS`; numerics only unless the test names stages (the GPU runtime stages have their own tests)."""
    if "--stages" not in args:
        args = (*args, "--stages", "numerics")
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    env.pop("TRITON_INTERPRET", None)  # opgate must set it for the Triton children itself
    return subprocess.run([sys.executable, "-m", "opgate", "verify", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def results_by_id(report: dict) -> dict[str, dict]:
    return {r["check_id"]: r for r in report["results"]}


# opgate's extra the float16 run also judges: the reference through torch.compile runs in the worker that would
# otherwise idle while triton_fp16_acc's 16-wide tiles take ~27 s under the interpreter (a run of its own cost 9 s)
EXTRAS = ("torch.compile",)


@pytest.fixture(scope="module")
def float16_run(tmp_path_factory):
    """Every user implementation of the softmax spec and the reference through torch.compile, in float16, quick
    budget."""
    out = tmp_path_factory.mktemp("verify-fp16")
    impls = [arg for impl in (*CORRECT, *BUGGY, *EXTRAS) for arg in ("--impl", impl)]
    proc = run_cli(str(SPEC), "--budget", "quick", "--no-extras", "--dtype", "float16", *impls,
                   "--json", str(out / "report.json"), "--junit", str(out / "report.xml"), "--out", str(out / "art"))
    return proc, out


@pytest.mark.slow
def test_correct_implementations_pass_and_every_buggy_twin_is_flagged(float16_run):
    proc, out = float16_run
    assert proc.returncode == 1, proc.stderr[-3000:]
    results = results_by_id(json.loads((out / "report.json").read_text()))
    for impl in CORRECT:
        result = results[f"verify.softmax.{impl}.float16"]
        assert result["outcome"] == "passed", result["reason"]
    for impl in BUGGY:
        result = results[f"verify.softmax.{impl}.float16"]
        assert result["outcome"] == "failed", (impl, result["reason"])
        assert result["extra"]["replay"].startswith("ogv1.")
        assert "smallest failing case" in result["reason"] and "--replay ogv1." in result["reason"]
    assert results["verify.softmax.calibration"]["outcome"] == "passed"


@pytest.mark.slow
def test_each_bug_is_caught_for_its_own_reason(float16_run):
    _, out = float16_run
    results = results_by_id(json.loads((out / "report.json").read_text()))

    def extra(impl):
        return results[f"verify.softmax.{impl}.float16"]["extra"]

    assert extra("triton_no_max")["smallest_failing"]["regime"] in ("large", "huge")
    assert "NaN/Inf where the truth is finite" in " ".join(extra("triton_no_max")["smallest_failing_reasons"])
    tail = extra("triton_tail_bug")["smallest_failing"]["dims"]["N"]
    assert tail & (tail - 1) != 0  # a size that is not a power of two: the unmasked tail
    assert "never written" in " ".join(extra("triton_grid_bug")["smallest_failing_reasons"])
    assert extra("triton_grid_bug")["poisoned_out"] is True
    assert extra("triton_stride_bug")["smallest_failing"]["layout"] != "contiguous"
    assert any(("RMSE" in r or "p99.9" in r) for r in extra("triton_fp16_acc")["smallest_failing_reasons"])


@pytest.mark.slow
def test_results_show_budget_beside_the_candidate_and_say_why_triton_has_no_ir(float16_run):
    _, out = float16_run
    result = results_by_id(json.loads((out / "report.json").read_text()))["verify.softmax.triton.float16"]
    figures = {f["name"]: f for f in result["figures"]}
    rmse = figures["RMSE (worst case)"]
    assert rmse["threshold"]["comparison"] == "<=" and rmse["value"] <= rmse["threshold"]["value"]
    assert rmse["threshold"]["source"].startswith("calibrated: ")  # names the term that set it
    assert "baseline RMSE (same case, eager float16)" in figures
    assert figures["p99.9 |error| (worst case)"]["threshold"]["source"].startswith("calibrated: 2 x baseline p99.9")
    assert result["extra"]["backend_facts"]["interpreter"] is True
    assert "TRITON_INTERPRET=1" in result["extra"]["backend_facts"]["ir_artefacts"]
    assert result["extra"]["artefacts"] == []
    assert len(result["extra"]["cases"]) == result["extra"]["calibration"]["n_cases"]


@pytest.mark.slow
def test_json_round_trips_and_junit_counts_failures(float16_run):
    from opgate.reporting.json_report import read_json
    from opgate.reporting.schema import encode_report

    _, out = float16_run
    raw = json.loads((out / "report.json").read_text())
    report = read_json(out / "report.json")
    assert encode_report(report)["results"] == raw["results"]
    assert report.exit_code == 1 == raw["exit_code"]
    suite = ET.parse(out / "report.xml").getroot().find("testsuite")
    assert suite.get("failures") == str(len(BUGGY))
    assert suite.get("tests") == str(1 + len(CORRECT) + len(BUGGY) + len(EXTRAS))


@pytest.mark.slow
def test_replay_reruns_exactly_the_smallest_failing_case(float16_run, tmp_path):
    _, out = float16_run
    original = results_by_id(json.loads((out / "report.json").read_text()))["verify.softmax.triton_tail_bug.float16"]
    token = original["extra"]["replay"]
    proc = run_cli(str(SPEC), "--replay", token, "--json", str(tmp_path / "replay.json"))
    assert proc.returncode == 1, proc.stderr[-3000:]
    results = results_by_id(json.loads((tmp_path / "replay.json").read_text()))
    replayed = results["verify.softmax.triton_tail_bug.float16"]
    assert set(results) == {"verify.softmax.calibration", "verify.softmax.triton_tail_bug.float16"}
    assert replayed["outcome"] == "failed" and len(replayed["extra"]["cases"]) == 1
    assert replayed["extra"]["cases"][0]["reasons"] == original["extra"]["smallest_failing_reasons"]
    assert replayed["extra"]["replay"] == token


@pytest.mark.slow
def test_correct_implementations_pass_in_every_dtype_and_onnx_runs_where_ort_can(tmp_path):
    proc = run_cli(str(SPEC), "--budget", "quick", "--impl", "torch", "--impl", "triton", "--impl", "onnxruntime",
                   "--dtype", "float32,bfloat16", "--json", str(tmp_path / "r.json"), "--out", str(tmp_path / "art"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = results_by_id(json.loads((tmp_path / "r.json").read_text()))
    for impl in ("torch", "triton"):
        for dtype in ("float32", "bfloat16"):
            assert results[f"verify.softmax.{impl}.{dtype}"]["outcome"] == "passed"
    onnx32 = results["verify.softmax.onnxruntime.float32"]
    assert onnx32["outcome"] == "passed", onnx32["reason"]
    assert onnx32["extra"]["backend_facts"]["opsets"]["ai.onnx"] >= 17
    assert onnx32["extra"]["backend_facts"]["providers"][-1] == "CPUExecutionProvider"
    saved = [Path(p) for p in onnx32["extra"]["artefacts"]]
    assert saved and saved[0].is_file() and saved[0].suffix == ".onnx"
    import onnx

    onnx.checker.check_model(onnx.load(str(saved[0])), full_check=True)
    onnx_bf16 = results["verify.softmax.onnxruntime.bfloat16"]
    assert onnx_bf16["outcome"] in ("passed", "skipped")
    if onnx_bf16["outcome"] == "skipped":
        assert "cannot run this model in bfloat16" in onnx_bf16["reason"]


@pytest.mark.slow
def test_torch_compile_of_the_reference_passes_and_reports_graph_breaks(float16_run):
    proc, out = float16_run
    results = results_by_id(json.loads((out / "report.json").read_text()))
    assert results["verify.softmax.calibration"]["outcome"] == "passed", proc.stdout[-3000:] + proc.stderr[-3000:]
    result = results["verify.softmax.torch.compile.float16"]
    assert result["outcome"] == "passed"
    assert result["extra"]["origin"] == "reference"
    figures = {f["name"]: f["value"] for f in result["figures"]}
    assert figures["graph breaks"] == 0 and figures["graphs compiled"] >= 1


def test_tvm_without_apache_tvm_is_skipped_with_the_reason(tmp_path):
    import importlib.util

    if importlib.util.find_spec("tvm") is not None:
        pytest.skip("apache-tvm is installed here")
    proc = run_cli(str(SPEC), "--impl", "tvm", "--dtype", "float32", "--json", str(tmp_path / "r.json"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = results_by_id(json.loads((tmp_path / "r.json").read_text()))["verify.softmax.tvm.float32"]
    assert result["outcome"] == "skipped" and "apache-tvm is not installed" in result["reason"]


@pytest.mark.parametrize("args, message", [
    (["tests/data/verify/missing.py"], "does not exist"),
    ([str(DATA / "broken_spec.py")], "kind 'gaussian' is not one of"),
    ([str(SPEC), "--op", "nope"], "--op 'nope' is not defined"),
    ([str(SPEC), "--impl", "cuda_magic"], "--impl 'cuda_magic' is not an implementation"),
    ([str(SPEC), "--dtype", "float64"], "--dtype 'float64' is not among"),
    ([str(SPEC), "--replay", "not-a-token"], "is not an opgate verify replay token"),
])
def test_bad_input_is_one_line_and_exit_2(args, message):
    proc = run_cli(*args, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.strip().splitlines() if line]
    assert len(lines) == 1 and lines[0].startswith("opgate: error: ") and message in lines[0]
    assert "Traceback" not in proc.stderr


@pytest.mark.gpu
def test_triton_on_a_gpu_keeps_ir_per_target(tmp_path):
    from opgate_testing import gpu_available

    ok, why = gpu_available()
    reason = None if ok else why
    if reason:
        pytest.skip(reason)
    proc = run_cli(str(SPEC), "--budget", "quick", "--impl", "triton", "--dtype", "float16", "--stages", "numerics",
                   "--json", str(tmp_path / "r.json"), "--out", str(tmp_path / "art"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = results_by_id(json.loads((tmp_path / "r.json").read_text()))["verify.softmax.triton.float16"]
    assert result["extra"]["backend_facts"]["interpreter"] is False
    suffixes = {Path(p).suffix for p in result["extra"]["artefacts"]}
    assert {".ttir", ".ttgir", ".llir", ".ptx"} <= suffixes


def _softmax_model(path: Path, axis: int) -> None:
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["M", "N"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["M", "N"])
    graph = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"], axis=axis)], "softmax", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


@pytest.mark.slow
def test_a_user_onnx_model_is_checked_run_and_judged(tmp_path):
    _softmax_model(tmp_path / "softmax.onnx", axis=-1)
    _softmax_model(tmp_path / "softmax_axis0.onnx", axis=0)  # wrong axis: the rows do not sum to one
    (tmp_path / "onnx_spec.py").write_text(
        "import torch, opgate\n"
        "def make(name, model):\n"
        "    op = opgate.Operator(name, reference=lambda x: torch.softmax(x, dim=-1),\n"
        "                         inputs=[opgate.TensorSpec('x', ('M', 'N'))], dims={'M': [3], 'N': [64]})\n"
        "    op.onnx_model(model)\n"
        "    return op\n"
        "good = make('softmax', 'softmax.onnx')\n"
        "wrong = make('softmax_axis0', 'softmax_axis0.onnx')\n"
    )
    proc = run_cli(str(tmp_path / "onnx_spec.py"), "--budget", "quick", "--no-extras",
                   "--json", str(tmp_path / "r.json"), "--out", str(tmp_path / "art"))
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = results_by_id(json.loads((tmp_path / "r.json").read_text()))
    good = results["verify.softmax.onnxruntime.float32"]
    assert good["outcome"] == "passed", good["reason"]
    assert good["extra"]["origin"] == "onnx_model"
    assert good["extra"]["backend_facts"]["opsets"] == {"ai.onnx": 13}
    assert good["extra"]["backend_facts"]["model"] == "user model softmax.onnx"
    assert results["verify.softmax_axis0.onnxruntime.float32"]["outcome"] == "failed"
