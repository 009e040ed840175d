"""Warm workers (opgate.engine.runner): tasks of one worker key share a process; a crash or hang mid-sequence is an
`error` of that check only, and the next check of the key runs in a fresh worker."""

from __future__ import annotations

import pytest
from opgate_testing import child_pythonpath

from opgate.checks.base import CheckContext
from opgate.model.results import Outcome
from opgate.engine.runner import CheckTask, run_checks


@pytest.fixture(autouse=True)
def planted_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", child_pythonpath())


def task(name: str, target: str, key: str = "k", timeout_s: float = 60.0, **options: object) -> CheckTask:
    return CheckTask(name, name, f"planted_checks:{target}", timeout_s, CheckContext(options=options), worker=key)


def test_one_key_shares_one_process_and_state_stays_but_env_is_reset() -> None:
    results = run_checks([task("a", "PidCheck", mark="first"), task("b", "PidCheck")], jobs=1)
    a, b = results
    assert a.outcome is b.outcome is Outcome.PASSED
    assert a.extra["pid"] == b.extra["pid"]  # warm: the same interpreter
    assert b.extra["seen_mark"] == "first"  # what it loaded stays loaded
    assert b.extra["leak_before"] == ""  # an environment variable a check set is gone for the next


def test_a_crash_mid_sequence_is_an_error_of_that_check_only_and_the_next_runs_in_a_fresh_worker() -> None:
    results = run_checks([task("before", "PidCheck", mark="warm"), task("crash", "SegfaultCheck"),
                          task("after", "PidCheck")], jobs=1)
    before, crash, after = results
    assert before.outcome is Outcome.PASSED and after.outcome is Outcome.PASSED
    assert crash.outcome is Outcome.ERROR and "SIGSEGV" in crash.reason
    assert after.extra["pid"] != before.extra["pid"]  # a fresh worker ...
    assert after.extra["seen_mark"] == ""  # ... with nothing of the dead one's state


def test_a_hang_is_killed_at_its_own_timeout_and_the_key_goes_on() -> None:
    results = run_checks([task("hang", "HangCheck", timeout_s=3.0), task("after", "PidCheck")], jobs=1)
    assert results[0].outcome is Outcome.ERROR and "timed out after 3 s" in results[0].reason
    assert results[1].outcome is Outcome.PASSED


def test_a_retiring_task_ends_its_worker_and_keys_do_not_mix() -> None:
    results = run_checks([
        CheckTask("r", "r", "planted_checks:PidCheck", 60.0, CheckContext(options={"mark": "x"}), worker="k",
                  retire=True),
        task("next", "PidCheck"), task("other", "PidCheck", key="other")], jobs=1)
    first, after, other = results
    assert len({first.extra["pid"], after.extra["pid"], other.extra["pid"]}) == 3
    assert all(r.outcome is Outcome.PASSED for r in results)


def test_a_check_whose_process_keeps_memory_ends_its_worker_and_the_next_check_runs_in_a_fresh_one() -> None:
    """A runtime check after a failed CUDA graph capture whose pool stays reserved (RETIRE_WORKER in its result):
    its verdict stands, and the worker ends so that its memory goes back to the GPU."""
    first, leaky, after = run_checks([task("first", "PidCheck"), task("leaky", "KeepsMemoryCheck"),
                                      task("next", "PidCheck")], jobs=1)
    assert first.outcome is leaky.outcome is after.outcome is Outcome.PASSED
    assert leaky.extra["pid"] == first.extra["pid"] != after.extra["pid"]


def test_a_task_retiring_unless_it_passed_keeps_its_worker_only_when_it_passed() -> None:
    """The recovery check: passing shows its process healthy again, so the next check of the key reuses it;
    failing (or any other outcome) ends it."""
    def retiring(name: str, target: str) -> CheckTask:
        return CheckTask(name, name, f"planted_checks:{target}", 60.0, CheckContext(), worker="k",
                         retire_unless_passed=True)

    passed, after_pass = run_checks([retiring("passes", "PidCheck"), task("next", "PidCheck")], jobs=1)
    assert passed.outcome is after_pass.outcome is Outcome.PASSED
    assert after_pass.extra["pid"] == passed.extra["pid"]
    first, failed, after_fail = run_checks([task("first", "PidCheck"), retiring("fails", "FailingCheck"),
                                            task("next", "PidCheck")], jobs=1)
    assert failed.outcome is Outcome.FAILED and after_fail.outcome is Outcome.PASSED
    assert after_fail.extra["pid"] != first.extra["pid"]  # the failing task's worker (first's) ended
    first, warned, after_warning = run_checks([task("first", "PidCheck"), retiring("warns", "WarningCheck"),
                                               task("next", "PidCheck")], jobs=1)
    assert warned.outcome is Outcome.WARNED and after_warning.extra["pid"] != first.extra["pid"]


def test_a_spare_worker_is_adopted_by_the_first_key_of_its_environment(tmp_path) -> None:
    """verify starts spares before it has read the spec (GPU hosts): the first key whose environment matches
    adopts one, warm state and all, instead of starting a process; a key with another environment does not."""
    from opgate.engine.runner import WarmPool

    pool = WarmPool(tmp_path, limit=4)
    pool.start_spare(CheckTask("spare", "spare", "planted_checks:PidCheck", 60.0,
                               CheckContext(options={"mark": "spare"}), env={"SPARE_ENV": "a"}))
    try:
        same = CheckTask("same", "same", "planted_checks:PidCheck", 60.0, CheckContext(), env={"SPARE_ENV": "a"},
                         worker="k1")
        other = CheckTask("other", "other", "planted_checks:PidCheck", 60.0, CheckContext(), env={"SPARE_ENV": "b"},
                          worker="k2")
        adopted, fresh = run_checks([same, other], jobs=1, pool=pool)
    finally:
        pool.close()
    assert adopted.outcome is fresh.outcome is Outcome.PASSED
    assert adopted.extra["seen_mark"] == "spare"  # it ran the spare's warm-up first, in the same process
    assert adopted.extra["worker"]["task_number"] == 2
    assert fresh.extra["seen_mark"] == ""  # another environment: a worker of its own


def test_the_warm_worker_limit_is_three_per_slot_where_memory_holds_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """A library's spec files each have their own key: at 2 per slot most worker starts on the H200 host evicted an
    idle worker another file then started again. Memory still bounds it, and never below one per slot."""
    from opgate.probes import host_memory
    from opgate.engine.runner import WARM_WORKER_BYTES, warm_worker_limit

    monkeypatch.setattr(host_memory, "available_memory_bytes", lambda: 120 * 2**30)
    assert warm_worker_limit(16) == 48
    monkeypatch.setattr(host_memory, "available_memory_bytes", lambda: 5 * WARM_WORKER_BYTES)
    assert warm_worker_limit(2) == 5
    monkeypatch.setattr(host_memory, "available_memory_bytes", lambda: WARM_WORKER_BYTES)
    assert warm_worker_limit(4) == 4
