"""doctor.collectives and doctor.contention as checks: registered like the others, standard level, alone on the GPU,
and skipped with the reason where they cannot run (this CPU machine: no driver; one GPU: "2 or more GPUs")."""

from __future__ import annotations

import pytest
from opgate_testing import run_opgate

from opgate.checks.base import CheckContext
from opgate.checks.registry import CheckSpec, discover_checks
from opgate.doctor.collectives import CollectivesCheck, one_gpu_reason
from opgate.doctor.contention import ContentionCheck
from opgate.gpu.probes.device import gpu_unavailable_reason
from opgate.engine.plugins import CHECKS_GROUP, _source_tree_groups
from opgate.model.results import Outcome

no_gpu = pytest.mark.skipif(gpu_unavailable_reason() is None, reason="a GPU is present: the checks measure")


def test_registered_in_pyproject_as_plugins() -> None:
    specs = {n: CheckSpec(n, t) for n, t in _source_tree_groups()[CHECKS_GROUP].items()}
    assert specs["doctor.collectives"].load() is CollectivesCheck
    assert specs["doctor.contention"].load() is ContentionCheck
    for cls in (CollectivesCheck, ContentionCheck):
        assert cls.levels == ("standard",) and cls.exclusive


def test_one_gpu_reason_says_what_is_missing() -> None:
    assert one_gpu_reason(1) == "collectives need 2 or more GPUs; this host has 1"


@no_gpu
def test_skipped_with_the_reason_without_a_gpu() -> None:
    for cls in (CollectivesCheck, ContentionCheck):
        result = cls().run(CheckContext(level="standard"))
        assert result.outcome == Outcome.SKIPPED and "NVIDIA" in result.reason, result.reason


@no_gpu
def test_cli_runs_it_by_name_and_exits_0() -> None:
    if "doctor.collectives" not in {s.name for s in discover_checks()}:
        pytest.skip("the installed opgate's entry points predate doctor.collectives: pip install -e . refreshes them")
    proc = run_opgate(["doctor", "--level", "standard", "--check", "collectives", "--check", "contention"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "doctor.collectives" in proc.stdout and "skipped" in proc.stdout.lower()


@no_gpu
def test_link_snapshot_needs_a_driver() -> None:
    from opgate.probes.nvlink import collect_links
    from opgate.probes.nvml import NvmlUnavailable

    with pytest.raises(NvmlUnavailable, match="driver"):
        collect_links()
