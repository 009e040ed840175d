"""`opgate verify PATH...`: several spec files or folders in one run, `--changed-since`, and the disk cache of the
calibration's bound terms (verify/bounds_cache.py) that makes a re-run recompute nothing unchanged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests_verify_support import ROOT, SRC

TINY_SPEC = '''
import torch
import opgate

{name} = opgate.Operator(
    "{name}",
    reference=lambda x: {formula},
    inputs=[opgate.TensorSpec("x", ("M", "N"))],
    dims={{"M": [2], "N": [8, 33]}},
    dtypes=["float32"],
    exact_dims=["M"],
)


@{name}.implementation("torch")
def {name}_torch(x):
    return {implementation}
'''


def write_spec(path: Path, name: str, formula: str, implementation: str | None = None) -> Path:
    path.write_text(TINY_SPEC.format(name=name, formula=formula, implementation=implementation or formula))
    return path


def run_verify(*args: str, cwd: Path = ROOT, cache: Path | None = None,
               timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    if cache is not None:
        env["OPGATE_CACHE_DIR"] = str(cache)
    return subprocess.run([sys.executable, "-m", "opgate", "verify", *args, "--budget", "quick", "--no-extras",
                           "--stages", "numerics", "--jobs", "2"], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


# -- finding spec files -----------------------------------------------------------------------------------------

def test_a_folder_yields_its_spec_files_not_helpers_tests_or_caches(tmp_path):
    from opgate.verify.spec_files import expand_spec_paths, specs_in_folder

    write_spec(tmp_path / "relu.py", "relu", "torch.relu(x)")
    (tmp_path / "sub").mkdir()
    write_spec(tmp_path / "sub" / "tanh.py", "tanh", "torch.tanh(x)")
    (tmp_path / "_helpers.py").write_text("import opgate\nx = opgate.Operator\n")
    write_spec(tmp_path / "test_relu.py", "relu2", "torch.relu(x)")
    (tmp_path / "kernels.py").write_text("def kernel(x):\n    return x\n")
    (tmp_path / "__pycache__").mkdir()
    write_spec(tmp_path / "__pycache__" / "old.py", "old", "x")
    assert [p.name for p in specs_in_folder(tmp_path)] == ["relu.py", "tanh.py"]
    # a file given twice (as itself and inside its folder) is verified once
    assert [p.name for p in expand_spec_paths([tmp_path / "relu.py", tmp_path])] == ["relu.py", "tanh.py"]


def test_a_folder_without_specs_and_a_missing_path_are_input_errors(tmp_path):
    from opgate.model.errors import InputError
    from opgate.verify.spec_files import expand_spec_paths

    (tmp_path / "kernels.py").write_text("x = 1\n")
    with pytest.raises(InputError, match="holds no spec file"):
        expand_spec_paths([tmp_path])
    with pytest.raises(InputError, match="does not exist"):
        expand_spec_paths([tmp_path / "nope.py"])


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t"})


def test_changed_since_keeps_specs_whose_file_or_local_imports_changed(tmp_path):
    from opgate.verify.spec_files import changed_specs, specs_in_folder

    repo = tmp_path / "lib"
    (repo / "specs").mkdir(parents=True)
    (repo / "mykernels").mkdir()
    (repo / "mykernels" / "__init__.py").write_text("")
    (repo / "mykernels" / "act.py").write_text("def relu(x):\n    return x.clamp(min=0)\n")
    (repo / "specs" / "relu.py").write_text(textwrap.dedent('''
        import opgate, torch
        from mykernels.act import relu
        op = opgate.Operator("relu", reference=torch.relu, inputs=[opgate.TensorSpec("x", ("N",))], dims={"N": [4]})
        op.implementation("torch")(relu)
    '''))
    write_spec(repo / "specs" / "tanh.py", "tanh", "torch.tanh(x)")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "base")
    specs = specs_in_folder(repo / "specs")
    assert changed_specs(specs, "HEAD")[0] == []  # nothing changed
    (repo / "mykernels" / "act.py").write_text("def relu(x):\n    return x.clamp(min=0.0)\n")  # uncommitted
    kept, why = changed_specs(specs, "HEAD")
    assert [p.name for p in kept] == ["relu.py"]
    assert why[str(kept[0])] == ["mykernels/act.py"]
    _git(repo, "commit", "-qam", "kernel")
    write_spec(repo / "specs" / "tanh.py", "tanh", "torch.tanh(x) * 1")
    kept, _ = changed_specs(specs, "HEAD~1")  # committed since the ref and uncommitted both count
    assert sorted(p.name for p in kept) == ["relu.py", "tanh.py"]


def test_changed_since_a_ref_the_clone_lacks_is_an_input_error(tmp_path):
    from opgate.model.errors import InputError
    from opgate.verify.spec_files import changed_specs

    write_spec(tmp_path / "relu.py", "relu", "torch.relu(x)")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "base")
    with pytest.raises(InputError, match="no-such-ref"):
        changed_specs([tmp_path / "relu.py"], "no-such-ref")


# -- the bound-terms cache --------------------------------------------------------------------------------------

def test_the_reference_digest_ignores_line_numbers_and_sees_the_body():
    from opgate.verify.bounds_cache import function_digest

    namespace: dict = {}
    exec(compile("def ref(x):\n    return x * 2\n", "a.py", "exec"), namespace)
    first = function_digest(namespace["ref"])
    exec(compile("\n\n\ndef ref(x):\n    return x * 2\n", "b.py", "exec"), namespace)
    assert function_digest(namespace["ref"]) == first  # moved, same code
    exec(compile("def ref(x):\n    return x * 3\n", "a.py", "exec"), namespace)
    assert function_digest(namespace["ref"]) != first


def test_a_second_calibration_takes_every_bound_from_the_cache_and_judges_the_same(tmp_path, monkeypatch):
    import torch

    from opgate.core.spec import Operator, TensorSpec
    from opgate.verify import calibrate as C
    from opgate.verify.inputs import inputs_generated_once, plan_cases

    monkeypatch.setenv("OPGATE_CACHE_DIR", str(tmp_path / "cache"))
    op = Operator("softmax", reference=lambda x: torch.softmax(x, dim=-1),
                  inputs=[TensorSpec("x", ("M", "N"), kind="logits")], dims={"M": [3], "N": [16, 100]})
    cases = plan_cases(op, "quick", 0)

    def calibrated():
        with inputs_generated_once():
            computed = [C.truth_and_baseline(op, c, "float32") for c in cases]
            return C.calibrate(op, "float32", cases, [t for t, _ in computed], [b for _, b in computed])

    before = dict(C.CACHE_COUNTS)
    first = calibrated()
    middle = dict(C.CACHE_COUNTS)
    second = calibrated()
    after = dict(C.CACHE_COUNTS)
    # once per set of values: a layout case at a declared size holds that case's values (plan_cases)
    distinct = len({case.values_key() for case in cases})
    assert distinct < len(cases)
    assert middle["computed"] - before["computed"] == distinct and middle["hit"] == before["hit"]
    assert after["hit"] - middle["hit"] == distinct and after["computed"] == middle["computed"]
    assert [[b.to_dict() for b in row] for row in first.budgets] == [[b.to_dict() for b in row]
                                                                       for row in second.budgets]
    # another reference over the same inputs misses: its truth (and code) differ
    op.reference = lambda x: torch.log_softmax(x, dim=-1)
    calibrated()
    assert C.CACHE_COUNTS["computed"] - after["computed"] == distinct


def test_the_cache_can_be_turned_off(tmp_path, monkeypatch):
    from opgate.verify.bounds_cache import cache_root

    monkeypatch.setenv("OPGATE_CACHE_DIR", str(tmp_path))
    assert cache_root() == tmp_path
    monkeypatch.setenv("OPGATE_CACHE", "0")
    assert cache_root() is None


# -- one run over several spec files ----------------------------------------------------------------------------

@pytest.mark.slow
def test_a_folder_of_specs_is_one_run_with_one_report_and_each_spec_named(tmp_path):
    specs = tmp_path / "specs"
    specs.mkdir()
    write_spec(specs / "relu.py", "relu", "torch.relu(x)")
    write_spec(specs / "scale.py", "scale", "x * 2", implementation="x * 2 + (x.shape[-1] == 33)")  # wrong at N=33
    report_path = tmp_path / "r.json"
    cache = tmp_path / "cache"
    proc = run_verify(str(specs), "--json", str(report_path), cache=cache)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads(report_path.read_text())
    outcomes = {r["check_id"]: r["outcome"] for r in report["results"]}
    assert outcomes["verify.relu.torch.float32"] == "passed"
    assert outcomes["verify.scale.torch.float32"] == "failed"
    assert report["extra"]["specs"] == [str(specs / "relu.py"), str(specs / "scale.py")]
    failed = next(r for r in report["results"] if r["check_id"] == "verify.scale.torch.float32")
    assert failed["extra"]["spec_file"] == str(specs / "scale.py")
    assert f"opgate verify {specs / 'scale.py'} --replay ogv1" in proc.stdout  # the failing op's own file
    assert report["extra"]["engine"]["bounds_cache"]["computed"] > 0
    # when each file was judged wholly, named as given (files complete one by one: CheckTask.group)
    completed = report["extra"]["engine"]["files_completed_s"]
    assert sorted(completed) == [str(specs / "relu.py"), str(specs / "scale.py")]
    assert all(0 < at <= report["duration_s"] + 0.1 for at in completed.values())  # rounded to 0.1 s
    # a re-run with nothing changed takes every case's bounds from the cache
    again = run_verify(str(specs), "--json", str(report_path), cache=cache)
    assert again.returncode == 1
    rerun = json.loads(report_path.read_text())["extra"]["engine"]["bounds_cache"]
    assert rerun["computed"] == 0 and rerun["hit"] > 0


def test_one_warm_worker_serves_the_spec_files_of_one_library(tmp_path):
    """A worker is keyed by its environment and library, not its spec file: a library's files share its imports
    (one per file cost a library run on the H200 ~14 CPU-s per worker start, 66 starts in 350 s). These two name no
    installed library and replace none of torch's kernels: one group."""
    specs = tmp_path / "specs"
    specs.mkdir()
    write_spec(specs / "relu.py", "relu", "torch.relu(x)")
    write_spec(specs / "tf32.py", "scale", "x * 2")
    with open(specs / "tf32.py", "a") as spec:  # its torch switch must not reach relu's checks in the same worker
        spec.write("\ntorch.backends.cuda.matmul.allow_tf32 = True\n")
    report_path = tmp_path / "r.json"
    env = {**os.environ, "PYTHONPATH": str(SRC), "OPGATE_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-m", "opgate", "verify", str(specs), "--budget", "quick", "--no-extras",
                           "--stages", "numerics", "--jobs", "1", "--json", str(report_path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = {r["check_id"]: r for r in json.loads(report_path.read_text())["results"]}
    pids = {results[f"verify.{name}.torch.float32"]["extra"]["worker"]["pid"] for name in ("relu", "scale")}
    assert len(pids) == 1, pids


def test_two_specs_defining_one_operator_name_are_one_line_exit_2(tmp_path):
    write_spec(tmp_path / "a.py", "relu", "torch.relu(x)")
    write_spec(tmp_path / "b.py", "relu", "torch.relu(x)")
    proc = run_verify(str(tmp_path / "a.py"), str(tmp_path / "b.py"))
    assert proc.returncode == 2
    assert "operator 'relu' is defined in both" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_folder_without_spec_files_is_exit_2_and_changed_since_with_no_change_verifies_nothing(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.py").write_text("x = 1\n")
    proc = run_verify(str(empty))
    assert proc.returncode == 2 and "holds no spec file" in proc.stderr
    write_spec(tmp_path / "relu.py", "relu", "torch.relu(x)")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "relu.py")
    _git(tmp_path, "commit", "-qm", "base")
    proc = run_verify(str(tmp_path / "relu.py"), "--changed-since", "HEAD", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "nothing to verify" in proc.stdout


@pytest.mark.parametrize("second, said", [
    ("import os\nos._exit(7)\n", "ended the process with exit code 7"),
    ("import sys\nsys.exit(3)\n", "called sys.exit(3)"),
    ("import time\ntime.sleep(600)\n", "did not finish importing within 10 s"),
])
def test_one_preflight_child_names_the_file_that_fails_among_several(tmp_path, second, said):
    """Every file is pre-flighted in one child, in order; the error names the file it stopped in, not the first."""
    from opgate.model.errors import InputError
    from opgate.engine.specload import preflight_specs

    first, bad, third = tmp_path / "a_spec.py", tmp_path / "b_spec.py", tmp_path / "c_spec.py"
    write_spec(first, "a_op", "x * 2")
    bad.write_text(second)
    write_spec(third, "c_op", "x + 1")
    # 10 s per file: the first file's import (torch's) took over 3 s on the 2-core machine under a test run's load,
    # and the error then named the first file
    with pytest.raises(InputError) as raised:
        preflight_specs([first, bad, third], timeout_s=10.0)
    message = str(raised.value)
    assert str(bad) in message and said in message and str(first) not in message
    preflight_specs([first, third], timeout_s=60.0)  # good files: no error
