"""The pytest plugin in a real pytest run: per implementation x dtype test ids, the CLI's verdicts, the smallest
failing case and the replay command on failure; and nothing at all in a suite that does not use it."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "tests" / "data" / "testing" / "scale_spec.py"  # a correct torch implementation and a buggy one


def plugin_args() -> list[str]:
    """`-p` only where the pytest11 entry point is not installed (an editable install of another checkout)."""
    installed = any(ep.value == "opgate.testing.plugin" for ep in entry_points(group="pytest11"))
    return [] if installed else ["-p", "opgate.testing.plugin"]


def run_pytest(test_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "pytest", *plugin_args(), "-p", "no:cacheprovider", "-v",
                           "--rootdir", str(test_dir), *args, str(test_dir)], capture_output=True, text=True,
                          env=env, cwd=test_dir, timeout=900)


@pytest.mark.slow
def test_spec_runs_per_implementation_and_dtype_with_cli_verdicts(tmp_path: Path) -> None:
    (tmp_path / "test_ops.py").write_text(
        "import pytest\n"
        f"pytestmark = pytest.mark.opgate_spec({str(SPEC)!r}, budget='quick')\n\n"
        "def test_softmax(opgate_case, opgate_verify):\n"
        "    opgate_verify(opgate_case)\n")
    done = run_pytest(tmp_path)
    out = done.stdout
    assert "test_softmax[scale-torch-float32] PASSED" in out, out[-3000:]
    assert "test_softmax[scale-torch_drops_last-float32] FAILED" in out, out[-3000:]
    assert "smallest failing case:" in out and f"replay: opgate verify {SPEC} --replay ogv1." in out
    assert done.returncode == 1


def test_plugin_does_nothing_unless_used(tmp_path: Path) -> None:
    (tmp_path / "test_plain.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
    done = run_pytest(tmp_path, "-W", "error")
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout
    modules = subprocess.run([sys.executable, "-c", "import sys, opgate.testing.plugin; "
                              "print(sorted(m for m in sys.modules if m.startswith(('torch', 'opgate.verify'))))"],
                             capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
                             timeout=60)
    assert modules.stdout.strip() == "[]", modules.stdout + modules.stderr


def test_missing_marker_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "test_bad.py").write_text("def test_x(opgate_case, opgate_verify):\n    pass\n")
    done = run_pytest(tmp_path)
    assert done.returncode != 0 and "has no @pytest.mark.opgate_spec" in done.stdout + done.stderr
