"""Why a CUDA graph replay differs from eager, judged from recorded facts (CPU): the racy kernel is
nondeterministic, the CuPy kernel on the legacy default stream runs outside the capturing stream, and only what
neither explains is "depends on state a graph freezes". The fact collectors run on CPU tensors too."""

from __future__ import annotations

import math

import pytest
import torch

from opgate.gpu.judge.graphs import (
    FROZEN_STATE, NONDETERMINISTIC, OUTSIDE_CAPTURE, GraphMismatchFacts, graph_mismatch_cause,
)
from opgate.gpu.probes.graphs import GraphCaptureReport, max_spread, poison_, poisoned_left


def facts(**kw: object) -> GraphMismatchFacts:
    base = dict(replay_diff=2.5, tolerance=1e-6, eager_calls=4, eager_spread=0.0, replays=3, replay_spread=0.0,
                unwritten=0, elements=65536)
    return GraphMismatchFacts(**{**base, **kw})  # type: ignore[arg-type]


def test_a_result_that_differs_from_itself_is_nondeterministic_whatever_else_was_seen() -> None:
    """A racy kernel (H200 run of the issue): eager calls on the same inputs differ; the graph is not to blame."""
    cause = graph_mismatch_cause(facts(eager_spread=0.75, unwritten=12))
    assert cause.kind == NONDETERMINISTIC and cause.failure_class == ""
    assert "nondeterministic (a race or unordered atomics): 4 eager calls on the same inputs differ by up to 0.75" \
        in cause.cause
    assert "racecheck" in cause.remedy
    replays_only = graph_mismatch_cause(facts(replay_spread=0.5))
    assert replays_only.kind == NONDETERMINISTIC and "3 replays on the same inputs differ by up to 0.5" in \
        replays_only.cause


def test_rounding_level_spread_within_the_tolerance_is_not_called_nondeterministic() -> None:
    assert graph_mismatch_cause(facts(eager_spread=1e-7)).kind == FROZEN_STATE


def test_a_replay_that_writes_nothing_runs_outside_the_capturing_stream_class_stream() -> None:
    """CuPy's legacy default stream: the kernel ran eagerly at capture time, the graph holds none of it."""
    cause = graph_mismatch_cause(facts(unwritten=65536))
    assert cause.kind == OUTSIDE_CAPTURE and cause.failure_class == "stream"
    assert cause.cause.startswith("its work runs outside the capturing stream (e.g. the legacy default stream")
    assert "wrote none of them" in cause.cause
    assert "cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)" in cause.remedy
    part = graph_mismatch_cause(facts(unwritten=1024))
    assert part.kind == OUTSIDE_CAPTURE and "part of its work" in part.cause and "1024 of 65536" in part.cause


def test_a_result_cache_is_frozen_state_even_though_the_graph_holds_no_work() -> None:
    cause = graph_mismatch_cause(facts(unwritten=65536, eager_reuses_outputs=True))
    assert cause.kind == FROZEN_STATE and "result cache" in cause.cause and cause.failure_class == ""


def test_only_what_nothing_else_explains_depends_on_frozen_state() -> None:
    cause = graph_mismatch_cause(facts())
    assert cause.kind == FROZEN_STATE
    assert cause.cause.startswith("the implementation depends on state a graph freezes (host-side values, pointers, "
                                  "a cache) (4 eager calls agree, a replay writes every output")
    unmeasured = graph_mismatch_cause(GraphMismatchFacts(replay_diff=1.0, tolerance=1e-6))
    assert unmeasured.kind == FROZEN_STATE and "(" not in unmeasured.cause.split("cache)")[1]


def test_spread_is_zero_for_identical_runs_and_inf_when_nan_positions_differ() -> None:
    a = torch.tensor([1.0, float("nan"), float("inf"), -2.0])
    assert max_spread([[a], [a.clone()], [a.clone()]]) == 0.0
    b = a.clone()
    b[3] = -2.5
    assert max_spread([[a], [a.clone()], [b]]) == pytest.approx(0.5)
    c = a.clone()
    c[0] = float("nan")
    assert math.isinf(max_spread([[a], [c]]))
    ints = torch.tensor([1, 2, 3])
    assert max_spread([[ints], [torch.tensor([1, 2, 7])]]) == 4.0


def test_a_replay_into_poison_counts_what_it_left_unwritten_but_not_nan_eager_computes_too() -> None:
    out = torch.zeros(6)
    ints = torch.zeros(4, dtype=torch.int32)
    poison_([out, ints])
    assert bool(out.isnan().all()) and bool((ints == torch.iinfo(torch.int32).max).all())
    out[:3] = 1.0
    expected = torch.tensor([1.0, 1.0, 1.0, 2.0, float("nan"), 2.0])
    ints[:2] = 5
    assert poisoned_left([out, ints], [expected, torch.full((4,), 5, dtype=torch.int32)]) == (2 + 2, 10)


def test_the_runtime_check_turns_the_probe_report_into_the_measured_cause() -> None:
    from opgate.verify.runtime import graph_mismatch

    report = GraphCaptureReport(True, matches_eager=False, max_abs_diff=3.0, tolerance=1e-6, eager_calls=4,
                                eager_spread=0.0, replays=3, replay_spread=0.0, unwritten=100, elements=100)
    assert graph_mismatch(report).kind == OUTSIDE_CAPTURE
    racy = GraphCaptureReport(True, matches_eager=False, max_abs_diff=3.0, tolerance=1e-6, eager_calls=4,
                              eager_spread=2.0, replays=3, replay_spread=1.0, unwritten=0, elements=100)
    assert graph_mismatch(racy).kind == NONDETERMINISTIC


def test_atomics_that_differ_only_in_the_last_digits_are_not_a_fault():
    """A correct float32 atomicAdd row sum on the H200 (scripts/gpu/stream_faults_spec.py): eager calls differ by
    2.8e-4 on outputs of ~200, the replay by 2.9e-4; a racy twin differs by 7 (measured 2026-12-02)."""
    from opgate.gpu.judge.graphs import NONDETERMINISTIC, ROUNDING_ORDER, GraphMismatchFacts, graph_mismatch_cause

    scale = 200.0
    atomic = GraphMismatchFacts(replay_diff=2.9e-4, tolerance=1e-6 * scale, eager_calls=4, eager_spread=2.75e-4,
                                replays=3, replay_spread=2.29e-4, unwritten=0, elements=64, rounding=1e-4 * scale)
    assert graph_mismatch_cause(atomic).kind == ROUNDING_ORDER
    racy = GraphMismatchFacts(replay_diff=5.09, tolerance=1e-6 * scale, eager_calls=4, eager_spread=7.01,
                              replays=3, replay_spread=6.02, unwritten=0, elements=64, rounding=1e-4 * scale)
    assert graph_mismatch_cause(racy).kind == NONDETERMINISTIC
