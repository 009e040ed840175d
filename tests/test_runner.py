from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from opgate_testing import child_pythonpath

from opgate.checks.base import CheckContext
from opgate.model.results import Outcome
from opgate.engine.runner import CheckTask, run_checks


class _Slot:
    """A running task as `_next_position` sees it (the runner's slot holds more)."""

    def __init__(self, t: CheckTask) -> None:
        self.task = t


def task(name: str, cls: str, timeout: float = 30.0) -> CheckTask:
    return CheckTask(check_id=f"planted.{name}", title=name, target=f"planted_checks:{cls}", timeout_s=timeout,
                     context=CheckContext(verb="doctor"), env={"PYTHONPATH": child_pythonpath()})


def test_runner_contains_segfault_hang_exit_and_exception_and_goes_on() -> None:
    tasks = [task("segfault", "SegfaultCheck"), task("hang", "HangCheck", timeout=1.5),
             task("exit", "ExitCheck"), task("raises", "RaisingCheck"), task("passing", "PassingCheck")]
    started = time.perf_counter()
    results = {r.check_id: r for r in run_checks(tasks, jobs=2)}
    assert time.perf_counter() - started < 30
    assert [r for r in results] == [t.check_id for t in tasks]
    assert results["planted.segfault"].outcome is Outcome.ERROR
    assert "SIGSEGV" in results["planted.segfault"].reason
    assert results["planted.hang"].outcome is Outcome.ERROR
    assert "timed out after 1.5 s" in results["planted.hang"].reason
    assert results["planted.exit"].outcome is Outcome.ERROR
    assert "exited with code 7" in results["planted.exit"].reason
    assert results["planted.raises"].outcome is Outcome.ERROR
    assert "RuntimeError: planted failure" in results["planted.raises"].reason
    assert "traceback" in results["planted.raises"].extra
    assert results["planted.passing"].outcome is Outcome.PASSED


def test_the_runner_gives_each_result_the_stage_and_labels_its_task_was_planned_with() -> None:
    """Set once where tasks are planned, copied onto the result: a check names only what it alone knows (its
    figure's key and labels, the sizes it ran), and an error result of a task knows what it was about too."""
    planned = {"stage": "numerics", "labels": {"op": "softmax", "impl": "triton", "dtype": "float16"}}
    keyed = dataclasses.replace(task("keyed", "KeyedFigureCheck"), **planned)
    missing = dataclasses.replace(task("missing", "NoSuchCheck"), **planned)
    result, error = run_checks([keyed, missing])
    assert result.stage == "numerics"
    assert result.labels == {"op": "softmax", "impl": "triton", "dtype": "float16", "dims": "N=8"}
    assert result.figures[0].key == "planted.latency" and result.figures[0].labels == {"gpu": "0"}
    assert error.outcome is Outcome.ERROR and error.stage == "numerics" and error.labels == planned["labels"]
    [unplanned] = run_checks([task("passing", "PassingCheck")])
    assert unplanned.stage == "" and unplanned.labels == {}


def test_a_check_reads_its_tasks_timeout_from_its_context_and_its_name_from_the_task() -> None:
    """The timeout is declared where the task is planned (a verify stage), not on the check class: the runner hands
    it to the check in a fresh process and in a warm worker, and names the result after the task."""
    one_shot = task("limit", "TimeoutReadingCheck", timeout=37.5)
    warm = dataclasses.replace(task("warm_limit", "TimeoutReadingCheck", timeout=41.0), worker="planted")
    first, second = run_checks([one_shot, warm])
    assert (first.check_id, first.title, first.reason) == ("planted.limit", "limit", "timeout 37.5")
    assert (second.check_id, second.title, second.reason) == ("planted.warm_limit", "warm_limit", "timeout 41.0")
    assert CheckContext().timeout_s is None  # run outside the runner


def test_runner_reports_unloadable_check_as_error() -> None:
    [result] = run_checks([task("missing", "NoSuchCheck")])
    assert result.outcome is Outcome.ERROR
    assert "could not be loaded" in result.reason


def test_runner_keeps_order_with_parallel_jobs() -> None:
    tasks = [task(f"p{i}", "PassingCheck") for i in range(5)]
    results = run_checks(tasks, jobs=3)
    assert [r.check_id for r in results] == [t.check_id for t in tasks]
    assert all(r.outcome is Outcome.PASSED for r in results)


@pytest.mark.gpu
def test_check_that_poisons_the_cuda_context_becomes_error_and_next_check_runs() -> None:
    pytest.importorskip("cupy")
    results = run_checks([task("poison", "PoisonsCudaContextCheck"), task("after", "PassingCheck")])
    assert results[0].outcome is Outcome.ERROR, results[0].reason
    assert "CUDA context unusable" in results[0].reason
    assert results[1].outcome is Outcome.PASSED


def test_a_follow_up_hook_can_run_a_task_again_in_a_fresh_process_or_rewrite_its_result(tmp_path) -> None:
    again = CheckTask("planted.dies_once", "dies once", "planted_checks:DiesOnceCheck", 30.0,
                      CheckContext(verb="doctor", options={"marker": str(tmp_path / "died")}),
                      env={"PYTHONPATH": child_pythonpath()})
    seen: list[tuple[str, str]] = []

    def follow_up(task, result):
        seen.append((task.check_id, result.outcome.value))
        if task.check_id == "planted.dies_once" and result.outcome is Outcome.ERROR:
            return task  # the same task, in a new child
        if task.check_id == "planted.exit":
            return dataclasses.replace(result, reason="rewritten: " + result.reason)
        return result

    results = run_checks([again, task("exit", "ExitCheck")], jobs=2, follow_up=follow_up)
    assert results[0].outcome is Outcome.PASSED and results[0].reason == "ran again after dying once"
    assert results[1].reason.startswith("rewritten: ") and "exited with code 7" in results[1].reason
    assert sorted(seen) == [("planted.dies_once", "error"), ("planted.dies_once", "passed"),
                            ("planted.exit", "error")]


def test_a_task_a_follow_up_makes_exclusive_runs_again_once_the_side_by_side_work_has_ended(tmp_path) -> None:
    """verify runs a numerics check again alone when other processes held the memory its cases needed
    (verify/resume.py _again_alone): the new try waits for the tasks running beside it, not for a free slot."""
    again = CheckTask("planted.dies_once", "dies once", "planted_checks:DiesOnceCheck", 30.0,
                      CheckContext(verb="doctor", options={"marker": str(tmp_path / "died")}),
                      env={"PYTHONPATH": child_pythonpath()})
    beside = dataclasses.replace(task("stamp", "StampCheck"), context=CheckContext(verb="doctor",
                                                                                   options={"seconds": 2.0}))
    seen: list[tuple[str, str]] = []

    def follow_up(finished, result):
        seen.append((finished.check_id, result.outcome.value))
        if finished.check_id == "planted.dies_once" and result.outcome is Outcome.ERROR:
            return dataclasses.replace(finished, exclusive=True)
        return result

    results = run_checks([again, beside], jobs=2, follow_up=follow_up)
    assert [r.outcome for r in results] == [Outcome.PASSED, Outcome.PASSED]
    assert seen == [("planted.dies_once", "error"), ("planted.stamp", "passed"), ("planted.dies_once", "passed")]


def test_a_feed_brings_tasks_during_the_run_and_holds_a_later_exclusive_task_until_it_closes() -> None:
    """verify's calibration thread hands the numerics tasks over while the GPU stages already run (TaskFeed): a
    task that arrives joins the queue by its order, an exclusive task of a later order waits for the feed to close
    (recovery after the numerics), and the run ends only once the feed is closed and drained."""
    import threading

    from opgate.engine.runner import TaskFeed

    feed = TaskFeed(upcoming_order=40)
    early = dataclasses.replace(task("early", "PassingCheck"), order=10)
    last = dataclasses.replace(task("last", "PassingCheck"), order=95, exclusive=True)
    started: list[str] = []
    added: list[int] = []

    def produce() -> None:
        time.sleep(1.0)
        feed.put([dataclasses.replace(task(f"late{i}", "PassingCheck"), order=40) for i in range(2)])
        time.sleep(0.5)
        feed.close()

    producer = threading.Thread(target=produce)
    producer.start()
    results = run_checks([early, last], jobs=2, feed=feed, on_start=lambda t: started.append(t.check_id),
                         on_added=added.append)
    producer.join()
    assert [r.check_id for r in results] == ["planted.early", "planted.last", "planted.late0", "planted.late1"]
    assert all(r.outcome is Outcome.PASSED for r in results)
    assert started.index("planted.last") > started.index("planted.late1")  # held while the feed was open
    assert added == [2]


def test_a_feed_closed_with_an_error_stops_the_run_with_that_error() -> None:
    """A reference that cannot be evaluated (an InputError in the calibration thread) ends the run with exit 2's
    error, not a report, and kills the checks still running."""
    from opgate.model.errors import InputError
    from opgate.engine.runner import TaskFeed

    feed = TaskFeed(upcoming_order=40)
    feed.close(InputError("spec file x.py: the reference raised"))
    started = time.perf_counter()
    with pytest.raises(InputError, match="the reference raised"):
        run_checks([task("hang", "HangCheck", timeout=60.0)], jobs=1, feed=feed)
    assert time.perf_counter() - started < 20


def test_an_exclusive_task_waits_for_the_side_by_side_tasks_queued_behind_it() -> None:
    """A measuring (exclusive) task at the head of the queue does not drain the slots before the side-by-side work
    behind it: on a library, every operator's runtime timings came before any numerics. It starts once no
    side-by-side task of its GPU waits, and then alone."""
    measure = dataclasses.replace(task("measure", "PassingCheck"), exclusive=True, order=10)
    later = [dataclasses.replace(task(f"side{i}", "PassingCheck"), order=40) for i in range(3)]
    started: list[str] = []
    results = run_checks([measure, *later], jobs=2, on_start=lambda t: started.append(t.check_id))
    assert [r.check_id for r in results] == ["planted.measure", "planted.side0", "planted.side1", "planted.side2"]
    assert started == ["planted.side0", "planted.side1", "planted.side2", "planted.measure"]


def test_a_group_whose_own_work_is_done_measures_while_other_groups_work_waits() -> None:
    """A library completes spec file by spec file (CheckTask.group): a file's measurements start once none of its
    side-by-side tasks waits and the feed says none of its tasks is still to come, while other files' side-by-side
    work still waits. On the H200 host that work never ran out before the run's end, and no measurement started."""
    from opgate.engine.runner import TaskFeed, _next_position

    measure_a = dataclasses.replace(task("measure_a", "PassingCheck"), exclusive=True, order=10, group="a.py")
    measure_b = dataclasses.replace(task("measure_b", "PassingCheck"), exclusive=True, order=10, group="b.py")
    side_a = dataclasses.replace(task("side_a", "PassingCheck"), order=40, group="a.py")
    side_b = dataclasses.replace(task("side_b", "PassingCheck"), order=40, group="b.py")
    assert _next_position([(0, measure_a), (1, measure_b), (2, side_b)]) == 0  # a's work is done
    assert _next_position([(0, measure_a), (1, measure_b), (2, side_a)]) == 1  # b's is
    assert _next_position([(0, measure_a), (1, side_a), (2, side_b)]) == 1  # a's own work first
    ungrouped = dataclasses.replace(measure_a, group="")
    assert _next_position([(0, ungrouped), (1, side_b)]) == 1  # no group: after all side-by-side work, as before

    feed = TaskFeed(upcoming_order=40, groups=["a.py", "b.py"])
    assert _next_position([(0, measure_a), (1, side_b)], arriving=feed.arriving) == 1  # a's numerics still to come
    feed.put([side_a])
    feed.group_done("a.py")
    assert feed.arriving("a.py")  # put but not yet taken: it may be a's
    feed.take()
    assert not feed.arriving("a.py") and feed.arriving("b.py")
    assert _next_position([(0, measure_a), (1, side_b)], arriving=feed.arriving) == 0
    feed.close()
    assert not feed.arriving("b.py")  # a closed feed brings nothing more


def test_a_group_measures_as_soon_as_its_work_is_done_in_a_run() -> None:
    """In a real run: group a's measurement starts before group b's side-by-side tasks, alone (the slots drain)."""
    from opgate.engine.runner import TaskFeed

    measure_a = dataclasses.replace(task("measure_a", "PassingCheck"), exclusive=True, order=10, group="a.py")
    side_a = dataclasses.replace(task("side_a", "PassingCheck"), order=40, group="a.py")
    side_b = [dataclasses.replace(task(f"side_b{i}", "PassingCheck"), order=40, group="b.py") for i in range(3)]
    started: list[str] = []
    feed = TaskFeed(upcoming_order=40)
    feed.close()
    results = run_checks([measure_a, side_a, *side_b], jobs=1, on_start=lambda t: started.append(t.check_id),
                         feed=feed)
    assert all(r.outcome is Outcome.PASSED for r in results)
    assert started == ["planted.side_a", "planted.measure_a", "planted.side_b0", "planted.side_b1",
                       "planted.side_b2"]
    assert list(feed.completed) == ["a.py", "b.py"]  # when each group was judged wholly, in that order
    assert 0 < feed.completed["a.py"] < feed.completed["b.py"]


def test_a_measurement_never_drains_a_busy_gpu_and_goes_first_on_a_free_one() -> None:
    """With its GPU busy, a group's measurement holds nothing back: the numerics and a warm-up under its reserved slots
    behind it start (a drain idled the cores behind sanitizer runs of minutes; refilled by the warm-ups, it never
    ended). With the GPU free it starts first, ahead of the reserved slots that would take the GPU again."""
    from opgate.engine.runner import _next_position

    measure = dataclasses.replace(task("measure", "PassingCheck"), exclusive=True, order=10, group="a.py")
    warm = dataclasses.replace(task("warm", "PassingCheck"), order=42, slot_floor=0.25, group="b.py")
    numerics = dataclasses.replace(task("numerics", "PassingCheck"), order=40, group="b.py")

    running = [_Slot(dataclasses.replace(numerics, check_id="planted.running"))]
    assert _next_position([(0, measure), (1, numerics), (2, warm)], running, jobs=8) == 2  # the floor, then numerics
    assert _next_position([(0, measure), (1, numerics)], running, jobs=8) == 1
    assert _next_position([(0, measure), (1, numerics), (2, warm)], [], jobs=8) == 0  # a free GPU: it goes first
    elsewhere = dataclasses.replace(numerics, device=1)
    pinned = dataclasses.replace(measure, device=0)
    assert _next_position([(0, pinned), (1, elsewhere)], [_Slot(dataclasses.replace(elsewhere, check_id="x"))],
                          jobs=8) == 0  # another GPU's work does not keep it waiting


def test_a_measurement_starts_once_the_running_tasks_end_though_warm_ups_keep_coming() -> None:
    """In a real run: with a warm-up's reserved slot free, the measurement still starts next (after the running
    task), then the warm-ups and the numerics."""
    from opgate.engine.runner import TaskFeed

    measure = dataclasses.replace(task("measure", "PassingCheck"), exclusive=True, order=10, group="a.py")
    numerics = [dataclasses.replace(task(f"numerics{i}", "PassingCheck"), order=40, group="b.py") for i in range(2)]
    warm = [dataclasses.replace(task(f"warm{i}", "PassingCheck"), order=42, slot_floor=0.5, group="b.py")
            for i in range(3)]
    started: list[str] = []
    feed = TaskFeed(upcoming_order=40)
    feed.close()
    results = run_checks([measure, *numerics, *warm], jobs=2, on_start=lambda t: started.append(t.check_id),
                         feed=feed)
    assert all(r.outcome is Outcome.PASSED for r in results)
    assert started[0] == "planted.measure", started


def test_an_exclusive_task_pinned_to_an_idle_gpu_does_not_wait_for_another_gpus_queue() -> None:
    from opgate.engine.runner import _next_position

    measure = dataclasses.replace(task("measure", "PassingCheck"), exclusive=True, device=1)
    other_gpu = dataclasses.replace(task("other", "PassingCheck"), device=0)
    same_gpu = dataclasses.replace(task("same", "PassingCheck"), device=1)
    assert _next_position([(0, measure), (1, other_gpu)]) == 0
    assert _next_position([(0, measure), (1, other_gpu), (2, same_gpu)]) == 1
    assert _next_position([(0, measure), (1, dataclasses.replace(other_gpu, device=None))]) == 1


def test_tasks_over_their_share_of_the_slots_wait_and_leave_the_rest_to_others() -> None:
    """Work nothing waits for (the runtime stage's warm-ups) holds at most its share of the slots, so the numerics
    that arrive later find slots free."""
    from opgate.engine.runner import _next_position

    warm = [(i, dataclasses.replace(task(f"warm{i}", "PassingCheck"), slot_share=0.5)) for i in range(3)]
    other = (9, task("numerics", "PassingCheck"))

    running = [_Slot(warm[0][1]), _Slot(warm[1][1])]
    assert _next_position(warm, running, jobs=4) is None  # 2 of 4 slots: the share is held
    assert _next_position([*warm, other], running, jobs=4) == 3
    assert _next_position(warm, running[:1], jobs=4) == 0
    measure = (10, dataclasses.replace(task("measure", "PassingCheck"), exclusive=True))
    assert _next_position([measure, *warm], running, jobs=4) is None  # the measurement waits for the warm-ups
    # once nothing else may start or come (the feed is closed), the share gives way: the slots are free
    assert _next_position(warm, running, jobs=4, more_coming=False) == 0
    assert _next_position([*warm, other], running, jobs=4, more_coming=False) == 3  # other work first still


def test_once_the_feed_is_closed_tasks_over_their_share_fill_the_free_slots(tmp_path: Path) -> None:
    """Four tasks with half the slots each: with the feed closed and nothing else queued, all four run at once (each
    waits for the other three to start)."""
    from opgate.engine.runner import TaskFeed

    context = CheckContext(verb="doctor", options={"folder": str(tmp_path), "parties": 4})
    tasks = [dataclasses.replace(task(f"barrier{i}", "BarrierCheck", timeout=60.0), slot_share=0.5, context=context)
             for i in range(4)]
    feed = TaskFeed(upcoming_order=40)
    feed.close()
    results = run_checks(tasks, jobs=4, feed=feed)
    assert [r.outcome for r in results] == [Outcome.PASSED] * 4, [r.reason for r in results]


def test_tasks_under_their_reserved_slots_go_ahead_of_earlier_orders() -> None:
    """A sanitizer run (a later order) claims its reserved slots ahead of numerics that keep arriving, and only
    those: past its floor it waits its turn again, and it never jumps a task it must start after."""
    from opgate.engine.runner import _next_position

    numerics = [(i, dataclasses.replace(task(f"numerics{i}", "PassingCheck"), order=40)) for i in range(3)]
    sanitizer = [(10 + i, dataclasses.replace(task(f"san{i}", "FailingCheck"), order=45, slot_floor=0.25))
                 for i in range(3)]

    queue = [*numerics, *sanitizer]
    assert _next_position(queue, [], jobs=8) == 3  # 0 of its 2 slots held: the first sanitizer run goes first
    assert _next_position(queue[:4] + queue[5:], [_Slot(sanitizer[1][1])], jobs=8) == 3  # 1 of 2
    held = [_Slot(sanitizer[1][1]), _Slot(sanitizer[2][1])]
    assert _next_position(queue, held, jobs=8) == 0  # its floor is held: the queue's order again
    assert _next_position(queue, [], jobs=2) == 3  # a floor is at least one slot
    waiting = dataclasses.replace(sanitizer[0][1], after=("planted.numerics0",))
    assert _next_position([*numerics, (10, waiting)], [], jobs=8) == 0  # it starts after numerics0: no jump
    assert _next_position(numerics, [], jobs=8) == 0  # no floor: as before


def test_a_numerics_check_waits_for_its_running_compile_ahead_task_but_not_a_queued_one() -> None:
    """`after_running`: the check would compile the kernel its compile-ahead task is compiling (two 85 s compiles
    at once on the H100); a task that has not started holds nothing back."""
    from opgate.engine.runner import _next_position

    ahead = task("numerics.compile_ahead", "PassingCheck")
    check = dataclasses.replace(task("numerics", "PassingCheck"), after_running=("planted.numerics.compile_ahead",))
    other = task("other", "PassingCheck")

    assert _next_position([(0, check), (1, other)], [_Slot(ahead)], jobs=4) == 1  # it runs: the check waits
    assert _next_position([(0, check), (1, ahead)], [], jobs=4) == 0  # queued: the check goes first
    assert _next_position([(0, check)], [], jobs=4) == 0


def test_a_task_starts_after_the_tasks_it_names_have_finished() -> None:
    """`after`: a sanitizer run's other implementations read the one run their group's first task made."""
    from opgate.engine.runner import _next_position

    first = task("first", "PassingCheck")
    then = dataclasses.replace(task("then", "PassingCheck"), after=("planted.first",))
    other = task("other", "PassingCheck")

    assert _next_position([(1, then), (2, other)], [_Slot(first)], jobs=4) == 1  # first still runs
    assert _next_position([(0, first), (1, then)], [], jobs=4) == 0
    assert _next_position([(1, then)], [], jobs=4) == 0  # first has finished (or was never in the run)
    started: list[str] = []
    results = run_checks([then, first, other], jobs=3, on_start=lambda t: started.append(t.check_id))
    assert [r.outcome for r in results] == [Outcome.PASSED] * 3
    assert started.index("planted.then") > started.index("planted.first")


def test_a_ready_task_whose_key_has_an_idle_worker_goes_before_one_that_would_start_a_worker() -> None:
    """A library's spec files each have their own warm-worker key: taking, among tasks of one order, one whose key
    has an idle worker saves a worker start (imports and the spec again) and the eviction of another key's worker."""
    from opgate.engine.runner import _next_position

    def keyed(name: str, key: str, order: int = 40, exclusive: bool = False) -> CheckTask:
        return dataclasses.replace(task(name, "PassingCheck"), worker=key, order=order, exclusive=exclusive)

    a, b, c = keyed("a", "verify:a.py"), keyed("b", "verify:b.py"), keyed("c", "verify:a.py")
    assert _next_position([(0, a), (1, b)], idle_keys={"verify:b.py"}) == 1
    assert _next_position([(0, a), (1, b)], idle_keys={"verify:a.py", "verify:b.py"}) == 0  # the head has one
    assert _next_position([(0, a), (1, c)], idle_keys={"verify:b.py"}) == 0  # no later task has one: the head
    assert _next_position([(0, a), (1, b)]) == 0  # no idle worker at all
    later_order = keyed("late", "verify:b.py", order=42)
    assert _next_position([(0, a), (1, later_order)], idle_keys={"verify:b.py"}) == 0  # never past its order
    fresh = task("fresh", "PassingCheck")  # no key: a process of its own
    assert _next_position([(0, fresh), (1, b)], idle_keys={"verify:b.py"}) == 0
    ranked = dataclasses.replace(a, ranked=True)  # its place is a priority (compile-ahead): it starts a worker
    assert _next_position([(0, ranked), (1, b)], idle_keys={"verify:b.py"}) == 0


def test_progress_lines_in_a_log_say_where_the_whole_run_stands(tmp_path: Path) -> None:
    """Without a terminal (a CI log) there is no bar: each result's line starts with the tasks finished of those
    known so far and the run's elapsed time."""
    import io
    import re

    from rich.console import Console

    from opgate.engine.session import progress_prefix, run_session

    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=200)
    run_session("doctor", [task("a", "PassingCheck"), task("b", "PassingCheck")], console, jobs=1)
    lines = [line for line in out.getvalue().splitlines() if line.strip()]
    assert len(lines) == 2
    assert all(re.fullmatch(r"  \[[12]/2  0:\d\d\] passed   planted\.[ab] \(\d+\.\d\ds\)", line) for line in lines)
    assert lines[1].startswith("  [2/2 ")
    assert progress_prefix(7, 1234, 754.9) == "[   7/1234 12:34]"
