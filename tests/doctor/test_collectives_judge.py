"""The collectives' arithmetic and verdict, on recorded runs and hand-written NVML/NCCL shapes (tests/data/multigpu/;
each file's _note says which it is). No GPU, no processes."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from opgate.gpu.judge.collectives import (
    MIN_JUDGED_BYTES, collective_band, judge_collectives, link_reference, nvlink_model, render_sweep)
from opgate.gpu.probes.collectives import (
    MAX_BYTES, CollectiveConfig, CollectiveRun, algbw_gbs, bus_factor, busbw_gbs, bytes_needed_per_rank, cap_sizes,
    effective_size, message_sizes)
from opgate.probes.nvlink import LinkSnapshot
from opgate.model.results import Outcome

DATA = Path(__file__).resolve().parents[1] / "data" / "multigpu"


def load(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def run_fixture(name: str) -> CollectiveRun:
    return CollectiveRun.from_dict(load(name))


def links(name: str) -> LinkSnapshot:
    return LinkSnapshot.from_dict(load(name))


@pytest.mark.parametrize(("op", "ranks", "factor"), [
    ("all_reduce", 2, 1.0), ("all_reduce", 8, 1.75), ("all_gather", 4, 0.75), ("reduce_scatter", 8, 0.875),
    ("broadcast", 8, 1.0), ("all_reduce", 1, 0.0)])
def test_bus_factor_is_nccl_tests_definition(op: str, ranks: int, factor: float) -> None:
    assert bus_factor(op, ranks) == pytest.approx(factor)


def test_bandwidths_from_size_and_time() -> None:
    assert algbw_gbs(4 << 30, 0.02) == pytest.approx(214.748, rel=1e-4)
    assert busbw_gbs("all_reduce", 4 << 30, 0.02, 8) == pytest.approx(214.748 * 1.75, rel=1e-4)
    with pytest.raises(ValueError):
        algbw_gbs(8, 0.0)
    with pytest.raises(ValueError):
        bus_factor("all_to_all", 4)


def test_sweep_is_8_bytes_to_4_gib_doubling_and_capped_by_free_memory() -> None:
    sizes = message_sizes()
    assert sizes[0] == 8 and sizes[-1] == MAX_BYTES == 4 << 30 and len(sizes) == 30
    assert all(b == 2 * a for a, b in zip(sizes, sizes[1:]))
    kept, cap = cap_sizes(sizes, free_bytes=10 << 30, ranks=8, fraction=0.4)
    assert cap == int((10 << 30) * 0.4)
    assert kept[-1] == 2 << 30  # all-gather at 4 GiB needs 4.5 GiB > 4 GiB budget; 2 GiB needs 2.25
    assert bytes_needed_per_rank("all_gather", 2 << 30, 8) == (2 << 30) + (2 << 30) // 8


def test_sizes_round_to_whole_elements_per_rank() -> None:
    assert effective_size("all_gather", 8, 8) == 32  # one float per rank at least
    assert effective_size("reduce_scatter", 1 << 20, 3) == (1 << 20) // 12 * 12
    assert effective_size("all_reduce", 10, 4) == 8


def test_config_refuses_one_rank_and_unknown_ops() -> None:
    with pytest.raises(ValueError, match="2 or more"):
        CollectiveConfig("nccl", 1)
    with pytest.raises(ValueError, match="unknown collective"):
        CollectiveConfig("gloo", 2, ops=("alltoall",))


def test_recorded_gloo_run_round_trips_and_names_the_planted_straggler() -> None:
    data = load("gloo_3ranks_cpu_recorded.json")
    run = CollectiveRun.from_dict(data)
    assert CollectiveRun.from_dict(json.loads(json.dumps(run.to_dict()))) == run
    assert run.straggler is not None and run.straggler.slowest_rank == 2  # rank 2 slept 5 ms per iteration
    assert run.env["NCCL_NVLS_ENABLE"] == "0"
    for row in run.results:
        assert row.busbw_gbs == pytest.approx(row.algbw_gbs * bus_factor(row.op, 3))
        assert row.correct
    assert "slowest rank 2" in render_sweep(run)


def test_link_reference_nvswitch_h200() -> None:
    ref = link_reference(links("links_h200x8_nvswitch.json"))
    assert ref.topology == "nvlink" and ref.per_direction_gbs == 450.0 and not ref.findings
    assert "hopper" in ref.source.lower() or "nvidia" in ref.source.lower()
    model = nvlink_model("h200")
    assert model is not None and model.links == 18 and model.generation == 4


def test_link_reference_names_links_down() -> None:
    ref = link_reference(links("links_h200x4_two_links_down.json"))
    assert ref.per_direction_gbs == 400.0  # the fewest links of any GPU: 16 x 25
    assert ref.findings == ("GPU2 has 16 of its 18 NVLinks active",)


def test_link_reference_pcie_uses_the_slowest_gpu() -> None:
    ref = link_reference(links("links_l40s_x4_pcie_one_narrow.json"))
    assert ref.topology == "pcie"
    assert ref.per_direction_gbs == pytest.approx(16 * 8 * 0.9846153846 / 8 * 1.0, rel=1e-6)  # Gen4 x8
    assert any("GPU3" in f for f in ref.findings)


def test_handwritten_h200x8_passes_with_its_figures_sourced() -> None:
    run = run_fixture("nccl_h200x8_handwritten.json")
    verdict = judge_collectives(run, link_reference(links("links_h200x8_nvswitch.json")))
    assert verdict.outcome == Outcome.PASSED, verdict.reason
    figures = {f.name: f for f in verdict.figures}
    busbw = figures["all_reduce busbw at 4 GiB"]
    assert busbw.unit == "GB/s" and busbw.value == pytest.approx(360.0, rel=0.01)
    assert busbw.threshold is not None and busbw.threshold.value == pytest.approx(0.6 * 450)
    assert "Architecture whitepaper" in busbw.threshold.source and "docs/multigpu.md" in busbw.threshold.source
    assert figures["slowest rank (entered the probe's all-reduces last, on average)"].value == 5
    assert figures["all_reduce latency at 8 B"].threshold is not None


def test_low_busbw_fails_against_the_nvlink_band() -> None:
    data = load("nccl_h200x8_handwritten.json")
    run = CollectiveRun.from_dict(data)
    slow = dataclasses.replace(run, results=tuple(
        dataclasses.replace(r, busbw_gbs=r.busbw_gbs / 4) if r.op == "all_gather" else r for r in run.results))
    verdict = judge_collectives(slow, link_reference(links("links_h200x8_nvswitch.json")))
    assert verdict.outcome == Outcome.FAILED and "all_gather 87 (19%)" in verdict.reason


def test_capped_sweep_is_not_judged_on_bandwidth() -> None:
    run = run_fixture("nccl_h200x8_handwritten.json")
    small = dataclasses.replace(run, results=tuple(r for r in run.results if r.size_bytes < MIN_JUDGED_BYTES),
                                size_cap_bytes=100 << 20)
    verdict = judge_collectives(small, link_reference(links("links_h200x8_nvswitch.json")))
    assert verdict.outcome == Outcome.WARNED
    assert "not judged" in verdict.reason and "capped at 1 MiB by free memory" in verdict.reason


def test_wrong_result_fails_and_straggler_warns() -> None:
    run = run_fixture("nccl_h200x8_handwritten.json")
    wrong = dataclasses.replace(run, results=tuple(dataclasses.replace(r, correct=r.op != "broadcast")
                                                   for r in run.results))
    assert judge_collectives(wrong, link_reference(links("links_h200x8_nvswitch.json"))).outcome == Outcome.FAILED
    assert run.straggler is not None
    late = dataclasses.replace(run, straggler=dataclasses.replace(
        run.straggler, mean_lag_us=tuple(900.0 if i == 5 else 1.0 for i in range(8))))
    verdict = judge_collectives(late, link_reference(links("links_h200x8_nvswitch.json")))
    assert verdict.outcome == Outcome.WARNED and "rank 5 (cuda:5 (NVIDIA H200)) is a straggler" in verdict.reason
    jitter = dataclasses.replace(late, straggler=dataclasses.replace(
        late.straggler, last_counts=(2, 2, 2, 1, 2, 1, 1, 1)))  # late on average, but last only once in 12
    assert judge_collectives(jitter, link_reference(links("links_h200x8_nvswitch.json"))).outcome == Outcome.PASSED


def test_links_down_warn_even_with_good_bandwidth() -> None:
    run = run_fixture("nccl_h200x8_handwritten.json")
    verdict = judge_collectives(run, link_reference(links("links_h200x4_two_links_down.json")))
    assert verdict.outcome == Outcome.WARNED and "GPU2 has 16 of its 18 NVLinks active" in verdict.reason


def test_bands_cite_their_sources() -> None:
    for metric, topology in (("busbw_over_link", "nvlink"), ("busbw_over_link", "pcie"),
                             ("small_allreduce_latency_us", "nvlink"), ("straggler_lag_us", "pcie")):
        band = collective_band(metric, topology)
        assert "docs/multigpu.md" in band.source and band.uncertain
    with pytest.raises(KeyError):
        collective_band("no_such_metric", "nvlink")
