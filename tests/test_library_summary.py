"""scripts/gpu/library_summary.py: what a library run's report says about where its time went, from the report alone;
a path that is no report is one line and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu" / "library_summary.py"


def _report() -> dict:
    """A two-file run's report, cut to what the summary reads: the pool's plan spans and each result's spec file."""
    spans = {"conv.grad float32": [106.0, 349.0], "kl.grad float32": [23.0, 115.0], "swish float32": [10.0, 22.0],
             "norm float16": [161.0, 170.0]}
    results = [{"check_id": f"verify.{op}.calibration", "outcome": "passed", "stage": "calibration",
                "extra": {"op": op, "spec_file": f"lib/{spec}"}}
               for op, spec in [("conv.grad", "seq.py"), ("kl.grad", "losses.py"), ("swish", "losses.py"),
                                ("norm", "norms.py")]]
    estimates = {"conv.grad": [0.87, "call"], "kl.grad": [0.26, "call"], "swish": [0.01, "call"],
                 "norm": [0.002, "elements"]}
    return {"duration_s": 400.0, "interrupted": False, "exit_code": 0, "counts": {"passed": 4}, "results": results,
            "extra": {"engine": {"calibration_spans_s": spans, "plan_estimates_s": estimates}}}


def _summary_lines(tmp_path: Path, report: dict) -> list[str]:
    """The summary script's lines for `report`, written as a run's report file."""
    path = tmp_path / "run1.json"
    path.write_text(json.dumps(report))
    done = subprocess.run([sys.executable, str(SCRIPT), str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_the_longest_plans_and_each_files_first_plan(tmp_path: Path) -> None:
    lines = _summary_lines(tmp_path, _report())
    assert "longest plans: conv.grad float32 106-349 s, kl.grad float32 23-115 s, swish float32 10-22 s, " \
           "norm float16 161-170 s" in lines
    assert "first plan began, by spec file: losses.py 10 s, seq.py 106 s, norms.py 161 s" in lines
    assert "ranked first by the estimate: conv.grad 0.87, kl.grad 0.26, swish 0.01, norm 0.002; 1 of 4 operators " \
           "ranked by elements (call not timed)" in lines
    assert "plans calibrated by 100 s: 1, 200 s: 3, 300 s: 3, 400 s: 4, 500 s: 4, 600 s: 4" in lines


def test_busy_processes_count_a_shared_sanitizer_run_once_and_the_calibration_processes(tmp_path: Path) -> None:
    """Every 50 s, the processes busy by what they did: two members of one shared sanitizer run are one process."""
    report = _report()
    log = {"shared_run": {"log_path": "/art/sanitizer-racecheck-shared-run.log", "members": 2}}
    report["results"] += [{"check_id": f"verify.{op}.racecheck", "outcome": "passed", "stage": "sanitizer",
                           "extra": {"op": op, **log}} for op in ("kl.grad", "swish")]
    report["results"].append({"check_id": "verify.swish.swish.float32", "outcome": "passed", "stage": "numerics",
                              "extra": {"op": "swish"}})
    report["extra"]["timeline"] = {"verify.kl.grad.racecheck": [0.0, 40.0], "verify.swish.racecheck": [10.0, 50.0],
                                   "verify.swish.swish.float32": [25.0, 75.0],
                                   "verify.swish.swish.float32.runtime_warm_up": [50.0, 100.0]}
    lines = _summary_lines(tmp_path, report)
    header = next(k for k, line in enumerate(lines) if line.startswith("busy processes each 50 s:"))
    assert lines[header].split()[5:] == ["calibration", "numerics", "sanitizer", "warm-up", "total"]
    # 0-50 s: the calibration's swish and kl.grad plans (10-22 s, 23-50 s), the numerics check half of it, the shared
    # run all of it
    assert lines[header + 1].split() == ["0", "s", "0.8", "0.5", "1.0", "0.0", "2.3"]
    assert lines[header + 2].split()[:2] == ["50", "s"] and lines[header + 2].split()[-2:] == ["1.0", "2.5"]


def test_a_path_that_is_no_report_is_one_line_and_exit_2(tmp_path: Path) -> None:
    for args in ([str(tmp_path / "missing.json")], []):
        done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and not done.stdout
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    bad = tmp_path / "half.json"
    bad.write_text("{")
    done = subprocess.run([sys.executable, str(SCRIPT), str(bad)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "half.json: not a readable JSON report" in done.stderr


def test_a_check_still_running_at_the_stop_counts_as_busy_until_the_last_event_and_is_named(tmp_path: Path) -> None:
    """An interrupted run's unfinished numerics check has a start and no result: it is busy until the run's last
    event and the summary names it."""
    report = _report()
    report["interrupted"] = True
    report["extra"]["engine"]["calibration_spans_s"] = {}
    report["extra"]["timeline"] = {"verify.norm.norm.float16": [0.0], "verify.swish.swish.float32.runtime_warm_up":
                                   [0.0, 100.0]}
    lines = _summary_lines(tmp_path, report)
    assert "unfinished at the stop: 1 checks, the earliest begun: norm.norm.float16 at 0 s" in lines
    header = next(k for k, line in enumerate(lines) if line.startswith("busy processes each 50 s:"))
    assert lines[header].split()[5:] == ["numerics", "warm-up", "total"]
    assert lines[header + 1].split() == ["0", "s", "1.0", "1.0", "2.0"]


def test_a_check_queued_again_after_its_first_try_is_named_with_why(tmp_path: Path) -> None:
    """A first try that a follow-up ran again leaves no result and no end in the timeline: the report's
    extra.engine.run_again says which and why, and the summary names those not ended at the stop."""
    report = _report()
    report["interrupted"] = True
    report["extra"]["timeline"] = {"verify.norm.norm.float16": [320.0]}
    report["extra"]["engine"]["run_again"] = {
        "verify.norm.norm.float16": ["alone on its GPU (cases out of memory beside other processes)"],
        "verify.loss.loss.float32.runtime": ["with every idle worker ended first (out of memory beside them)"]}
    lines = _summary_lines(tmp_path, report)
    assert ("run again: 2 tasks, {'alone on its GPU (cases out of memory beside other processes)': 1, 'with every "
            "idle worker ended first (out of memory beside them)': 1}; queued again and not ended at the stop: "
            "norm.norm.float16") in lines


def test_it_counts_the_compile_ahead_tasks_that_ran_before_their_plan(tmp_path: Path) -> None:
    """A compile-ahead task helps only before its plan is written: of all, and of the plans written last."""
    report = _report()
    report["extra"]["timeline"] = {
        "verify.conv.grad.conv.float32.compile_ahead": [30.0, 90.0],  # written at 349 s: began and ended before
        "verify.norm.norm.float16.compile_ahead": [150.0, 200.0],  # written at 170 s: began before, ended after
        "verify.swish.swish.float32.compile_ahead": [40.0, 41.0],  # written at 22 s: after
        "verify.kl.grad.kl.float32.compile_ahead": [100.0],  # written at 115 s: began before, unfinished at the stop
    }
    lines = _summary_lines(tmp_path, report)
    # four plans, all among the 30 written last
    assert ("compile-ahead tasks before their plan was written: 3 of 4 began, 1 ended; of the 30 plans written last, "
            "3 of 4 began, 1 ended") in lines
    # the starts at 30, 40, 100 and 150 s: the longest wait is after the swish task, which still ran
    assert ("compile-ahead starts: the longest wait 40-100 s (60 s), 2 tasks running at its start; the next to "
            "start: verify.kl.grad.kl.float32.compile_ahead") in lines


def test_the_runtime_checks_run_here_are_accounted_by_phase(tmp_path: Path) -> None:
    """Where a run's serial end went: the runtime checks it ran (a reused one is not counted) by phase."""
    report = _report()

    def runtime(op: str, median_us: float, first: float, timing: float, graph: float, reused: bool = False) -> dict:
        replay_timed = median_us < 1000.0  # the slow ones' hosts submit them in a small share of their GPU time
        extra = {"timing": {"median_us": median_us, "first_call_s": first},
                 "graph": {"captured": True, "eager_us_per_call": 40.0 if replay_timed else None,
                           "replay_not_timed": "" if replay_timed else "host_bound",
                           "seconds": {"warm_up": graph / 2, "replay_and_eager": graph / 2}},
                 "phase_s": {"timing": timing, "graph": graph}, **({"cached_from": "earlier"} if reused else {})}
        return {"check_id": f"verify.{op}.{op}.float32.runtime", "outcome": "passed", "stage": "runtime",
                "duration_s": timing + graph + 0.1, "extra": extra}

    report["results"] += [runtime("swish", 500.0, 0.01, 0.2, 0.1), runtime("kl", 680000.0, 0.7, 4.8, 2.1),
                          runtime("ce", 2000.0, 6.0, 6.5, 0.4, reused=True)]
    lines = _summary_lines(tmp_path, report)
    assert ("runtime checks run here: 2 in 7.4 s; first calls 0.7 s, timing 5.0 s, graph 2.2 s; 1 calls of 0.1 s or "
            "more: 4.1 s of timing after their first calls") in lines
    assert ("graph checks: 1 not timed against replays as the host submits the call in under 5% of its GPU time "
            "(2.1 s), 1 timed (0.1 s); their parts warm_up 1.1 s, replay_and_eager 1.1 s") in lines


def test_the_recovery_checks_run_here_are_accounted_by_phase_and_trial_part(tmp_path: Path) -> None:
    report = _report()
    trial = {"fill_s": 0.13, "full_call_s": 0.02, "recover_s": 0.05}
    report["results"] += [{"check_id": f"verify.{op}.{op}.float32.recovery", "outcome": "passed", "stage": "recovery",
                           "duration_s": 1.0, "extra": {"trials": [trial] * 3,
                                                        "phase_s": {"inputs": 0.1, "first_call": 0.2, "trials": 0.6}}}
                          for op in ("swish", "kl")]
    lines = _summary_lines(tmp_path, report)
    assert ("recovery checks run here: 2 in 2.0 s; phases inputs 0.2 s, first_call 0.4 s, trials 1.2 s; trials "
            "fill_s 0.8 s, full_call_s 0.1 s, recover_s 0.3 s; fill_s by trial 0: 0.3 s, 1: 0.3 s, 2: 0.3 s; "
            "retries that needed all freed: 0") in lines


def test_it_says_how_long_the_runtime_checks_waited_for_warm_ups_after_the_numerics(tmp_path: Path) -> None:
    """A measurement starts once no warm-up holds its GPU: the wait after the last numerics check, and the warm-ups
    that made it (forty-ninth session: 90 began after 380 s and the runtime checks began 67 s after the numerics)."""
    report = _report()
    report["results"] += [{"check_id": "verify.norm.norm.float16", "outcome": "passed", "stage": "numerics",
                           "extra": {}},
                          {"check_id": "verify.norm.norm.float16.runtime", "outcome": "passed", "stage": "runtime",
                           "extra": {}}]
    report["extra"]["timeline"] = {
        "verify.norm.norm.float16": [170.0, 300.0],
        "verify.norm.norm.float16.runtime_warm_up": [250.0, 320.0],  # begun before the numerics ended
        "verify.swish.swish.float32.runtime_warm_up": [305.0, 340.0],  # begun after
        "verify.kl.grad.kl.float32.runtime_warm_up": [100.0, 200.0],  # done before
        "verify.norm.norm.float16.runtime": [341.0, 342.0],
    }
    lines = _summary_lines(tmp_path, report)
    assert ("the runtime checks began 41 s after the last numerics check (300 s): 2 runtime warm-ups ended after it, "
            "1 of them begun after it") in lines


def test_it_says_how_long_the_numerics_checks_waited_after_their_plans(tmp_path: Path) -> None:
    """The numerics queue is first come, first served among ready checks: a check whose plan was written late waits
    behind the backlog (fifty-fourth session: FlagGems' rms_norm.grad, written at 254-258 s, began at 329-337 s)."""
    report = _report()
    report["results"] += [{"check_id": f"verify.{op}.{impl}.{dtype}", "outcome": "passed", "stage": "numerics",
                           "extra": {}}
                          for op, impl, dtype in [("conv.grad", "conv", "float32"), ("kl.grad", "kl", "float32"),
                                                  ("swish", "swish", "float32")]]
    report["extra"]["timeline"] = {
        "verify.conv.grad.conv.float32": [420.0, 500.0],  # written at 349 s: waited 71 s
        "verify.kl.grad.kl.float32": [125.0, 130.0],  # written at 115 s: 10 s
        "verify.swish.swish.float32": [62.0, 63.0],  # written at 22 s: 40 s
    }
    lines = _summary_lines(tmp_path, report)
    assert "  a last numerics check: verify.conv.grad.conv.float32 420-500 s; its plan written at 349 s" in lines
    assert ("numerics checks' wait from their plan to their start: median 40 s, longest 71 s, 2 of 3 waited 30 s or "
            "more") in lines


def test_a_timing_run_twice_names_the_give_backs_of_gpu_memory_beside_it(tmp_path: Path) -> None:
    """verify/runtime.py times a disturbed timing twice; the summary places each runtime check on the wall clock (the
    timeline's zero) and names the warm workers that gave GPU memory back while it ran (held.jsonl beside the
    report), with the same count over every runtime check as the baseline."""
    report = _report()
    timing = {"median_us": 330.0, "min_us": 327.0}
    report["results"] += [
        {"check_id": "verify.swish.swish.float16.runtime", "outcome": "passed", "stage": "runtime",
         "extra": {"timing": timing, "timing_not_kept": {"median_us": 1352.0, "min_us": 327.0}}},
        {"check_id": "verify.swish.swish.float32.runtime", "outcome": "passed", "stage": "runtime",
         "extra": {"timing": timing}}]
    report["extra"]["timeline"] = {"verify.swish.swish.float16.runtime": [52.0, 52.3],
                                   "verify.swish.swish.float32.runtime": [60.0, 60.2]}
    report["extra"]["timeline_origin_epoch"] = 1000.0
    (tmp_path / "held.jsonl").write_text("\n".join(json.dumps(entry) for entry in [
        {"pid": 1, "check": "verify.cumsum.cumsum.float32.runtime_warm_up", "gave_back_epoch": [1051.9, 1052.1]},
        {"pid": 2, "check": "verify.norm.norm.float16", "gave_back_epoch": [1030.0, 1031.0]},
        {"pid": 3, "check": "verify.spare_warm_up"}]) + "\n")
    lines = _summary_lines(tmp_path, report)
    assert "timed twice (the first timing spread over 1.5x its fastest call): 1 of 2 runtime checks run here" in lines
    assert ("  verify.swish.swish.float16.runtime: medians 330.0 us kept, 1352.0 us not; 1 give-backs of GPU memory "
            "beside it (verify.cumsum.cumsum.float32.runtime_warm_up)") in lines
    assert "  baseline: 1 of 2 runtime checks had a give-back beside them" in lines


def test_the_warm_up_order_and_a_limit_met_while_closing_are_said(tmp_path: Path) -> None:
    report = _report()
    report["extra"]["engine"]["warm_up_order"] = {"by": "earlier runs' seconds, longest first", "known": 3}
    report["extra"]["time_limit_met_while_closing_s"] = 581.0
    lines = _summary_lines(tmp_path, report)
    assert "warm-up order: {'by': \"earlier runs' seconds, longest first\", 'known': 3}" in lines
    assert "--time-limit 581 s came while the run closed its workers, after every check had ended" in lines
