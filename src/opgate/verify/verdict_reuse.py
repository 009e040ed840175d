"""One `opgate verify` run with the verdict cache: judge the spec files whose key changed, reuse the others' stored
verdicts in the same report, and store each file this run judged wholly (verify/verdict_cache.py says what a key is
and what is stored). A file judged only in part (interrupted, or an `error` in it) keeps its finished checks for the
next run (verify/resumed.py)."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from opgate.model.results import CheckResult, Outcome, RunReport
from opgate.verify.resumed import ResumedChecks, keepable, operator_of
from opgate.verify.verdict_cache import CachedFile, VerdictCache, mark_reused, now

if TYPE_CHECKING:
    from opgate.verify.engine import VerifyRequest

# the engine's judging: the request, the console, the stored results of files judged in part, and what to do with
# the report so far when the run is interrupted (before its children are stopped)
Judge = Callable[["VerifyRequest", Any, ResumedChecks, Callable[[RunReport], RunReport]], RunReport]


def _file_of(result: CheckResult) -> Path | None:
    spec = result.extra.get("spec_file") if isinstance(result.extra, dict) else None
    return Path(str(spec)).resolve() if spec else None


def results_by_file(results: Sequence[CheckResult]) -> tuple[dict[Path, list[CheckResult]], list[CheckResult]]:
    """Each spec file's results (by extra["spec_file"]), and the results no file owns (whole-run ones)."""
    owned: dict[Path, list[CheckResult]] = {}
    unowned: list[CheckResult] = []
    for result in results:
        spec = _file_of(result)
        if spec is None:
            unowned.append(result)
        else:
            owned.setdefault(spec, []).append(result)
    return owned, unowned


def _case_counts_of(results: Sequence[CheckResult], case_counts: Mapping[str, int]) -> dict[str, int]:
    """The case counts of the operators these results judged."""
    ops = {op for op in map(operator_of, results) if op is not None}
    ids = [r.check_id for r in results]
    for name in case_counts:  # a calibration result names its operator only in its id
        if any(check_id.startswith(f"verify.{name}.") for check_id in ids):
            ops.add(name)
    return {name: count for name, count in case_counts.items() if name in ops}


def _only(request: "VerifyRequest", files: Sequence[Path]) -> "VerifyRequest":
    return dataclasses.replace(request, spec_file=files[0], spec_files=tuple(files) if len(files) > 1 else ())


def _reused_only_report(request: "VerifyRequest", gpu_present: bool) -> RunReport:
    """The report of a run that judged nothing: every file's verdicts came from the cache."""
    from opgate import __version__
    from opgate.engine.session import host_facts

    extra: dict[str, Any] = {"budget": request.budget, "seed": request.seed, "spec": str(request.spec_file),
                             "gpu": gpu_present, "case_counts": {}, "replay": None}
    return RunReport(verb="verify", results=(), started_at=now(), duration_s=0.0, host=host_facts(),
                     tool_version=__version__, extra=extra)


def run_with_cache(request: "VerifyRequest", console: Any, cache: VerdictCache, judge: Judge) -> RunReport:
    started = time.perf_counter()
    reused: dict[Path, CachedFile] = {}
    to_judge: list[Path] = []
    resumed = ResumedChecks()
    resumed_from: dict[Path, int] = {}
    for spec in request.files:
        entry = cache.load(spec)
        if entry is not None:
            reused[spec] = entry
            continue
        to_judge.append(spec)
        part = cache.load(spec, partial=True)
        if part is not None:  # judged in part before: its finished checks are not run again (verify/resumed.py)
            resumed.add((mark_reused(r, part.judged_at) for r in part.results), part.settled, part.case_counts,
                        part.settled_dtypes)
            resumed_from[spec] = len(part.results)
    if reused:
        console.print(f"verdict cache: {len(reused)} of {len(request.files)} spec file(s) unchanged since they "
                      f"were judged: {sum(len(e.results) for e in reused.values())} results reused "
                      "(--no-cache judges them again)", highlight=False)
    if resumed_from:
        console.print(f"verdict cache: {len(resumed_from)} spec file(s) judged in part before "
                      f"({sum(resumed_from.values())} finished results stored): their finished checks are not run "
                      "again (--no-cache runs them)", highlight=False)
    judged_at = now()

    def keep(report: RunReport) -> RunReport:
        """Called by the engine on an interrupt, before it stops its children (that can outlast a CI runner's
        SIGTERM-to-SIGKILL grace): what was judged is stored at once."""
        return _kept_after_interrupt(report, request, cache, reused, to_judge, judged_at, started, resumed)

    report = (judge(_only(request, to_judge), console, resumed, keep) if to_judge
              else _reused_only_report(request, cache.gpu_present))
    stored = _store_judged(cache, report, to_judge, judged_at)
    partly = _store_in_part(cache, report, [spec for spec in to_judge if spec not in stored], judged_at)
    return _merged(report, request, reused, to_judge, stored, started, resumed, partly)


def _kept_after_interrupt(so_far: RunReport, request: "VerifyRequest", cache: VerdictCache,
                          reused: Mapping[Path, CachedFile], judged: Sequence[Path], judged_at: str,
                          started: float, resumed: ResumedChecks) -> RunReport:
    """An interrupted run (Ctrl-C, a CI job's time limit) still stores the files it judged wholly (the engine's
    extra["complete_files"]), and the finished checks of the others (verify/resumed.py), so the next run judges
    only the rest. The report so far, with the reused files' verdicts and what was stored, written again when
    either changed it (reporting.emit.emit_interrupted)."""
    complete = {Path(spec).resolve() for spec in so_far.extra.get("complete_files") or ()}
    stored = _store(cache, so_far, [spec for spec in judged if Path(spec).resolve() in complete], judged_at)
    partly = _store_in_part(cache, so_far, [spec for spec in judged if spec not in stored], judged_at)
    if not reused and not stored and not partly:
        return so_far
    from opgate.reporting.emit import emit_interrupted

    report = _merged(so_far, request, reused, judged, stored, started, resumed, partly)
    emit_interrupted(report)
    return report


def _store_in_part(cache: VerdictCache, report: RunReport, judged: Sequence[Path], judged_at: str) -> list[Path]:
    """Store the finished checks of each of `judged` that was not stored whole (interrupted, or an `error` in it)
    with its settled operators (verify/resumed.py); the files stored. Not where the engine could not say which
    operators are settled (a whole-spec stage ran) or a whole-run finding is no file's."""
    settled = report.extra.get("settled_operators")
    if not judged or settled is None:
        return []
    owned, unowned = results_by_file(report.results)
    if any(r.outcome is not Outcome.SKIPPED for r in unowned):
        return []
    case_counts = report.extra.get("case_counts") or {}
    stored = []
    for spec in judged:
        results = [r for r in owned.get(Path(spec).resolve(), []) if keepable(r)]
        ops = {op for op in map(operator_of, results) if op is not None}
        mine = [op for op in settled if op in ops]
        dtypes = {op: d for op, d in (report.extra.get("settled_dtypes") or {}).items() if op in ops}
        counts = {op: count for op, count in case_counts.items() if op in mine or op in dtypes}
        if cache.store_partial(spec, results, mine, counts, judged_at, dtypes):
            stored.append(spec)
    return stored


def _store_judged(cache: VerdictCache, report: RunReport, judged: Sequence[Path], judged_at: str) -> list[Path]:
    """Store each judged file of a run whose every task ran; the files stored."""
    if not judged or report.extra.get("interrupted") or report.extra.get("not_run"):
        return []
    return _store(cache, report, judged, judged_at)


def _store(cache: VerdictCache, report: RunReport, judged: Sequence[Path], judged_at: str) -> list[Path]:
    """Store each of `judged` (files every task of which ran) with its results; the files stored."""
    if not judged:
        return []
    owned, unowned = results_by_file(report.results)
    if any(r.outcome is not Outcome.SKIPPED for r in unowned):  # a whole-run finding (a leaked process) is no file's
        return []
    case_counts = report.extra.get("case_counts") or {}
    stored = []
    for spec in judged:
        results = owned.get(Path(spec).resolve(), [])
        if cache.store(spec, results, _case_counts_of(results, case_counts), judged_at):
            stored.append(spec)
    return stored


def _resumed_counts(report: RunReport, resumed: ResumedChecks | None) -> dict[str, int]:
    """Per spec file, how many of its results this run took from a partial entry instead of judging them."""
    if not resumed or not resumed.taken:
        return {}
    counts: dict[str, int] = {}
    for result in report.results:
        spec = _file_of(result)
        if spec is not None and result.check_id in resumed.taken:
            counts[str(spec)] = counts.get(str(spec), 0) + 1
    return counts


def _merged(report: RunReport, request: "VerifyRequest", reused: Mapping[Path, CachedFile],
            judged: Sequence[Path], stored: Sequence[Path], started: float,
            resumed: ResumedChecks | None = None, partly: Sequence[Path] = ()) -> RunReport:
    """The run's report with the reused files' verdicts after the judged ones, and what the cache did."""
    results = list(report.results)
    case_counts = dict(report.extra.get("case_counts") or {})
    for spec, entry in reused.items():
        results += [mark_reused(r, entry.judged_at) for r in entry.results]
        case_counts.update(entry.case_counts)
    extra = dict(report.extra)
    extra["case_counts"] = case_counts
    if len(request.files) > 1:
        extra["specs"] = [str(path) for path in request.files]
        extra["spec"] = str(request.spec_file)
    extra["verdict_cache"] = {
        "reused": {str(spec): entry.judged_at for spec, entry in reused.items()},
        "judged": [str(spec) for spec in judged],
        "stored": [str(spec) for spec in stored],
        # judged in part before: how many of each file's stored results this run reported (verify/resumed.py)
        "resumed": _resumed_counts(report, resumed),
        "stored_in_part": [str(spec) for spec in partly],
    }
    duration = report.duration_s if judged else time.perf_counter() - started
    return dataclasses.replace(report, results=tuple(results), extra=extra, duration_s=duration)
