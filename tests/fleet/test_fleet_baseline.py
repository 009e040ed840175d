"""Stable figure keys and the fleet baseline (median/MAD per GPU model + driver), on node reports."""

from __future__ import annotations

import math

from opgate.fleet.baseline import GpuIdentity, NodeFigures, find_outliers, robust_centre
from opgate.fleet.keys import figure_key
from opgate.fleet.node_task import NodeOutcome
from opgate.fleet.report import fleet_report, order_nodes
from opgate.model.results import CheckResult, Figure, Outcome

H200 = "NVIDIA H200"


def _key(check_id: str, name: str, **extra):
    figure = Figure(name, 4.5, "TB/s")
    return figure_key(CheckResult(check_id, check_id, Outcome.PASSED, "", (figure,), extra=extra), figure)


def test_figure_key_is_the_schema_2_key_with_the_gpu_as_a_label() -> None:
    key = _key("doctor.hbm_bandwidth", "GPU3 HBM read (opgate kernel)")
    assert (key.key, key.gpu, key.name) == ("hbm.read_bandwidth", "3", "HBM read (opgate kernel)")
    # the same key as report schema 2 writes for that figure
    from opgate.reporting.metrics import metric_for

    figure = Figure("GPU3 HBM read (opgate kernel)", 4.5, "TB/s")
    assert key.key == metric_for(CheckResult("doctor.hbm_bandwidth", "", Outcome.PASSED, "", (figure,)), figure).key
    # one GPU: the probes write no prefix; same key, host-level label
    assert _key("doctor.hbm_bandwidth", "HBM read (opgate kernel)").key == key.key
    pair = _key("doctor.p2p", "GPU0->GPU1 copy bandwidth")
    assert (pair.key, pair.gpu) == ("p2p.copy_bandwidth", "0-1")
    # a label that is not a device stays part of the identity: H2D and D2H ceilings are two figures
    h2d = _key("doctor.host_links", "GPU0 H2D ceiling at 256-byte packets")
    d2h = _key("doctor.host_links", "GPU0 D2H ceiling at 256-byte packets")
    assert h2d.key != d2h.key and h2d.key.startswith("host_links.packet_ceiling{") and h2d.gpu == "0"


def node(name: str, tbs: float, model: str = H200, driver: str = "580.159.04", gpus: int = 1) -> NodeFigures:
    figures = [Figure(f"GPU{i} HBM read (opgate kernel)", tbs if i == gpus - 1 else 4.5, "TB/s") for i in range(gpus)]
    return NodeFigures(name, tuple(GpuIdentity(i, model, driver) for i in range(gpus)),
                       (CheckResult("doctor.hbm_bandwidth", "HBM", Outcome.PASSED, "in band", tuple(figures)),))


def test_the_slow_node_of_a_fleet_is_flagged_with_its_distance_in_mads() -> None:
    fleet = [node(f"node-{i:02d}", v) for i, v in enumerate([4.53, 4.51, 4.55, 4.52, 4.54, 4.50, 4.53, 4.56])]
    fleet.append(node("node-17", 4.11, gpus=4))  # GPU3 of node-17 is slow
    outliers = find_outliers(fleet)
    assert len(outliers) == 1
    outlier = outliers[0]
    assert (outlier.sample.node, outlier.sample.gpu) == ("node-17", "3")
    assert math.isclose(outlier.median, 4.515) and outlier.group_size == 12
    sentence = outlier.sentence()
    assert sentence.startswith("node-17 GPU3 HBM read (opgate kernel) 4.11 TB/s = 9% under this fleet's median for "
                               "NVIDIA H200 (driver 580.159.04)")
    assert "MADs (modified z-score, limit 3.5)" in sentence


def test_groups_are_per_model_and_driver_so_a_different_gpu_is_not_an_outlier() -> None:
    fleet = [node(f"h{i}", 4.5 + i / 100) for i in range(4)] + [node(f"l{i}", 0.86 + i / 100, model="NVIDIA L40S")
                                                                for i in range(4)]
    assert find_outliers(fleet) == []
    # too few nodes of a kind: no verdict from two samples
    assert find_outliers([node("a", 4.5), node("b", 3.0)]) == []


def test_a_tight_group_does_not_flag_noise_below_five_percent() -> None:
    fleet = [node(f"n{i}", 4.50) for i in range(5)] + [node("n9", 4.40)]  # MAD 0, 2.2% away
    assert find_outliers(fleet) == []
    fleet.append(node("n10", 4.0))  # 11% away with MAD 0: an outlier, with an infinite z
    [outlier] = find_outliers(fleet)
    assert outlier.sample.node == "n10" and math.isinf(outlier.modified_z)


def test_robust_centre() -> None:
    assert robust_centre([1.0, 2.0, 3.0, 100.0]) == (2.5, 1.0)


def outcome(name: str, result: Outcome, seconds: float, error: str = "") -> NodeOutcome:
    report = None if error else {"results": [CheckResult("doctor.x", "x", result, "r").to_dict()]}
    return NodeOutcome(name, name, [], "", 0 if not error else -1, seconds, report, error)


def test_failed_and_error_nodes_first_then_the_slowest() -> None:
    ordered = order_nodes([outcome("fast", Outcome.PASSED, 1), outcome("slow", Outcome.PASSED, 9),
                           outcome("bad", Outcome.FAILED, 2), outcome("gone", Outcome.PASSED, 3, error="lost")])
    assert [o.node for o in ordered] == ["gone", "bad", "slow", "fast"]


def test_the_fleet_report_round_trips_and_carries_every_node() -> None:
    from opgate.model.results import RunReport

    report = fleet_report("doctor", [outcome("a", Outcome.PASSED, 1), outcome("b", Outcome.WARNED, 2)],
                          "2026-12-01T00:00:00+00:00", 3.0, False, {})
    again = RunReport.from_dict(report.to_dict())
    assert [r.check_id for r in again.results] == ["b:doctor.x", "a:doctor.x"]
    assert [n["node"] for n in again.extra["nodes"]] == ["b", "a"] and again.exit_code == 0


def test_a_node_result_keeps_its_figure_keys_in_the_fleet_report() -> None:
    """The node's name goes in front of the check id, not into its figures' keys: a figure keyed by its check
    is the node's own key in the merged report (the derivation from the renamed id gave "a:doctor.x.<name>")."""
    from opgate.reporting.metrics import metric_for

    figure = Figure("GPU0 HBM read (opgate kernel)", 4.5, "TB/s", key="hbm.read_bandwidth", labels={"gpu": "0"})
    node = NodeOutcome("a", "a", [], "", 0, 1.0, {"results": [
        CheckResult("doctor.hbm_bandwidth", "hbm", Outcome.PASSED, "r", (figure,)).to_dict()]}, "")
    [result] = fleet_report("doctor", [node], "2026-12-01T00:00:00+00:00", 1.0, False, {}).results
    metric = metric_for(result, result.figures[0])
    assert result.check_id == "a:doctor.hbm_bandwidth"
    assert (metric.key, dict(metric.labels)) == ("hbm.read_bandwidth", {"gpu": "0"})


def _verify_node(name: str, device: str, error: float) -> NodeFigures:
    figure = Figure("max abs error (all cases)", error, "")
    result = CheckResult("verify.softmax.triton.float32", "softmax", Outcome.PASSED, "", (figure,),
                         extra={"device": device, "op": "softmax"})
    return NodeFigures(name, (GpuIdentity(0, H200, "580.159.04"),), (result,))


def test_a_check_run_on_the_cpu_is_not_pooled_with_the_gpus_it_did_not_use() -> None:
    """Fleet run on the H200 host: head and cpu nodes (CUDA_VISIBLE_DEVICES="", NVML lists the H200) judged softmax
    with Triton's interpreter; pooled with the gpu node as "NVIDIA H200" they made the gpu node a false outlier."""
    fleet = [_verify_node("gpu", "cuda", 1.85e-7), _verify_node("head", "triton-interpreter (cpu)", 2.93e-7),
             _verify_node("cpu", "cpu", 2.93e-7)]
    assert find_outliers(fleet) == []
    # CPU figures are still compared with each other
    fleet += [_verify_node("cpu2", "cpu", 2.93e-7), _verify_node("cpu3", "cpu", 9.0e-7),
              _verify_node("gpu2", "cuda:0", 1.9e-7)]
    outliers = find_outliers(fleet)
    assert [o.sample.node for o in outliers] == ["cpu3"]
    assert "median for CPU (no GPU used) (2.93e-07, 4 samples)" in outliers[0].sentence()
