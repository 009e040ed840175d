"""Contention judgement on hand-written figures (tests/data/multigpu/contention_4gpu_shared_switch.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opgate.gpu.judge.contention import combine_contention, judge_contention
from opgate.gpu.probes.contention import ContentionFigures
from opgate.gpu.judge.references import policy_band
from opgate.model.results import Outcome

DATA = Path(__file__).resolve().parents[1] / "data" / "multigpu"
SHARE = policy_band("contention_vs_alone", None)
SPREAD = policy_band("host_contention_spread", None)


def measurements() -> list[ContentionFigures]:
    data = json.loads((DATA / "contention_4gpu_shared_switch.json").read_text())
    return [ContentionFigures.from_dict(m) for m in data["measurements"]]


def test_gpus_behind_a_shared_switch_are_named() -> None:
    d2h, p2p = measurements()
    verdict = judge_contention(d2h, SHARE, SPREAD)
    assert verdict.worst == "3" and verdict.worst_share == pytest.approx(23.5 / 53.1)
    assert verdict.spread == pytest.approx((50.0 - 23.5) / 50.0)
    assert verdict.outcome == Outcome.FAILED  # 44% share is a warn, 53% spread is past the 50% fail line
    assert "worst GPU3 kept 44% of its 53.1 GB/s alone" in verdict.text
    names = {f.name: f for f in verdict.figures}
    assert names["GPU3 D2H together"].value == 23.5 and names["GPU3 D2H together"].unit == "GB/s"
    assert names["D2H, every GPU at once: spread (max-min)/max"].threshold is not None
    pairs = judge_contention(p2p, SHARE, SPREAD)
    assert pairs.outcome == Outcome.PASSED and pairs.worst == "0->1"
    assert "GPU0->GPU1" in pairs.text
    outcome, reason, figures = combine_contention([verdict, pairs])
    assert outcome == Outcome.FAILED and reason.count(";") == 1 and len(figures) == len(verdict.figures) + len(
        pairs.figures)


def test_round_trip_and_refuses_disjoint_keys() -> None:
    d2h, _ = measurements()
    assert ContentionFigures.from_dict(json.loads(json.dumps(d2h.to_dict()))) == d2h
    with pytest.raises(ValueError, match="no key"):
        judge_contention(ContentionFigures("H2D", {"0": 1.0}, {"1": 1.0}, 1.0, 8), SHARE, SPREAD)
