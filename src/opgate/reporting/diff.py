"""`opgate diff BASE.json NEW.json`: what a change did to a run, by check and by schema-2 figure key + labels.

New failures (a check that was not failing in BASE fails in NEW), fixed ones, checks that appeared or went,
and numeric figures that moved by more than the threshold, each with both values. A regression (a new failure
or error) makes the exit code 1; moved figures are reported, since only the reader knows which way is better
for a figure without a threshold; a moved figure that now breaks its threshold is a new failure anyway.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from opgate.model.errors import InputError
from opgate.reporting.metrics import Metric, report_metrics
from opgate.model.results import CheckResult, ExitCode, Outcome, RunReport

BAD = (Outcome.FAILED, Outcome.ERROR)


@dataclass(frozen=True)
class CheckChange:
    check_id: str
    before: str | None
    after: str | None
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"check_id": self.check_id, "before": self.before, "after": self.after, "reason": self.reason}


@dataclass(frozen=True)
class FigureMove:
    check_id: str
    key: str
    labels: str
    name: str
    before: float
    after: float
    unit: str

    @property
    def change(self) -> float:
        if self.before == 0:
            return float("inf") if self.after != 0 else 0.0
        return (self.after - self.before) / abs(self.before)

    def to_dict(self) -> dict[str, Any]:
        change = self.change
        return {"check_id": self.check_id, "key": self.key, "labels": self.labels, "name": self.name,
                "before": self.before, "after": self.after, "unit": self.unit,
                "change": round(change, 6) if change != float("inf") else "inf"}


@dataclass
class ReportDiff:
    verb: str
    threshold: float
    new_failures: list[CheckChange] = field(default_factory=list)
    fixed: list[CheckChange] = field(default_factory=list)
    added: list[CheckChange] = field(default_factory=list)
    removed: list[CheckChange] = field(default_factory=list)
    moved: list[FigureMove] = field(default_factory=list)

    @property
    def regressed(self) -> bool:
        return bool(self.new_failures)

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.CHECK_FAILED if self.regressed else ExitCode.OK

    def to_dict(self) -> dict[str, Any]:
        return {"verb": self.verb, "threshold": self.threshold, "regressed": self.regressed,
                "new_failures": [c.to_dict() for c in self.new_failures], "fixed": [c.to_dict() for c in self.fixed],
                "added": [c.to_dict() for c in self.added], "removed": [c.to_dict() for c in self.removed],
                "moved": [m.to_dict() for m in self.moved]}


def parse_threshold(text: str) -> float:
    """'5%' or '0.05' -> 0.05."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise InputError(f"--threshold {text!r} is not a number; give a relative change such as 5% or 0.05") from None
    if value < 0:
        raise InputError(f"--threshold {text!r} is negative; give a relative change such as 5%")
    return value


def _numeric(metrics: Sequence[tuple[CheckResult, Metric]]) -> dict[tuple[str, str, tuple], tuple[CheckResult, Metric]]:
    found = {}
    for result, metric in metrics:
        if metric.kind in ("number", "numstr") and metric.value is not None:
            found[(result.check_id, *metric.identity)] = (result, metric)
    return found


def diff_reports(base: RunReport, new: RunReport, threshold: float = 0.05) -> ReportDiff:
    if base.verb != new.verb:
        raise InputError(f"cannot diff an 'opgate {base.verb}' report against an 'opgate {new.verb}' report; "
                         "compare two reports of the same verb")
    diff = ReportDiff(verb=new.verb, threshold=threshold)
    before = {r.check_id: r for r in base.results}
    after = {r.check_id: r for r in new.results}
    for check_id, result in after.items():
        old = before.get(check_id)
        if old is None:
            change = CheckChange(check_id, None, result.outcome.value, result.reason)
            (diff.new_failures if result.outcome in BAD else diff.added).append(change)
        elif result.outcome in BAD and old.outcome not in BAD:
            diff.new_failures.append(CheckChange(check_id, old.outcome.value, result.outcome.value, result.reason))
        elif old.outcome in BAD and result.outcome not in BAD:
            diff.fixed.append(CheckChange(check_id, old.outcome.value, result.outcome.value, result.reason))
    for check_id, old in before.items():
        if check_id not in after:
            diff.removed.append(CheckChange(check_id, old.outcome.value, None, old.reason))
    old_figures = _numeric(report_metrics(base.results))
    for identity, (result, metric) in _numeric(report_metrics(new.results)).items():
        if identity not in old_figures:
            continue
        _, old_metric = old_figures[identity]
        move = FigureMove(result.check_id, metric.key, metric.label_text(), metric.name, float(old_metric.value),
                          float(metric.value), metric.unit)  # type: ignore[arg-type]
        if abs(move.change) > threshold:
            diff.moved.append(move)
    diff.moved.sort(key=lambda m: -abs(m.change) if m.change != float("inf") else -1e300)
    return diff


def render_diff(diff: ReportDiff, base_name: str, new_name: str) -> list[str]:
    lines = [f"opgate diff ({diff.verb}): {base_name} -> {new_name}, figures moving more than "
             f"{diff.threshold:.1%}"]
    for title, changes in (("new failures", diff.new_failures), ("fixed", diff.fixed),
                           ("new checks", diff.added), ("checks gone", diff.removed)):
        if changes:
            lines.append(f"{title} ({len(changes)}):")
            lines += [f"  {c.check_id}: {c.before or '-'} -> {c.after or '-'}  {c.reason}" for c in changes]
    if diff.moved:
        lines.append(f"figures moved ({len(diff.moved)}):")
        for m in diff.moved:
            change = "new non-zero" if m.change == float("inf") else f"{m.change:+.1%}"
            labels = f"{{{m.labels}}}" if m.labels else ""
            lines.append(f"  {m.key}{labels}: {m.before:.6g} -> {m.after:.6g} {m.unit} ({change})  [{m.check_id}]")
    verdict = "REGRESSION" if diff.regressed else "no regression"
    lines.append(f"{len(diff.new_failures)} new failure(s), {len(diff.fixed)} fixed, {len(diff.moved)} figure(s) "
                 f"moved: {verdict} — exit code {int(diff.exit_code)}")
    return lines
