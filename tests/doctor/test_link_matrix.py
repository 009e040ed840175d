"""The GPU-to-GPU link matrix: rendering and the outlier judge on hand-written pair figures and NVML shapes
(tests/data/multigpu/link_matrix_4gpu_one_slow_direction.json says so in its _note)."""

from __future__ import annotations

import json
from pathlib import Path

from opgate.gpu.probes.link_matrix import PairFigures
from opgate.gpu.judge.link_matrix import find_outliers, link_matrix_verdict, render_link_matrix, unknown_links
from opgate.gpu.judge.references import policy_band
from opgate.model.results import Outcome

DATA = Path(__file__).resolve().parents[1] / "data" / "multigpu"
BAND = policy_band("p2p_pair_vs_siblings", None)


def fixture() -> tuple[list[PairFigures], list[list[str]], list[int]]:
    data = json.loads((DATA / "link_matrix_4gpu_one_slow_direction.json").read_text())
    return [PairFigures.from_dict(p) for p in data["pairs"]], data["links"], data["numa"]


def test_the_slow_direction_is_the_only_finding() -> None:
    pairs, links, _ = fixture()
    outliers = find_outliers(pairs, links, BAND)
    assert {(o.src, o.dst, o.metric) for o in outliers} == {(1, 0, "copy_gbs"), (1, 0, "read_gbs")}
    copy = next(o for o in outliers if o.metric == "copy_gbs")
    assert copy.link == "PIX" and copy.sibling_median == 25.0 and copy.outcome == Outcome.FAILED  # 36% of siblings
    # the SYS pairs are slower than the PIX ones, but that is the topology: none of them is a finding
    assert not any(links[o.src][o.dst] == "SYS" for o in outliers)


def test_matrix_shows_topology_numa_and_every_metric_with_the_outlier_marked() -> None:
    pairs, links, numa = fixture()
    text = render_link_matrix(links, pairs, numa, find_outliers(pairs, links, BAND))
    lines = text.splitlines()
    assert lines[0].split() == ["link", "GPU0", "GPU1", "GPU2", "GPU3", "NUMA"]
    assert lines[1].split() == ["GPU0", "X", "PIX", "SYS", "SYS", "0"]
    assert "peer read (kernel on dst loads src memory) [GB/s], row = source, column = destination" in lines
    assert "4-byte peer copy latency [us], row = source, column = destination" in lines
    copy_rows = lines[lines.index("peer copy (copy engine) [GB/s], row = source, column = destination") + 2:][:4]
    assert copy_rows[1].split() == ["GPU1", "9.0!", "X", "20.0", "20.0"]
    assert text.splitlines()[-1].startswith("! GPU1->GPU0 (PIX)")


def test_verdict_names_the_pair_and_warns_without_peer_access() -> None:
    pairs, links, numa = fixture()
    verdict = link_matrix_verdict(pairs, links, numa, BAND)
    assert verdict.outcome == Outcome.FAILED and "GPU1->GPU0 (PIX) peer copy 9.00 GB/s is 36% of its siblings' median 25.00" in verdict.reason
    healthy = [p for p in pairs if (p.src, p.dst) != (1, 0)]
    assert link_matrix_verdict(healthy, links, numa, BAND).outcome == Outcome.PASSED
    two = [PairFigures(0, 1, True, 380.0, 2.0, 350.0, 360.0), PairFigures(1, 0, False, 20.0, 9.0, None, None)]
    staged = link_matrix_verdict(two, unknown_links(2, "no NVML"), [], BAND)
    assert staged.outcome == Outcome.WARNED and "no peer access for GPU1->GPU0" in staged.reason
    assert "-" in staged.matrix_text  # no read figure without peer access


def test_latency_outlier_counts_the_other_way() -> None:
    pairs = [PairFigures(s, d, True, 300.0, 2.0 if (s, d) != (2, 1) else 5.0, None, None)
             for s in range(3) for d in range(3) if s != d]
    links = [["X" if i == j else "NV18" for j in range(3)] for i in range(3)]
    outliers = find_outliers(pairs, links, BAND)
    assert [(o.src, o.dst, o.metric) for o in outliers] == [(2, 1, "latency_us")]
    assert outliers[0].fraction == 0.4
