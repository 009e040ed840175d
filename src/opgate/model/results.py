"""Check results: evidence, not booleans.

Declared fields plus one explicit `extra` dict, never free attributes. Each type's `to_dict`/`from_dict` is its
plain layout (schema 1): what a check's worker hands the runner. The report document `--json` writes (schema 2:
every figure with its key and labels) is encoded and decoded in one place, `opgate.reporting.schema`.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

SCHEMA_VERSION = 1  # the plain layout of to_dict/from_dict; `--json` files are schema 2 (opgate.reporting.schema)

# A result's extra key (its value says why): the check left its process holding what only the process's exit gives
# back (a failed CUDA graph capture's memory pool: opgate.gpu.probes.graphs.release_abandoned_pool), or with a
# caching allocator that no longer works (engine/worker.py allocator_fault), so its warm worker ends after it, as
# after a poisoned context; the worker (engine/worker.py) and the runner both read it.
RETIRE_WORKER = "retire_worker"



class Outcome(str, enum.Enum):
    PASSED = "passed"
    WARNED = "warned"
    FAILED = "failed"
    SKIPPED = "skipped"
    ERROR = "error"

    @property
    def is_problem(self) -> bool:
        return self in (Outcome.FAILED, Outcome.ERROR)


def worst_outcome(outcomes: Sequence[Outcome]) -> Outcome:
    """Combine sub-verdicts: error > failed > warned > passed; nothing but skipped (or nothing at all) is skipped."""
    for outcome in (Outcome.ERROR, Outcome.FAILED, Outcome.WARNED, Outcome.PASSED):
        if outcome in outcomes:
            return outcome
    return Outcome.SKIPPED


@dataclass(frozen=True)
class Threshold:
    """What a figure was judged against, and where that number comes from."""

    value: float | int | str
    comparison: str  # ">=", "<=", "==", "<", ">"
    source: str

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "comparison": self.comparison, "source": self.source}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Threshold":
        return cls(value=data["value"], comparison=data["comparison"], source=data["source"])


def slug(text: str) -> str:
    """A key part from words: lower-case, joined by underscores ('PCIe width (current/max)' ->
    'pcie_width_current_max'); for a figure key that names a thing from data (a symbol, a library family)."""
    words = re.findall(r"[A-Za-z0-9]+", text.replace("%", " pct "))
    return "_".join(w.lower() for w in words) or "value"


def gpu_labels(index: int | str | None, uuid: str | None = "", pci_bus_id: str | None = "") -> dict[str, str]:
    """The labels that name the GPU a figure is about: its index as this process counts them, and where known
    its UUID and PCI bus id (stable across reboots and CUDA_VISIBLE_DEVICES)."""
    labels = {"gpu": str(index)} if index is not None else {}
    if uuid:
        labels["uuid"] = str(uuid)
    if pci_bus_id:
        labels["pci_bus_id"] = str(pci_bus_id)
    return labels


@dataclass(frozen=True)
class Figure:
    """One measured or read value with its unit, e.g. ("HBM read bandwidth", 4.51, "TB/s").

    `name` is prose for people; `key` ("hbm.read_bandwidth") and `labels` ({"gpu": "0"}) are its identity for
    machines, set by the code that measures it (the result's own labels, from where its task was planned, are
    merged in by opgate.reporting.metrics). A figure without a key (a third-party check's) gets one derived from
    its name and check id there."""

    name: str
    value: float | int | str | bool | None
    unit: str = ""
    threshold: Threshold | None = None
    key: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        value = self.value
        if isinstance(value, float) and not math.isfinite(value):
            value = repr(value)  # JSON has no NaN/Inf; keep them readable instead of invalid JSON
        data: dict[str, Any] = {
            "name": self.name,
            "value": value,
            "unit": self.unit,
            "threshold": self.threshold.to_dict() if self.threshold else None,
        }
        if self.key:  # written only when set, so a keyless figure's dict stays what it was
            data["key"] = self.key
        if self.labels:
            data["labels"] = dict(self.labels)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Figure":
        value = data["value"]
        if value in ("nan", "inf", "-inf") and not data.get("kind"):  # to_dict's spelling of a non-finite float
            value = float(value)
        threshold = data.get("threshold")
        labels = data.get("labels")
        return cls(
            name=data["name"],
            value=value,
            unit=data.get("unit", ""),
            threshold=Threshold.from_dict(threshold) if threshold else None,
            key=str(data.get("key") or ""),
            labels={str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {},
        )


@dataclass(frozen=True)
class CheckResult:
    """One check's verdict and its evidence. `stage` (verify's "numerics", "sanitizer", ...; analyze's
    "roofline", ...) and `labels` (op, impl, dtype, tool, ...) say what it judged: set where its task was planned
    (opgate.engine.runner.CheckTask) and copied onto the result by the runner, or by the check for what only it
    knows."""

    check_id: str
    title: str
    outcome: Outcome
    reason: str
    figures: tuple[Figure, ...] = ()
    remediation: str = ""
    duration_s: float = 0.0
    extra: Mapping[str, Any] = field(default_factory=dict)
    stage: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return not self.outcome.is_problem

    def with_duration(self, duration_s: float) -> "CheckResult":
        return dataclasses.replace(self, duration_s=duration_s)

    def with_identity(self, stage: str, labels: Mapping[str, str]) -> "CheckResult":
        """The result with the stage and labels its task was planned with; what the check set itself wins."""
        return dataclasses.replace(self, stage=self.stage or stage, labels={**labels, **self.labels})

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "check_id": self.check_id,
            "title": self.title,
            "outcome": self.outcome.value,
            "reason": self.reason,
            "figures": [f.to_dict() for f in self.figures],
            "remediation": self.remediation,
            "duration_s": round(self.duration_s, 6),
            "extra": dict(self.extra),
        }
        if self.stage:  # written only when set, so a result planned without them reads as before
            data["stage"] = self.stage
        if self.labels:
            data["labels"] = dict(self.labels)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "CheckResult":
        labels = data.get("labels")
        return cls(
            check_id=data["check_id"],
            title=data.get("title", data["check_id"]),
            outcome=Outcome(data["outcome"]),
            reason=data["reason"],
            figures=tuple(Figure.from_dict(f) for f in data.get("figures", ())),
            remediation=data.get("remediation", ""),
            duration_s=float(data.get("duration_s", 0.0)),
            extra=dict(data.get("extra", {})),
            stage=str(data.get("stage") or ""),
            labels={str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {},
        )


class ExitCode(enum.IntEnum):
    OK = 0
    CHECK_FAILED = 1
    BAD_INPUT = 2
    INTERNAL_ERROR = 3
    INTERRUPTED = 130  # Ctrl-C or SIGTERM: the shell's 128 + SIGINT; the report (if any) says `interrupted`


def exit_code_for(results: Sequence[CheckResult], strict: bool = False) -> ExitCode:
    """0 all passed (warnings allowed), 1 any check failed (warnings too under --strict),
    3 a check could not complete (`error`) and nothing failed outright."""
    outcomes = {r.outcome for r in results}
    if Outcome.FAILED in outcomes or (strict and Outcome.WARNED in outcomes):
        return ExitCode.CHECK_FAILED
    if Outcome.ERROR in outcomes:
        return ExitCode.INTERNAL_ERROR
    return ExitCode.OK


def exit_code_at_time_limit(results: Sequence[CheckResult]) -> ExitCode:
    """A run stopped by its own --time-limit is not interrupted: 1 when a check it finished failed, else 3 (it could
    not judge everything in time)."""
    failed = any(r.outcome is Outcome.FAILED for r in results)
    return ExitCode.CHECK_FAILED if failed else ExitCode.INTERNAL_ERROR


@dataclass(frozen=True)
class RunReport:
    """Everything one opgate invocation found; what `--json` writes."""

    verb: str
    results: tuple[CheckResult, ...]
    started_at: str
    duration_s: float
    host: Mapping[str, Any] = field(default_factory=dict)
    tool_version: str = ""
    strict: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)
    input_errors: tuple[str, ...] = ()  # one-line errors for inputs that could not be read at all

    @property
    def exit_code(self) -> ExitCode:
        """Unreadable input (exit 2) outranks verdicts: the run could not judge what it was given."""
        if self.extra.get("interrupted"):
            if self.extra.get("time_limit_s"):
                return exit_code_at_time_limit(self.results)
            return ExitCode.INTERRUPTED
        if self.input_errors:
            return ExitCode.BAD_INPUT
        return exit_code_for(self.results, self.strict)

    def counts(self) -> dict[str, int]:
        counts = {o.value: 0 for o in Outcome}
        for r in self.results:
            counts[r.outcome.value] += 1
        return counts

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "tool": "opgate",
            "tool_version": self.tool_version,
            "verb": self.verb,
            "started_at": self.started_at,
            "duration_s": round(self.duration_s, 6),
            "host": dict(self.host),
            "strict": self.strict,
            "exit_code": int(self.exit_code),
            "interrupted": bool(self.extra.get("interrupted", False)),
            "counts": self.counts(),
            "results": [r.to_dict() for r in self.results],
            "input_errors": list(self.input_errors),
            "extra": dict(self.extra),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "RunReport":
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ValueError(
                f"report schema version {version!r} is not this plain layout's ({SCHEMA_VERSION}); decode a "
                "`--json` report with opgate.reporting.schema.decode_report, or read it with the opgate release "
                "that wrote it"
            )
        return cls(
            verb=data["verb"],
            results=tuple(CheckResult.from_dict(r) for r in data["results"]),
            started_at=data["started_at"],
            duration_s=float(data["duration_s"]),
            host=dict(data.get("host", {})),
            tool_version=data.get("tool_version", ""),
            strict=bool(data.get("strict", False)),
            extra=dict(data.get("extra", {})),
            input_errors=tuple(data.get("input_errors", ())),
        )
