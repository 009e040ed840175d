"""The finished checks of a spec file an earlier run judged only in part, reported instead of run again.

A run that stops before it has judged a file wholly (a CI job's time limit, Ctrl-C) or that ends with an `error` in
it stores that file's finished results as a partial entry beside the verdict cache's (verify/verdict_cache.py: the
same key, so nothing the verdicts depend on changed): every result that is not an `error`, and the operators that
are *settled*, whose calibration and every check that needs it finished. The next run judges the file again, but

- a task whose check id has a stored result does not run: the stored result is reported, marked reused;
- a settled operator is not calibrated again: its calibration result and its numerics results are the stored ones;
- an operator that is not settled is calibrated again (the same seed gives the same plan), in only the dtypes
  whose checks did not all finish where the earlier run had calibrated it whole (its stored calibration result then
  stands for it), and only those of its checks that have no stored result run.

Why at the check and not the file: on the H200 a library run stopped at its limit had judged 170 of its 188
numerics checks but none of its runtime or recovery measurements, so no file was complete and the next run judged
everything again (twenty-ninth H200 session, docs/benchmarks.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

from opgate.engine.runner import CheckTask
from opgate.model.results import CheckResult, Outcome

# The runtime stage's warm-up task of check `X` is `X_warm_up` (verify/builtin_stages.py): its result is internal,
# never stored, and it serves no other check.
WARM_UP_SUFFIX = "_warm_up"


def operator_of(result: CheckResult) -> str | None:
    """The operator a result judged: its `op` label (the runner copies it from the task), else extra["op"]."""
    op = (result.labels or {}).get("op")
    if op is None and isinstance(result.extra, dict):
        op = result.extra.get("op")
    return str(op) if op is not None else None


def dtype_of(result: CheckResult) -> str | None:
    """The dtype a result judged (its `dtype` label, else extra["dtype"]), or None for one about no dtype."""
    dtype = (result.labels or {}).get("dtype")
    if dtype is None and isinstance(result.extra, dict):
        dtype = result.extra.get("dtype")
    return str(dtype) if dtype is not None else None


def keepable(result: CheckResult) -> bool:
    """Whether a finished result may stand for its check in a later run: not an `error` (opgate could not judge:
    that may not recur) and not one of the engine's own scheduling results."""
    internal = isinstance(result.extra, dict) and bool(result.extra.get("internal"))
    return result.outcome is not Outcome.ERROR and not internal


@dataclass
class ResumedChecks:
    """Stored results of the files being judged again, by check id, and their settled operators."""

    results: dict[str, CheckResult] = field(default_factory=dict)
    settled: set[str] = field(default_factory=set)
    case_counts: dict[str, int] = field(default_factory=dict)
    # operator -> dtypes whose plan was calibrated and every check that needed it finished
    settled_dtypes: dict[str, set[str]] = field(default_factory=dict)
    taken: set[str] = field(default_factory=set)  # the check ids reported from here instead of run

    def add(self, results: Iterable[CheckResult], settled: Iterable[str], case_counts: Mapping[str, int],
            settled_dtypes: Mapping[str, Iterable[str]] | None = None) -> None:
        for result in results:
            self.results[result.check_id] = result
        self.settled.update(settled)
        self.case_counts.update(case_counts)
        for op, dtypes in (settled_dtypes or {}).items():
            self.settled_dtypes.setdefault(op, set()).update(dtypes)

    def calibration_of(self, op_name: str) -> CheckResult | None:
        """The operator's stored calibration result when it was calibrated whole and it judged (not an `error`)."""
        return self.results.get(f"verify.{op_name}.calibration")

    def skippable_dtypes(self, op_name: str, dtypes: Sequence[str]) -> list[str]:
        """Of an operator that is not settled, the dtypes not to calibrate again: each settled before, and only
        when its stored calibration result stands for the rest (calibrated whole then) and a dtype is left to
        calibrate."""
        if op_name in self.settled or self.calibration_of(op_name) is None:
            return []
        skip = [d for d in dtypes if d in self.settled_dtypes.get(op_name, set())]
        return skip if len(skip) < len(dtypes) else []

    def of_dtypes(self, op_name: str, dtypes: Iterable[str]) -> list[CheckResult]:
        """The stored results of these dtypes of an operator not reported yet (the checks of the dtypes that are
        not calibrated again); the calibration result is taken too (it stands for the operator)."""
        wanted = set(dtypes)
        found = self._take_stored(op_name, lambda result: dtype_of(result) in wanted)
        calibration = self.calibration_of(op_name)
        if calibration is not None:
            self.taken.add(calibration.check_id)
        return found

    def _take_stored(self, op_name: str, wanted: Callable[[CheckResult], bool]) -> list[CheckResult]:
        """The operator's stored results not taken yet that `wanted` accepts, marked taken."""
        found = [result for check_id, result in self.results.items()
                 if check_id not in self.taken and operator_of(result) == op_name and wanted(result)]
        self.taken.update(result.check_id for result in found)
        return found

    def __bool__(self) -> bool:
        return bool(self.results)

    def take(self, items: Sequence[tuple[int, CheckTask]]) -> tuple[list[tuple[int, CheckTask]], list[CheckResult]]:
        """The tasks still to run, and the stored results of the others."""
        kept: list[tuple[int, CheckTask]] = []
        stored: list[CheckResult] = []
        for order, task in items:
            result = self.results.get(task.check_id)
            if result is not None:
                stored.append(result)
                self.taken.add(task.check_id)
            elif not (task.check_id.endswith(WARM_UP_SUFFIX)
                      and task.check_id.removesuffix(WARM_UP_SUFFIX) in self.results):
                kept.append((order, task))  # (a warm-up serves only its check: none for a stored one)
        return kept, stored

    def of_settled(self, op_name: str, known: Iterable[str] = ()) -> list[CheckResult]:
        """A settled operator's stored results not reported yet (its calibration, and the checks that needed it),
        except the check ids in `known` (what the run reports afresh: a stage's up-front `skipped` line)."""
        if op_name not in self.settled:
            return []
        known_ids = set(known)
        return self._take_stored(op_name, lambda result: result.check_id not in known_ids)
