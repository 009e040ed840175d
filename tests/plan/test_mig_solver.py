"""The CP-SAT MIG planner: known-optimal small cases (brute force) and, in property tests, every emitted layout
legal under the independent checker."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opgate.model.errors import InputError
from opgate.plan.inputs import parse_fleet, parse_workloads
from opgate.plan.legality import check_plan
from opgate.plan.mig_solver import legal_layouts, plan_mig
from opgate.plan.profiles import slicing_for


def _fleet(*entries):
    return parse_fleet({"gpu": [dict(model=m, count=c, node=n) for m, c, n in entries]})


def _workloads(*entries):
    return parse_workloads({"workload": [dict(e) for e in entries]})


def brute_force_weighted(model: str, gpus: int, workloads) -> int:
    """Best priority-weighted replica count over every combination of legal layouts and assignments."""
    slicing = slicing_for(model)
    replicas = [(w.priority, w) for w in workloads for _ in range(w.replicas)]
    best = 0
    for layouts in itertools.combinations_with_replacement(legal_layouts(slicing), gpus):
        instances = [slicing.profile(p) for layout in layouts for p, _ in layout]
        # every injective choice of replicas for the instances (tiny cases only)
        for order in itertools.permutations(range(len(replicas)), min(len(replicas), len(instances))):
            total = 0
            for inst, index in zip(instances, order):
                priority, w = replicas[index]
                if inst.memory_gb >= w.memory_gb and inst.compute_slices >= w.min_compute_slices:
                    total += priority
            best = max(best, total)
    return best


@pytest.mark.parametrize("model_kind", ["exact", "pattern"])
def test_known_optimal_small_case(model_kind: str) -> None:
    # One A30 (4 slots): a 12 GB job needs a 2g.12gb, two 5 GB jobs fit 1g.6gb; a 20 GB job needs the whole 4g.
    # Best: 2g + 2 x 1g (weight 3 + 1 + 1 = 5) beats 4g (weight 4).
    fleet = _fleet(("a30", 1, "n"))
    jobs = _workloads({"name": "mid", "memory_gb": 12, "priority": 3},
                      {"name": "small", "memory_gb": 5, "replicas": 2},
                      {"name": "big", "memory_gb": 20, "priority": 4})
    plan = plan_mig(fleet, jobs, model=model_kind, time_limit_s=10)
    assert plan.stats.status == "OPTIMAL"
    assert plan.weighted_placed == 5 == brute_force_weighted("a30-24gb", 1, jobs)
    assert [u.workload for u in plan.unplaced] == ["big"]
    assert "taken" in plan.unplaced[0].reason
    assert check_plan(plan.layouts, jobs) == []


def test_seven_of_a_kind_and_what_does_not_fit() -> None:
    fleet = _fleet(("h100", 1, "n"))
    jobs = _workloads({"name": "tiny", "memory_gb": 9, "replicas": 8}, {"name": "huge", "memory_gb": 90})
    plan = plan_mig(fleet, jobs, time_limit_s=10)
    assert plan.placed_replicas == 7
    reasons = {u.workload: u.reason for u in plan.unplaced}
    assert "needs 90.0 GB" in reasons["huge"] and "largest instance has 80.0 GB" in reasons["huge"]
    assert check_plan(plan.layouts, jobs) == []


def test_throughput_decides_the_profile() -> None:
    fleet = _fleet(("a100", 1, "n"))
    jobs = _workloads({"name": "r", "memory_gb": 4, "replicas": 3, "throughput": {"1g": 10.0, "2g": 30.0},
                       "min_throughput": 25})
    plan = plan_mig(fleet, jobs, time_limit_s=10)
    assert {i.profile.split(".")[0] for l in plan.layouts for i in l.instances} == {"2g"}
    assert plan.placed_replicas == 3


def test_group_stays_on_one_node_and_off_sys_links() -> None:
    fleet = _fleet(("h100", 2, "a"), ("h100", 2, "b"))
    jobs = _workloads({"name": "enc", "memory_gb": 35, "replicas": 2, "group": "mm"},
                      {"name": "llm", "memory_gb": 70, "group": "mm"})
    # node a: GPUs 0 and 1 only talk across the CPU interconnect; node b: NVLink
    topology = {"a": {"links": [["X", "SYS"], ["SYS", "X"]], "gpu_numa": [0, 1], "nic_numa": [0]},
                "b": {"links": [["X", "NV18"], ["NV18", "X"]], "gpu_numa": [0, 0], "nic_numa": [0]}}
    plan = plan_mig(fleet, jobs, topology=topology, time_limit_s=10)
    assert plan.placed_replicas == 3
    assert {l.gpu.node for l in plan.layouts} == {"b"}
    assert check_plan(plan.layouts, jobs) == []


def test_groups_refuse_the_pattern_model() -> None:
    with pytest.raises(InputError, match="groups need the exact model"):
        plan_mig(_fleet(("h100", 1, "a")), _workloads({"name": "x", "memory_gb": 5, "group": "g"}), model="pattern")


MODELS = ["a30", "a100-40gb", "a100", "h100", "h200", "b200", "l4"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleet_spec=st.lists(st.tuples(st.sampled_from(MODELS), st.integers(1, 3)), min_size=1, max_size=3),
       jobs_spec=st.lists(st.tuples(st.sampled_from([3, 5, 9, 11, 17, 19, 23, 34, 40, 44, 70, 90, 140]),
                                    st.integers(1, 4), st.integers(1, 3), st.integers(1, 3)),
                          min_size=1, max_size=8),
       model_kind=st.sampled_from(["exact", "pattern"]))
def test_every_emitted_layout_is_legal(fleet_spec, jobs_spec, model_kind) -> None:
    fleet = _fleet(*[(m, c, f"n{i}") for i, (m, c) in enumerate(fleet_spec)])
    jobs = _workloads(*[{"name": f"w{i}", "memory_gb": mem, "replicas": r, "min_compute_slices": s, "priority": p}
                        for i, (mem, r, s, p) in enumerate(jobs_spec)])
    plan = plan_mig(fleet, jobs, model=model_kind, time_limit_s=5)
    assert check_plan(plan.layouts, jobs) == []
    assert plan.placed_replicas + sum(u.replicas for u in plan.unplaced) == plan.requested_replicas
    assert plan.weighted_placed <= plan.weighted_bound


def test_exact_and_pattern_agree_on_the_optimum() -> None:
    fleet = _fleet(("a100", 2, "n"), ("h100", 1, "m"))
    jobs = _workloads({"name": "a", "memory_gb": 9, "replicas": 9}, {"name": "b", "memory_gb": 19, "replicas": 4,
                                                                      "priority": 2},
                      {"name": "c", "memory_gb": 39, "replicas": 2, "priority": 3})
    exact = plan_mig(fleet, jobs, model="exact", time_limit_s=20)
    pattern = plan_mig(fleet, jobs, model="pattern", time_limit_s=20)
    assert exact.stats.status == pattern.stats.status == "OPTIMAL"
    assert exact.weighted_placed == pattern.weighted_placed
