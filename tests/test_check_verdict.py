"""Check.verdict, the check API's verdict builder: sub-verdicts, figures and reasons in, one CheckResult out."""

from __future__ import annotations

import pytest

from opgate.checks.base import Check
from opgate.model.results import Figure, Outcome


class Judged(Check):
    check_id = "doctor.judged"
    title = "judged"


FIGURES = [Figure("GPU0 read", 4.5, "TB/s", key="hbm.read_bandwidth", labels={"gpu": "0"})]


@pytest.mark.parametrize(("outcomes", "expected", "remediation"), [
    ([Outcome.PASSED, Outcome.PASSED], Outcome.PASSED, ""),
    ([Outcome.PASSED, Outcome.WARNED], Outcome.WARNED, "look"),
    ([Outcome.WARNED, Outcome.FAILED, Outcome.PASSED], Outcome.FAILED, "look"),
    ([], Outcome.SKIPPED, ""),  # nothing judged: no advice for a verdict that was not reached
])
def test_the_worst_outcome_with_its_remediation_only_beside_a_problem(outcomes, expected, remediation) -> None:
    result = Judged().verdict(outcomes, FIGURES, ["GPU0: fast", "GPU1: slow"], "look", extra={"gpus": 2})
    assert result.outcome == expected and result.remediation == remediation
    assert result.reason == "GPU0: fast; GPU1: slow"
    assert result.figures == tuple(FIGURES) and result.extra == {"gpus": 2}
    assert result.check_id == "doctor.judged" and result.title == "judged"
