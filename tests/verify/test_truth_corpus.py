"""The truth corpus (tests/data/verify/truth_corpus): independent correct kernels and buggy twins of real bug classes.

The fast tests check that the manifest and the spec files agree (every row names a registered implementation, every
implementation has a row, every verdict is in opgate's vocabulary). The slow test runs the CPU corpus at the quick
budget through scripts/truth_corpus.py (opgate verify in subprocesses, Triton under its interpreter) and asserts no
false alarm and no miss on the rows whose `needs` are empty (rows that rely on new spec features are measured, not
asserted). The GPU corpus runs from scripts/gpu/corpus.sh.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from opgate_testing import REPO, child_pythonpath

CORPUS = REPO / "tests" / "data" / "verify" / "truth_corpus"
RUNNER = REPO / "scripts" / "truth_corpus.py"


def _runner():
    spec = importlib.util.spec_from_file_location("truth_corpus_runner", RUNNER)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_manifest_rows_match_the_spec_files() -> None:
    from opgate.verify.spec import load_spec_file

    rows = _runner().load_manifest()
    registered: set[tuple[str, str, str]] = set()
    for path in sorted(CORPUS.rglob("*.py")):
        if path.name.startswith("_"):
            continue  # helpers (gpu/_cuda_glue.py), not spec files
        rel = path.relative_to(CORPUS).as_posix()
        for op in load_spec_file(path):
            registered.update((rel, op.name, impl) for impl in op.implementations)
    listed = [(r.file, r.op, r.impl) for r in rows]
    assert len(listed) == len(set(listed)), "a (file, op, impl) appears twice in the manifest"
    assert set(listed) - registered == set(), "manifest rows without a registered implementation"
    assert registered - set(listed) == set(), "implementations without a manifest row"


def test_manifest_pairs_correct_kernels_with_buggy_twins() -> None:
    rows = _runner().load_manifest()
    for device in ("cpu", "gpu"):
        mine = [r for r in rows if r.device == device]
        assert any(r.is_correct_kernel(device) for r in mine) and any(not r.is_correct_kernel(device) for r in mine)
    for row in rows:
        assert row.impl.startswith("good_") == row.is_correct_kernel(row.device), row.impl


def test_manifest_reads_the_same_without_tomllib() -> None:
    runner = _runner()
    assert runner._parse_simple_toml(runner.MANIFEST) == runner.load_manifest()  # the GPU host's Python may be < 3.11


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("OPGATE_TRUTH_CORPUS") != "1",
                    reason="the whole CPU truth corpus takes ~20 min on 2 cores: OPGATE_TRUTH_CORPUS=1 runs it "
                           "(scripts/truth_corpus.py --device cpu prints the table)")
def test_cpu_truth_corpus_no_false_alarm_no_new_miss(tmp_path: Path) -> None:
    summary = tmp_path / "summary.json"
    env = dict(os.environ, PYTHONPATH=child_pythonpath(), TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, str(RUNNER), "--device", "cpu", "--budget", "quick", "--parallel", "2",
                           "--summary",
                           str(summary), "--json-dir", str(tmp_path / "json")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = json.loads(summary.read_text())["rows"]
    judged = [r for r in rows if not r["needs"]]
    false_alarms = [r for r in judged if r["correct_kernel"] and r["outcome"] in ("failed", "error", "missing")]
    misses = [r for r in judged if not r["correct_kernel"] and r["outcome"] not in ("failed", "error")
              and r["impl"] not in KNOWN_MISSES]
    problems = [f"{r['file']} {r['impl']}: expected {r['expected']}, got {r['observed']} ({r['reason'][:160]})"
                for r in false_alarms + misses]
    assert not problems, "\n".join(problems)


# Bugs opgate still misses on the CPU (docs/benchmarks.md, 2026-12-01): a test failure when a new one appears, and
# each listed one an open gap. The -inf -> NaN bug needs a whole tile of -inf (a masked row), which one injected
# -inf never makes; the float16 per-lane accumulator sums N/BLOCK terms per lane, too few at the plan's sizes.
KNOWN_MISSES = {"bad_softmax_inf_nan_multitile_triton", "bad_rowsum_fp16_acc_triton"}


@pytest.mark.gpu
def test_gpu_corpus_side_stream_is_gaming_and_the_rounded_down_grid_is_unwritten(tmp_path: Path) -> None:
    """CUDA C through CuPy on torch tensors (H200, issue 13): the private-stream launch used to pass as `ftz`, the
    tail a rounded-down grid never writes read as `nonfinite` (torch.empty is NaN-filled)."""
    pytest.importorskip("cupy")
    report = tmp_path / "r.json"
    args = [sys.executable, "-m", "opgate", "verify", str(CORPUS / "gpu" / "elementwise.py"), "--budget", "quick",
            "--no-extras", "--stages", "numerics", "--jobs", "3", "--json", str(report), "--out", str(tmp_path / "o")]
    for impl in ("good_scale2_nvrtc", "bad_scale2_side_stream", "bad_scale2_tail_grid"):
        args += ["--impl", impl]
    proc = subprocess.run(args, cwd=REPO, env=dict(os.environ, PYTHONPATH=child_pythonpath()), capture_output=True,
                          text=True, timeout=600)
    assert report.is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
    results = {r["extra"].get("implementation"): r for r in json.loads(report.read_text())["results"]
               if r.get("extra", {}).get("implementation")}
    good = results["good_scale2_nvrtc"]
    assert good["outcome"] in ("passed", "warned"), good["reason"]
    for impl, failure_class in (("bad_scale2_side_stream", "gaming"), ("bad_scale2_tail_grid", "unwritten")):
        result = results[impl]
        assert result["outcome"] == "failed", (impl, result["reason"])
        assert result["extra"]["failure_class"] == failure_class, (impl, result["reason"])
