"""The plugin's machinery, usable without pytest: list a spec's cases and verify one through the CLI's engine."""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from opgate.model.results import CheckResult, Outcome, RunReport


@dataclass(frozen=True)
class OpgateCase:
    """One implementation x dtype of one operator of a spec file."""

    spec_file: Path
    op: str
    impl: str
    dtype: str
    budget: str = "quick"
    seed: int = 0
    stages: tuple[str, ...] = ("numerics",)

    @property
    def test_id(self) -> str:
        return f"{self.op}-{self.impl}-{self.dtype}"

    @property
    def check_id(self) -> str:
        return f"verify.{self.op}.{self.impl}.{self.dtype}"


class OpgateFailure(AssertionError):
    """An implementation x dtype that opgate verify fails: the message carries the evidence and the replay."""


def cases_for_spec(spec_file: str | Path, impls: Sequence[str] = (), dtypes: Sequence[str] = (),
                   ops: Sequence[str] = (), budget: str = "quick", seed: int = 0,
                   stages: Sequence[str] = ("numerics",)) -> list[OpgateCase]:
    """Every operator x implementation x dtype the spec declares (optionally only some)."""
    from opgate.core.spec import load_spec_file

    path = Path(spec_file).resolve()
    cases = []
    for op in load_spec_file(path):
        if ops and op.name not in ops:
            continue
        for impl in op.implementations:
            if impls and impl not in impls:
                continue
            for dtype in op.dtypes:
                if dtypes and dtype not in dtypes:
                    continue
                cases.append(OpgateCase(path, op.name, impl, dtype, budget, seed, tuple(stages)))
    return cases


@dataclass
class ReportCache:
    """One `opgate verify` run per operator x dtype (all its implementations side by side, one calibration),
    shared by the tests of that operator x dtype."""

    reports: dict[tuple, RunReport] = field(default_factory=dict)

    def report_for(self, case: OpgateCase, impls: Sequence[str]) -> RunReport:
        key = (case.spec_file, case.op, case.dtype, case.budget, case.seed, case.stages, tuple(sorted(impls)))
        if key not in self.reports:
            from rich.console import Console

            from opgate.verify.engine import VerifyRequest, run_verify

            request = VerifyRequest(spec_file=case.spec_file, ops=[case.op], impls=list(impls), dtypes=[case.dtype],
                                    seed=case.seed, budget=case.budget, extras=False, stages=list(case.stages),
                                    jobs=2)
            self.reports[key] = run_verify(request, Console(file=io.StringIO(), width=160))
        return self.reports[key]


def failure_message(case: OpgateCase, result: CheckResult) -> str:
    extra = result.extra if isinstance(result.extra, dict) else dict(result.extra)
    lines = [f"opgate verify: {case.check_id} {result.outcome.value}: {result.reason}"]
    if extra.get("smallest_failing_label"):
        lines.append(f"smallest failing case: {extra['smallest_failing_label']}")
        for why in extra.get("smallest_failing_reasons", [])[:3]:
            lines.append(f"  {why}")
    if extra.get("replay"):
        lines.append(f"replay: opgate verify {case.spec_file} --replay {extra['replay']}")
    if result.remediation:
        lines.append(f"-> {result.remediation}")
    return "\n".join(lines)


def outcome_of(report: RunReport, case: OpgateCase) -> CheckResult:
    for result in report.results:
        if result.check_id == case.check_id:
            return result
    problems = [r for r in report.results if r.outcome in (Outcome.FAILED, Outcome.ERROR)]
    if problems:  # the spec could not be calibrated or loaded: that result is the verdict
        return problems[0]
    raise OpgateFailure(f"opgate verify produced no result {case.check_id} (got "
                        f"{', '.join(r.check_id for r in report.results) or 'none'})")


def verify_case(case: OpgateCase, cache: ReportCache | None = None, siblings: Sequence[str] = ()) -> CheckResult:
    """Verify one case; raise OpgateFailure on `failed`/`error`, return the result otherwise (skipped included)."""
    report = (cache or ReportCache()).report_for(case, siblings or [case.impl])
    result = outcome_of(report, case)
    if result.outcome in (Outcome.FAILED, Outcome.ERROR):
        raise OpgateFailure(failure_message(case, result))
    return result
