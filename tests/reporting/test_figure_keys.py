"""Every figure of the shipped checks is keyed where it is made (issue #29): a key and labels set at the source,
equal to what opgate.reporting.metrics derived from its check id and prose name before (the derived keys are the
contract that reports, `opgate diff` and `opgate history` rely on). Results as the checks produce them on this
CPU machine, and, for what needs a GPU, built by the checks' judging layers from recorded inputs."""

from __future__ import annotations

import dataclasses
from typing import Iterable

import pytest

from opgate.reporting.metrics import derived_metric_for, metric_for
from opgate.results import CheckResult


def source_key_problems(results: Iterable[CheckResult]) -> list[str]:
    """Each figure without a key of its own, or whose key or labels differ from the derivation's."""
    problems = []
    for result in results:
        bare = dataclasses.replace(result, stage="", labels={})  # what the derivation saw: no planned identity
        for figure in result.figures:
            where = f"{result.check_id}: {figure.name!r}"
            if not figure.key:
                problems.append(f"{where} has no key set at its source")
                continue
            source = metric_for(result, figure)
            derived = derived_metric_for(bare, dataclasses.replace(figure, key="", labels={}))
            if (source.key, dict(source.labels)) != (derived.key, dict(derived.labels)):
                problems.append(f"{where}: source {source.key} {dict(source.labels)}, derived {derived.key} "
                                f"{dict(derived.labels)}")
    return problems


def figure_count(results: Iterable[CheckResult]) -> int:
    return sum(len(result.figures) for result in results)


def test_the_check_finds_a_figure_without_a_key_or_with_another_key() -> None:
    from opgate.results import Figure, Outcome

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
    from opgate.runner import run_checks
    from opgate.session import tasks_for

    tasks, broken = tasks_for(select_checks("doctor.", None), CheckContext(verb="doctor", level="standard"))
    return [*broken, *run_checks(tasks, jobs=2)]


def test_the_doctor_keys_its_figures_at_the_source(doctor_here: list[CheckResult]) -> None:
    assert figure_count(doctor_here) >= 20
    assert source_key_problems(doctor_here) == []
