"""verify/check_seconds.py: each numerics check's seconds kept for the next run, which starts the longest of its
ready checks first (runner._arrival_position); what that saves is replayed from GPU runs' timelines
(benchmarks/numerics_queue_replay.py --history), not timed here."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from opgate.engine import runner
from opgate.engine.runner import CheckTask
from opgate.model.results import CheckResult, Outcome
from opgate.verify import check_seconds

ROOT = Path(__file__).resolve().parents[2]
SOFTMAX = ROOT / "examples" / "ops" / "softmax.py"
GPU = check_seconds.scope("standard", True)


def _result(check_id: str, seconds: float, outcome: Outcome = Outcome.PASSED, stage: str = "numerics") -> CheckResult:
    return CheckResult(check_id, check_id, outcome, "", duration_s=seconds, stage=stage)


def test_the_seconds_of_checks_that_judged_are_kept_by_scope_and_merged(tmp_path: Path) -> None:
    path = tmp_path / "cache" / check_seconds.FILE
    results = [_result("verify.a.t.float32", 12.5), _result("verify.b.t.float32", 3.0, Outcome.FAILED),
               _result("verify.c.t.float32", 9.0, Outcome.ERROR), _result("verify.d.t.float32", 9.0, Outcome.SKIPPED),
               _result("verify.a.runtime", 2.0, stage="runtime")]
    assert check_seconds.record(results, GPU, path) == 2
    assert check_seconds.record([_result("verify.a.t.float32", 40.0)], check_seconds.scope("quick", False), path) == 1
    assert check_seconds.record([_result("verify.b.t.float32", 4.0)], GPU, path) == 1  # the latest wins
    assert check_seconds.load(path) == {f"{GPU} verify.a.t.float32": 12.5, f"{GPU} verify.b.t.float32": 4.0,
                                        "quick:cpu verify.a.t.float32": 40.0}
    expected = check_seconds.Expectations(check_seconds.load(path), GPU)
    assert expected.of("verify.a.t.float32") == 12.5
    assert expected.of("verify.new.t.float32") == pytest.approx(8.25)  # not seen before: the median of the known
    assert expected.summary() == {"by": "earlier runs' seconds, longest first", "known": 1,
                                  "unknown_given_the_median": 1, "median_s": 8.25}


def test_without_a_readable_history_nothing_is_expected_and_nothing_breaks(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / check_seconds.FILE
    for body in ("{not json", json.dumps({"format": 99, "seconds": {"x": 1}}), json.dumps([1, 2])):
        path.write_text(body)
        assert check_seconds.load(path) == {}
    expected = check_seconds.Expectations({}, GPU)
    assert expected.of("verify.a.t.float32") is None
    assert expected.summary()["by"].startswith("plan written")
    monkeypatch.setenv("OPGATE_CACHE", "0")  # the cache off: nothing read, nothing kept
    assert check_seconds.load() == {} and check_seconds.record([_result("verify.a.t.float32", 1.0)], GPU) == 0
    blocked = tmp_path / "file-not-folder"
    blocked.write_text("")
    assert check_seconds.record([_result("verify.a.t.float32", 1.0)], GPU, blocked / check_seconds.FILE) == 0


def _task(name: str, order: int = 40, expected: float | None = None, worker: str = "") -> CheckTask:
    return CheckTask(check_id=name, title=name, target="t:T", timeout_s=1.0, order=order, expected_s=expected,
                     worker=worker)


def _queue(tasks: list[CheckTask]) -> list[str]:
    pending: list[tuple[int, CheckTask]] = []
    for k, task in enumerate(tasks):
        pending.insert(runner._arrival_position(pending, task), (k, task))
    return [task.check_id for _, task in pending]


def test_an_arriving_check_queues_before_those_of_its_order_expected_to_take_less() -> None:
    assert _queue([_task("later", 41), _task("a", expected=5.0), _task("b", expected=60.0), _task("c", expected=5.0),
                   _task("d", expected=20.0)]) == ["b", "d", "a", "c", "later"]
    # without expectations (a first run): first come, first served within an order, as before
    assert _queue([_task("later", 41), _task("a"), _task("b"), _task("first", 39)]) == ["first", "a", "b", "later"]


def test_a_long_head_keeps_its_place_against_the_idle_worker_lookahead(tmp_path: Path) -> None:
    """The calibrator hands a check expected to take LONG_CHECK_S or more over `ranked`, and the runner's lookahead
    keeps a ranked head where it would take a later task with an idle worker of its key."""
    from opgate.engine.runner import TaskFeed
    from opgate.verify.calibrator import Calibrator

    history = {f"{GPU} long": check_seconds.LONG_CHECK_S, f"{GPU} short": 5.0}
    calibrator = Calibrator([], [], {}, TaskFeed(upcoming_order=40), "standard", 0, tmp_path, None, {},
                            expectations=check_seconds.Expectations(history, GPU))

    def pick(head_id: str) -> str:
        head = calibrator._expected(dataclasses.replace(_task(head_id, worker="gems"), stage="numerics"))
        pending = [(0, head), (1, _task("later", worker="fla"))]
        return pending[runner._with_idle_worker(pending, 0, {"fla"}, lambda task: True)][1].check_id

    assert pick("long") == "long"
    assert pick("short") == "later" and pick("not-seen") == "later"  # not seen: the median, 17.5 s


def test_a_run_keeps_its_seconds_and_the_next_orders_by_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two CPU runs of softmax's numerics: the first keeps each check's seconds, the second (verdicts not reused)
    hands its checks over with them; a replay keeps none."""
    from opgate.cli.main import make_console
    from opgate.verify.engine import VerifyRequest, run_verify

    monkeypatch.setenv("OPGATE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("OPGATE_VERDICT_CACHE", "0")
    request = VerifyRequest(spec_file=SOFTMAX, budget="quick", stages=("numerics",), jobs=2, impls=("torch",),
                            dtypes=("float32",), out_dir=tmp_path / "out")
    first = run_verify(request, make_console())
    assert first.extra["engine"]["numerics_order"]["by"].startswith("plan written")
    kept = check_seconds.load(tmp_path / "cache" / check_seconds.FILE)
    numerics = [r.check_id for r in first.results if r.stage == "numerics"]
    assert numerics and sorted(kept) == sorted(f"quick:cpu {check}" for check in numerics)
    second = run_verify(request, make_console())
    assert second.extra["engine"]["numerics_order"] == {
        "by": "earlier runs' seconds, longest first", "known": len(numerics), "unknown_given_the_median": 0,
        "median_s": pytest.approx(check_seconds.Expectations(kept, "quick:cpu").prior, abs=1e-3)}


def test_a_replay_keeps_no_seconds_and_a_run_keeps_them_in_its_scope(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A replay runs one case: its check's seconds would say nothing of the whole check."""
    from opgate.model.results import RunReport
    from opgate.verify.engine import _keep_check_seconds

    monkeypatch.setenv("OPGATE_CACHE_DIR", str(tmp_path))
    results = (_result("verify.a.t.float32", 12.5),)
    _keep_check_seconds(RunReport("verify", results, "", 1.0, extra={"replay": "ogv1.x", "budget": "quick"}))
    assert check_seconds.load() == {}
    _keep_check_seconds(RunReport("verify", results, "", 1.0, extra={"replay": None, "budget": "quick", "gpu": True}))
    assert check_seconds.load() == {"quick:gpu verify.a.t.float32": 12.5}


WARM = "verify.op.t.float32.runtime_warm_up"


def _warm_up(name: str) -> CheckTask:
    """A runtime warm-up task as the runtime stage makes it (named by its target)."""
    from opgate.verify.resume import WARM_UP_TARGET

    return dataclasses.replace(_task(name, order=42), target=WARM_UP_TARGET)


def test_the_warm_ups_seconds_come_from_the_timeline_and_are_expected_apart(tmp_path: Path) -> None:
    """A runtime warm-up reports no result: its seconds are its span in the report's timeline, kept beside the
    numerics checks' and guessed with the median of the warm-ups' own."""
    path = tmp_path / check_seconds.FILE
    timeline = {WARM: [1.0, 41.0], "verify.op.grad.t.float32.runtime_warm_up": [41.0, 43.5],
                "verify.cut.t.float32.runtime_warm_up": [50.0],  # still running at the stop: no end, not kept
                "verify.op.t.float32.runtime": [60.0, 61.0]}  # a measurement: not ordered by this
    assert check_seconds.record([_result("verify.op.t.float32", 12.5)], GPU, path, timeline=timeline) == 3
    history = check_seconds.load(path)
    assert history == {f"{GPU} verify.op.t.float32": 12.5, f"{GPU} {WARM}": 40.0,
                       f"{GPU} verify.op.grad.t.float32.runtime_warm_up": 2.5}
    warm_ups = check_seconds.Expectations(history, GPU, warm_ups=True)
    assert warm_ups.of(WARM) == 40.0 and warm_ups.of("verify.new.t.float32.runtime_warm_up") == pytest.approx(21.25)
    numerics = check_seconds.Expectations(history, GPU)
    assert numerics.of("verify.new.t.float32") == 12.5  # the numerics' median, not the warm-ups'
    long = warm_ups.applied(_warm_up(WARM))
    assert long.expected_s == 40.0 and long.ranked  # LONG_CHECK_S or more keeps its place
    assert not warm_ups.applied(_warm_up("verify.op.grad.t.float32.runtime_warm_up")).ranked
    other = dataclasses.replace(_task("verify.op.t.float32"), stage="numerics")
    assert warm_ups.applied(other) is other and numerics.applied(_warm_up(WARM)).expected_s is None  # not its kind
    unchanged = _warm_up(WARM)
    assert check_seconds.Expectations({}, GPU, warm_ups=True).applied(unchanged) is unchanged
    assert check_seconds.Expectations({}, GPU, warm_ups=True).summary() == {
        "by": "queued as planned (no earlier run's seconds)"}


def test_the_tasks_queued_at_the_start_go_longest_expected_first_within_their_order() -> None:
    """verify.engine.queued: by stage order, then the longest expected warm-up first; without expectations the
    operators' order, as before."""
    from opgate.verify.engine import queued

    keyed = [((42, 0, 0), _task("w0", 42, 3.0)), ((42, 1, 1), _task("w1", 42, 40.0)), ((30, 2, 2), _task("s", 30)),
             ((42, 2, 3), _task("w2", 42, 9.0)), ((50, 0, 4), _task("m", 50))]
    assert [t.check_id for t in queued(keyed)] == ["s", "w1", "w2", "w0", "m"]
    plain = [((42, k, k), _task(f"w{k}", 42)) for k in (2, 0, 1)]
    assert [t.check_id for t in queued(plain)] == ["w0", "w1", "w2"]


def test_a_short_warm_up_that_a_long_one_starts_after_is_queued_by_their_chain() -> None:
    """A gradient twin's warm-up starts after its operator's own (CheckTask.after): the short forward one is weighed
    with its long gradient's seconds (check_seconds.chained_seconds), so it goes before a warm-up longer than itself
    but shorter than the two, and both of the chain are ranked; a task none waits for keeps its own seconds."""
    from opgate.verify.engine import queued

    forward = _task("f", 42, 3.0)
    gradient = dataclasses.replace(_task("g", 42, 32.0), after=("f",))
    other = _task("w", 42, 20.0)
    keyed = [((42, 0, 0), other), ((42, 1, 1), gradient), ((42, 2, 2), forward)]
    assert check_seconds.chained_seconds(t for _, t in keyed) == {"w": 20.0, "g": 32.0, "f": 35.0}
    assert [(t.check_id, t.ranked) for t in queued(keyed)] == [("f", True), ("g", True), ("w", False)]
    unknown = [((42, 0, 0), _task("g0", 42)), ((42, 1, 1), dataclasses.replace(_task("g1", 42), after=("g0",)))]
    assert [(t.check_id, t.ranked) for t in queued(unknown)] == [("g0", False), ("g1", False)]


def test_a_gpu_run_queues_its_warm_ups_by_the_seconds_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """prepare_run on a host taken for a GPU one: the runtime stage's warm-ups (ids ending WARM_UP_SUFFIX) come
    queued longest first by the history, the long one ranked, and the report says how; without a history, in the
    dtypes' order."""
    from opgate.verify import builtin_stages, engine

    monkeypatch.setattr(engine, "_gpu_present", lambda: True)
    monkeypatch.setattr(builtin_stages.SanitizerStage, "find_tool", lambda self, tool: "/bin/true")
    monkeypatch.setenv("OPGATE_CACHE_DIR", str(tmp_path / "cache"))
    gelu = ROOT / "examples" / "ops" / "gelu.py"
    request = engine.VerifyRequest(spec_file=gelu, impls=("triton",), stages=("numerics", "runtime"))

    def warm_ups() -> tuple[list[CheckTask], dict]:
        prepared = engine.prepare_run(request, tmp_path / "work")
        queued = [t for t in prepared.tasks if t.check_id.endswith(check_seconds.WARM_UP_SUFFIX)]
        return queued, prepared.info["engine"]["warm_up_order"]

    first, order = warm_ups()
    assert [t.check_id.split(".")[3] for t in first] == ["float32", "float16", "bfloat16"]
    assert order == {"by": "queued as planned (no earlier run's seconds)"}
    timeline = {t.check_id: [0.0, seconds] for t, seconds in zip(first, (3.0, 45.0))}  # bfloat16's not seen
    check_seconds.record([], check_seconds.scope("standard", True), timeline=timeline)
    again, order = warm_ups()
    assert [(t.check_id.split(".")[3], t.expected_s, t.ranked) for t in again] == [
        ("float16", 45.0, True), ("bfloat16", 24.0, False), ("float32", 3.0, False)]  # not seen: the median
    assert order == {"by": "earlier runs' seconds, longest first", "known": 2, "unknown_given_the_median": 1,
                     "median_s": 24.0}


def test_a_gpu_run_queues_a_short_forward_warm_up_before_the_long_gradient_one_that_waits_for_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """prepare_run on a host taken for a GPU one, with a history: layer_norm's own warm-up is short and its gradient
    twin's (which starts after it) long, so the two go first, before cross-entropy's, and both are ranked."""
    from opgate.verify import builtin_stages, engine

    monkeypatch.setattr(engine, "_gpu_present", lambda: True)
    monkeypatch.setattr(builtin_stages.SanitizerStage, "find_tool", lambda self, tool: "/bin/true")
    monkeypatch.setenv("OPGATE_CACHE_DIR", str(tmp_path / "cache"))
    spec = ROOT / "tests" / "data" / "verify" / "gradients_spec.py"
    request = engine.VerifyRequest(spec_file=spec, impls=("triton",), stages=("numerics", "runtime"),
                                   dtypes=("float32",))

    def warm_ups() -> list[CheckTask]:
        prepared = engine.prepare_run(request, tmp_path / "work")
        return [t for t in prepared.tasks if t.check_id.endswith(check_seconds.WARM_UP_SUFFIX)]

    operator = {t.check_id: t.check_id.split(".triton.")[0].removeprefix("verify.") for t in warm_ups()}
    assert sorted(operator.values()) == ["cross_entropy", "cross_entropy.grad", "layer_norm", "layer_norm.grad"]
    seconds = {"cross_entropy": 25.0, "cross_entropy.grad": 3.0, "layer_norm": 2.0, "layer_norm.grad": 40.0}
    check_seconds.record([], GPU, timeline={check_id: [0.0, seconds[op]] for check_id, op in operator.items()})
    assert [(operator[t.check_id], t.ranked) for t in warm_ups()] == [
        ("layer_norm", True), ("layer_norm.grad", True), ("cross_entropy", False), ("cross_entropy.grad", False)]
