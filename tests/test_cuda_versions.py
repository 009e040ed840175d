from __future__ import annotations

import pytest

from opgate.core.cuda_versions import (Compat, classify_runtime, cuda_for_driver, min_driver_for_cuda, parse_version,
                                  ptx_isa_for_cuda)


@pytest.mark.parametrize(
    ("driver_cuda", "driver", "runtime", "expected", "jit_risk"),
    [
        ((13, 0), "580.159.03", (13, 0), Compat.NATIVE, False),
        ((13, 0), "580.159.03", (12, 8), Compat.NATIVE, False),  # newer driver runs older runtimes
        ((13, 0), "580.159.03", (13, 3), Compat.MINOR_VERSION, True),  # the H200 host's cuda-bindings case
        ((13, 0), "580.159.03", (13, 5), Compat.MINOR_VERSION, True),
        ((12, 2), "535.104.05", (12, 6), Compat.MINOR_VERSION, True),
        ((12, 0), "520.61.05", (12, 4), Compat.INCOMPATIBLE, True),  # below the 12.x MVC floor 525.60.13
        ((12, 4), "550.54.14", (13, 0), Compat.FORWARD_COMPAT, True),
        ((11, 8), "520.61.05", (12, 1), Compat.FORWARD_COMPAT, True),
        ((12, 6), "560.35.03", (12, 5), Compat.NATIVE, False),  # 12.5 and 12.6 both emit PTX ISA 8.5
    ],
)
def test_runtime_compatibility_decisions(driver_cuda, driver, runtime, expected, jit_risk) -> None:
    verdict = classify_runtime(driver_cuda, runtime, driver)
    assert verdict.compat is expected
    assert bool(verdict.ptx_jit_risk) is jit_risk
    if expected is not Compat.NATIVE:
        assert verdict.sources, "every non-native verdict cites its source"


def test_minor_version_verdict_lists_limits() -> None:
    verdict = classify_runtime((13, 0), (13, 3), "580.159.03")
    assert verdict.limits and "ISA 9.3" in verdict.ptx_jit_risk and "ISA 9.0" in verdict.ptx_jit_risk
    assert "610.43.02" in verdict.detail


@pytest.mark.parametrize(("cuda", "isa"), [((11, 8), (7, 8)), ((12, 6), (8, 5)), ((12, 7), (8, 6)),
                                           ((13, 0), (9, 0)), ((13, 2), (9, 2))])
def test_ptx_isa_per_cuda(cuda, isa) -> None:
    assert ptx_isa_for_cuda(cuda)[0] == isa


@pytest.mark.parametrize(("driver", "cuda"), [("580.159.03", (13, 0)), ("535.104.05", (12, 2)),
                                              ("570.26", (12, 8)), ("450.51.05", (11, 0)), ("400.0", None)])
def test_cuda_for_driver(driver, cuda) -> None:
    assert cuda_for_driver(driver) == cuda


def test_min_driver_and_parse() -> None:
    assert min_driver_for_cuda((13, 0))[0] == "580.65.06"
    assert parse_version("580.65.06") == (580, 65, 6)
    with pytest.raises(ValueError):
        parse_version("r580")
