"""One opgate invocation: turn registered checks into tasks, run them with progress, make a RunReport."""

from __future__ import annotations

import datetime as _dt
import platform
import socket
import sys
import time
from typing import Mapping, Sequence

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from opgate import __version__
from opgate.checks.base import CheckContext
from opgate.checks.registry import CheckSpec
from opgate.model.results import CheckResult, Outcome, RunReport
from opgate.engine.interrupts import RunInterrupted
from opgate.engine.runner import CheckTask, FollowUpHook, TaskFeed, WarmPool, run_checks


def host_facts() -> dict[str, str]:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": sys.version.split()[0],
    }


def tasks_for(
    specs: Sequence[CheckSpec],
    ctx: CheckContext,
    env: Mapping[str, str] | None = None,
) -> tuple[list[CheckTask], list[CheckResult]]:
    """Load each check class (cheap: heavy imports stay inside `evaluate`) to read its metadata.

    A check that cannot even be imported becomes an `error` result instead of a task.
    """
    tasks: list[CheckTask] = []
    broken: list[CheckResult] = []
    for spec in specs:
        try:
            cls = spec.load()
        except Exception as exc:
            broken.append(CheckResult(spec.name, spec.name, Outcome.ERROR,
                                      f"check could not be imported: {type(exc).__name__}: {exc}"))
            continue
        if ctx.verb not in getattr(cls, "verbs", (ctx.verb,)):
            continue
        if ctx.level not in getattr(cls, "levels", (ctx.level,)):
            continue
        tasks.append(CheckTask(
            check_id=getattr(cls, "check_id", "") or spec.name,
            title=getattr(cls, "title", "") or spec.name,
            target=spec.target,
            timeout_s=float(getattr(cls, "timeout_s", 60.0)),
            context=ctx,
            env=dict(env or {}),
            exclusive=bool(getattr(cls, "exclusive", False)),
        ))
    # Checks that must run alone (measured GPU probes) go last, so the others still run in parallel first.
    tasks.sort(key=lambda task: task.exclusive)
    return tasks, broken


def progress_prefix(finished: int, total: int, elapsed_s: float) -> str:
    """`[  12/340  1:05]`: tasks finished of those known so far (a library run's plans bring more as they are
    written), and the run's minutes and seconds."""
    minutes, seconds = divmod(int(elapsed_s), 60)
    width = len(str(total))
    return f"[{finished:>{width}}/{total} {minutes:>2}:{seconds:02d}]"


def run_session(
    verb: str,
    tasks: Sequence[CheckTask],
    console: Console,
    jobs: int = 1,
    strict: bool = False,
    preset: Sequence[CheckResult] = (),
    extra: Mapping[str, object] | None = None,
    follow_up: FollowUpHook | None = None,
    pool: WarmPool | None = None,
    feed: TaskFeed | None = None,
) -> RunReport:
    """Run `tasks` (and those `feed` brings during the run) with a progress bar."""
    started_at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    origin = {"timeline_origin_epoch": round(time.time(), 3)}  # to align the timeline with logs that keep wall time
    with Progress(
        SpinnerColumn(), TextColumn("[progress.description]{task.description}"), BarColumn(),
        MofNCompleteColumn(), TimeElapsedColumn(), console=console, transient=True,
        disable=not console.is_terminal,
    ) as progress:
        bar = progress.add_task(f"opgate {verb}", total=len(tasks))

        timeline: dict[str, list[float]] = {}
        total = len(tasks)

        def added(count: int) -> None:  # tasks a TaskFeed brought during the run
            nonlocal total
            total += count
            progress.update(bar, total=total)

        def started(task: CheckTask) -> None:
            progress.update(bar, description=f"{verb}: {task.check_id}")
            timeline.setdefault(task.check_id, []).append(round(time.perf_counter() - t0, 2))

        finished = 0

        def done(task: CheckTask, result: CheckResult) -> None:
            nonlocal finished
            now = time.perf_counter() - t0
            timeline.setdefault(task.check_id, []).append(round(now, 2))
            progress.advance(bar)
            finished += 1
            if not console.is_terminal:  # a CI log: where the whole run stands, on each line (no bar there)
                console.print(f"  {progress_prefix(finished, total, now)} {result.outcome.value:8s} {task.check_id} "
                              f"({result.duration_s:.2f}s)", highlight=False)

        try:
            results = run_checks(tasks, jobs=jobs, on_start=started, on_done=done, follow_up=follow_up,
                                 pool=pool, feed=feed, on_added=added)
        except RunInterrupted as stop:
            raise RunInterrupted(stop.results, stop.not_run, report=RunReport(
                verb=verb, results=tuple(preset) + tuple(stop.results), started_at=started_at,
                duration_s=time.perf_counter() - t0, host=host_facts(), tool_version=__version__, strict=strict,
                extra={**dict(extra or {}), "interrupted": True, "not_run": stop.not_run, "timeline": timeline,
                       **origin},
            )) from None
    return RunReport(
        verb=verb,
        results=tuple(preset) + tuple(results),
        started_at=started_at,
        duration_s=time.perf_counter() - t0,
        host=host_facts(),
        tool_version=__version__,
        strict=strict,
        # when each check started and ended, seconds after the session began (a resumed check has more pairs)
        extra={**dict(extra or {}), "timeline": timeline, **origin},
    )
