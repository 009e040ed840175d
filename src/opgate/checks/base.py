"""Base class for every check. The base owns the ceremony (timing, skip and exception capture);
a subclass implements only `evaluate`, which judges facts and returns a CheckResult.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Sequence

from opgate.model.errors import SkipCheck
from opgate.model.results import CheckResult, Figure, Outcome, worst_outcome


@dataclass(frozen=True)
class CheckContext:
    """What a check may know about the invocation. Plain data so it crosses a process boundary."""

    verb: str = "doctor"
    level: str = "basic"
    options: Mapping[str, Any] = field(default_factory=dict)
    # Seconds the runner lets this check's process live: its task's timeout (the runner sets it, from the check
    # class's `timeout_s` for doctor, from the stage's declaration for verify); None when run outside the runner.
    timeout_s: float | None = None


class Check:
    """Subclass, set `check_id`, `title`, and implement `evaluate`.

    `verbs` says which opgate verbs run it, `levels` at which `--level` it runs,
    `timeout_s` how long the runner lets its child process live.

    A check a verify stage runs sets none of `check_id`, `title`, `timeout_s`: the stage declares its tasks'
    timeout and exclusivity (opgate.engine.stages.Stage), the runner names the result after its task, and the
    check reads its limit from `CheckContext.timeout_s`.
    """

    check_id: ClassVar[str] = ""
    title: ClassVar[str] = ""
    verbs: ClassVar[tuple[str, ...]] = ("doctor",)
    levels: ClassVar[tuple[str, ...]] = ("basic", "standard")
    timeout_s: ClassVar[float] = 60.0

    def evaluate(self, ctx: CheckContext) -> CheckResult:  # pragma: no cover - abstract
        raise NotImplementedError

    # -- ceremony -------------------------------------------------------------------------
    def run(self, ctx: CheckContext) -> CheckResult:
        start = time.perf_counter()
        try:
            result = self.evaluate(ctx)
        except SkipCheck as skip:
            result = self.skipped(str(skip))
        except Exception as exc:  # a crash inside one check is that check's `error`, not the run's
            result = self.result(
                Outcome.ERROR,
                f"check raised {type(exc).__name__}: {exc}",
                extra={"traceback": traceback.format_exc(limit=12)},
            )
        return result.with_duration(time.perf_counter() - start)

    # -- helpers for subclasses -----------------------------------------------------------
    def result(
        self,
        outcome: Outcome,
        reason: str,
        figures: Sequence[Figure] = (),
        remediation: str = "",
        extra: Mapping[str, Any] | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> CheckResult:
        """`labels`: what only the check knows about every figure it reports (the sizes it timed at, the binary
        it read); the runner adds those of its task (op, impl, dtype, ...)."""
        return CheckResult(
            check_id=self.check_id,
            title=self.title or self.check_id,
            outcome=outcome,
            reason=reason,
            figures=tuple(figures),
            remediation=remediation,
            extra=dict(extra or {}),
            labels=dict(labels or {}),
        )

    def verdict(
        self,
        outcomes: Sequence[Outcome],
        figures: Sequence[Figure],
        reasons: Sequence[str],
        remediation: str = "",
        extra: Mapping[str, Any] | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> CheckResult:
        """The result of a check that judged several things (each GPU, each direction, each sub-check): the worst of
        `outcomes` (nothing judged is `skipped`), the `reasons` joined by "; ", and `remediation` only when that
        verdict is a warning or a problem, never beside a pass."""
        outcome = worst_outcome(outcomes)
        shown = remediation if outcome in (Outcome.WARNED, Outcome.FAILED, Outcome.ERROR) else ""
        return self.result(outcome, "; ".join(reasons), figures, remediation=shown, extra=extra, labels=labels)

    def passed(self, reason: str, **kw: Any) -> CheckResult:
        return self.result(Outcome.PASSED, reason, **kw)

    def warned(self, reason: str, **kw: Any) -> CheckResult:
        return self.result(Outcome.WARNED, reason, **kw)

    def failed(self, reason: str, **kw: Any) -> CheckResult:
        return self.result(Outcome.FAILED, reason, **kw)

    def skipped(self, reason: str, **kw: Any) -> CheckResult:
        return self.result(Outcome.SKIPPED, reason, **kw)
