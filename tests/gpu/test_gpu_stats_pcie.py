"""Pure arithmetic behind the probes: percentiles, bandwidth units, PCIe theoretical figures."""

from __future__ import annotations

import math

import numpy as np
import pytest

from opgate.gpu.probes.pcie import UnknownPcieGeneration, pcie_generations, pcie_theoretical_gbs
from opgate.gpu.probes.timing import Samples, bandwidth_gbs, bandwidth_tbs, percentile


def test_percentile_matches_numpy_linear_interpolation() -> None:
    rng = np.random.default_rng(7)
    values = rng.random(37).tolist()
    for q in (0, 10, 50, 90, 95, 100):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


def test_samples_summary_and_spread() -> None:
    s = Samples.of([1.0, 2.0, 3.0, 4.0, 100.0])
    assert s.median == 3.0
    assert s.minimum == 1.0 and s.maximum == 100.0
    assert s.relative_spread == pytest.approx((s.p90 - s.p10) / 3.0)
    with pytest.raises(ValueError):
        Samples.of([])
    with pytest.raises(ValueError):
        Samples.of([1.0, math.nan])


def test_bandwidth_units() -> None:
    # 4.8e12 bytes in one second is the H200 datasheet's 4.8 TB/s
    assert bandwidth_tbs(4.8e12, 1000.0) == pytest.approx(4.8)
    assert bandwidth_gbs(63.0e9, 1000.0) == pytest.approx(63.0)
    with pytest.raises(ValueError):
        bandwidth_tbs(1.0, 0.0)


@pytest.mark.parametrize(("gen", "width", "expected"), [
    (1, 1, 0.25),          # 2.5 GT/s x 8/10 / 8 bits
    (2, 16, 8.0),
    (3, 16, 15.754),       # 8 GT/s x 128/130 x 16 / 8
    (4, 16, 31.508),
    (5, 16, 63.015),       # what an H200's Gen5 x16 link carries per direction
    (5, 8, 31.508),
    (6, 16, 121.0),        # 64 GT/s x 242/256 x 16 / 8
])
def test_pcie_theoretical_per_direction(gen: int, width: int, expected: float) -> None:
    assert pcie_theoretical_gbs(gen, width) == pytest.approx(expected, abs=0.001)


def test_pcie_table_cites_pci_sig_and_rejects_unknown_links() -> None:
    table = pcie_generations()
    assert sorted(table) == [1, 2, 3, 4, 5, 6]
    assert all("PCI-SIG" in g.source for g in table.values())
    assert table[6].uncertain and not table[5].uncertain
    with pytest.raises(UnknownPcieGeneration, match="generation 7"):
        pcie_theoretical_gbs(7, 16)
    with pytest.raises(ValueError, match="0 lanes"):
        pcie_theoretical_gbs(5, 0)
