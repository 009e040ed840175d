"""The default terminal output fits a screen (issue #28): one line per passing check cut to the width, each
warning and failure with its reason and its replay command on a line of its own (spec path as given), the table of
evidence only under -v."""

from __future__ import annotations

import io

from rich.console import Console

from opgate.reporting.terminal import render_terminal
from opgate.model.results import CheckResult, Figure, Outcome, RunReport

TOKEN = "ogv1." + "A" * 120


def _report() -> RunReport:
    long = "33/33 cases within budget on cpu; worst at 4% of its budget (M=64,N=17 seed=9 typical contiguous)"
    results = (
        CheckResult("verify.softmax.torch.float32", "t", Outcome.PASSED, long, figures=(Figure("RMSE", 1e-8),)),
        CheckResult("verify.softmax.tvm.float16", "t", Outcome.WARNED,
                    f"calibration warning: the reference through tvm exceeds the budget; replay: opgate verify "
                    f"softmax.py --replay {TOKEN}", remediation="not a failure of your implementations"),
        CheckResult("verify.softmax.bad.float16", "t", Outcome.FAILED,
                    f"[tail] 2/28 cases fail; replay: opgate verify softmax.py --replay {TOKEN}",
                    extra={"replay": TOKEN}),
        CheckResult("verify.softmax.runtime", "t", Outcome.SKIPPED, "needs a CUDA GPU"),
    )
    return RunReport(verb="verify", results=results, started_at="2026-12-02T00:00:00+00:00", duration_s=1.0,
                     host={}, tool_version="test", extra={"spec": "examples/ops/softmax.py"})


def _render(verbose: bool, width: int = 80) -> list[str]:
    out = io.StringIO()
    render_terminal(_report(), Console(file=out, width=width, force_terminal=False, color_system=None),
                    verbose=verbose)
    return out.getvalue().splitlines()


def test_one_line_per_pass_and_whole_reasons_for_the_rest() -> None:
    lines = _render(verbose=False)
    [passed] = [line for line in lines if line.startswith("PASS")]
    assert len(passed) <= 80 and passed.rstrip().endswith("s") and "verify.softmax.torch.float32" in passed
    assert "33/33 ok, worst 4% of budget" in passed  # the worst case against its budget, not cut off
    commands = [line.strip() for line in lines if line.strip().startswith("opgate verify")]
    assert commands == [f"opgate verify examples/ops/softmax.py --replay {TOKEN}"] * 2  # the path as given
    assert not any("┃" in line or "│" in line for line in lines)  # no table
    # the summary last (at 80 columns it may wrap onto a second line)
    assert any(line.startswith("1 passed, 1 warned, 1 failed, 1 skipped") for line in lines[-2:])
    assert sum(TOKEN in line for line in lines) == 2  # the tokens only on their own lines


def test_the_evidence_table_under_verbose() -> None:
    lines = _render(verbose=True, width=120)
    assert any("RMSE" in line for line in lines) and any("┃" in line for line in lines)
