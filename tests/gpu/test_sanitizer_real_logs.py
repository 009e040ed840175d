"""compute-sanitizer 2025.3.1 output captured on the H200 (2026-11-29) for the planted bugs and their clean
twins: every bug log parses into findings naming the planted kernel, every clean log into none."""

from __future__ import annotations

from pathlib import Path

import pytest
from opgate_testing import DATA

from opgate.gpu.probes.sanitizer import parse_sanitizer_output

LOGS = sorted((DATA / "sanitizer" / "h200").glob("*.log"))


@pytest.mark.parametrize("log", LOGS, ids=lambda p: p.stem)
def test_real_sanitizer_logs(log: Path) -> None:
    case, variant, tool = log.stem.split(".")
    report = parse_sanitizer_output(log.read_text(), tool=tool)
    if variant == "clean":
        assert not report.findings, report.findings[:2]
    else:
        assert report.findings, f"no finding parsed from {log.name}"
        kernels = {f.kernel for f in report.findings if getattr(f, "kernel", None)}
        assert any(k and k.startswith("planted_") for k in kernels), kernels


def test_logs_were_recorded() -> None:
    assert len(LOGS) == 10
