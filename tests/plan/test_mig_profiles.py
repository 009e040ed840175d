"""The MIG profile table against NVIDIA's published figures, and the layouts the placement rules allow."""

from __future__ import annotations

from collections import Counter

import pytest

from opgate.model.errors import InputError
from opgate.plan.legality import check_gpu
from opgate.plan.mig_solver import legal_layouts
from opgate.plan.profiles import mig_models, slicing_for


def test_published_a100_40gb_rows() -> None:
    a100 = slicing_for("a100-40gb")
    expected = {  # MIG User Guide, Supported MIG Profiles: (compute slices, instances, copy engines, memory GB)
        "1g.5gb": (1, 7, 1, 5), "1g.5gb+me": (1, 1, 1, 5), "1g.10gb": (1, 4, 1, 10), "2g.10gb": (2, 3, 2, 10),
        "3g.20gb": (3, 2, 3, 20), "4g.20gb": (4, 1, 4, 20), "7g.40gb": (7, 1, 7, 40),
    }
    assert {p.name for p in a100.profiles} == set(expected)
    for name, (slices, instances, engines, memory) in expected.items():
        profile = a100.profile(name)
        assert (profile.compute_slices, profile.max_instances, profile.copy_engines, profile.memory_gb) == (
            slices, instances, engines, memory)
    # `nvidia-smi mig -lgipp` on an A100 (MIG User Guide, Getting Started)
    assert a100.profile("3g.20gb").starts == (0, 4) and a100.profile("7g.40gb").starts == (0,)
    assert not a100.profile("1g.5gb").placement_uncertain


@pytest.mark.parametrize("model,count", [("a30-24gb", 5), ("a100-40gb", 7), ("a100-80gb", 7), ("h100-80gb", 7),
                                         ("h200-141gb", 7), ("b200-180gb", 7)])
def test_every_model_has_its_profiles_and_limits(model: str, count: int) -> None:
    slicing = mig_models()[model]
    assert len(slicing.profiles) == count
    assert slicing.max_instances == (4 if model.startswith("a30") else 7)
    full = max(slicing.profiles, key=lambda p: p.compute_slices)
    assert full.compute_slices == slicing.compute_slices and full.memory_slices == slicing.memory_slots
    assert all(p.source.startswith("NVIDIA MIG User Guide") for p in slicing.profiles)


def test_catalogue_names_resolve_and_non_mig_gpus_are_whole() -> None:
    assert slicing_for("h100").key == "h100-80gb" and slicing_for("H200").key == "h200-141gb"
    l4 = slicing_for("l4")
    assert not l4.mig_capable and l4.memory_gb == 24
    with pytest.raises(InputError, match="MIG profile"):
        slicing_for("a100").profile("5g.50gb")


def _profile_counts(layout) -> Counter:
    return Counter(profile for profile, _ in layout)


def test_known_combinations_are_enumerated_and_legal() -> None:
    layouts = [_profile_counts(l) for l in legal_layouts(slicing_for("a100-40gb"))]
    for combo in ({"1g.5gb": 7}, {"2g.10gb": 3, "1g.5gb": 1}, {"3g.20gb": 2}, {"4g.20gb": 1, "3g.20gb": 1},
                  {"7g.40gb": 1}, {"1g.10gb": 4}):
        assert any(all(c[p] >= n for p, n in combo.items()) for c in layouts), combo
    for layout in legal_layouts(slicing_for("a100-40gb")):
        assert check_gpu("a100-40gb", "g", list(layout)) == []


def test_a30_layouts() -> None:
    layouts = {tuple(sorted(_profile_counts(l).items())) for l in legal_layouts(slicing_for("a30"))}
    assert (("4g.24gb", 1),) in layouts
    assert any(dict(l).get("1g.6gb", 0) == 4 for l in layouts)
    assert all(sum(n for _, n in l) <= 4 for l in layouts)


@pytest.mark.parametrize("layout,rule", [
    ([("1g.5gb", s) for s in range(7)] + [("1g.5gb", 6)], "overlap"),
    ([("3g.20gb", 2)], "illegal start"),
    ([("1g.5gb+me", 0), ("1g.5gb+me", 1)], "too many instances"),
    ([("4g.20gb", 0), ("4g.20gb", 4)], "illegal start"),
    ([("7g.40gb", 0), ("1g.5gb", 0)], "overlap"),
    ([("5g.30gb", 0)], "unknown profile"),
    ([("1g.5gb", 0)] * 8, "too many instances"),
])
def test_checker_rejects_illegal_layouts(layout, rule: str) -> None:
    assert rule in {v.rule for v in check_gpu("a100-40gb", "g", layout)}


def test_checker_accepts_4g_plus_3g_and_3x2g_plus_1g10() -> None:
    assert check_gpu("a100-40gb", "g", [("2g.10gb", 0), ("2g.10gb", 2), ("2g.10gb", 4), ("1g.10gb", 6)]) == []
    # 4g at 0 and 3g at 4: legal since R510 (MIG User Guide)
    assert check_gpu("a100-40gb", "g", [("4g.20gb", 0), ("3g.20gb", 4)]) == []
