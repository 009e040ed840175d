"""What crosses the process boundary between `opgate verify`'s engine and its checks: typed, versioned payloads.

The engine builds one payload per task and puts `payload.to_dict()` into the task's CheckContext.options; the
check reads it back with `Payload.from_dict(ctx.options)`, which refuses a payload of another schema or kind or
with a missing field (a stale plugin or a mixed install), instead of falling back to defaults. Every default
lives here, once.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, TypeVar

SCHEMA = 1
P = TypeVar("P", bound="Payload")


class PayloadError(ValueError):
    """A task payload that does not match what the check expects (schema, kind, fields)."""


@dataclass(frozen=True)
class Payload:
    kind: ClassVar[str] = ""

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "kind": self.kind, **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls: type[P], data: Mapping[str, Any]) -> P:
        if data.get("schema") != SCHEMA:
            raise PayloadError(f"{cls.__name__}: task payload schema {data.get('schema')!r}, expected {SCHEMA} "
                               "(opgate and a stage plugin from different versions?)")
        if data.get("kind") != cls.kind:
            raise PayloadError(f"{cls.__name__}: task payload of kind {data.get('kind')!r}, expected {cls.kind!r}")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        missing = [name for name, f in fields.items() if name not in data
                   and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        if missing:
            raise PayloadError(f"{cls.__name__}: task payload lacks {', '.join(missing)}")
        return cls(**{name: data[name] for name in fields if name in data})


@dataclass(frozen=True)
class ImplementationRef:
    """Which implementation of which operator of which spec file."""

    spec_file: str  # absolute
    op: str
    impl: str


@dataclass(frozen=True)
class ImplementationPayload(Payload):
    """A payload about one implementation: the fields every verify check starts from."""

    spec_file: str  # absolute
    op: str
    impl: str

    @property
    def ref(self) -> ImplementationRef:
        return ImplementationRef(self.spec_file, self.op, self.impl)


@dataclass(frozen=True)
class NumericsPayload(ImplementationPayload):
    """One implementation x one dtype over the whole case plan (verify/check.py)."""

    kind: ClassVar[str] = "numerics"
    plan_path: str  # the plan file: cases, float64 truth, calibrated budgets (verify/planfile.py)
    artefact_dir: str  # IR per target, checked ONNX models
    workdir: str  # this task's scratch folder (the case journal of resume.py lives here)
    extras: bool = True  # opgate's extras (the reference through torch.compile / ONNX Runtime / TVM) exist
    shrink: bool = True
    case_timeout_s: float = 300.0
    time_budget_s: float = 0.0  # seconds of cases this check may spend (verify/time_budget.py); 0: no cap
    # where one thread calibrated the operator's dtypes in turn: the epoch seconds that began (0: otherwise), the
    # check's full share and the operator's budget; the check takes what is left when it starts (budget_at_start)
    operator_began_at: float = 0.0
    share_s: float = 0.0
    operator_budget_s: float = 0.0
    # the file where this implementation's checks of every dtype share what each case cost (verify/case_costs.py)
    case_costs_path: str = ""


@dataclass(frozen=True)
class CompileAheadPayload(ImplementationPayload):
    """One implementation x dtype's kernels compiled for its case plan before its calibration ends
    (verify/compile_ahead.py)."""

    kind: ClassVar[str] = "compile_ahead"
    dtype: str
    budget: str  # the plan's budget level and seed: the task plans the same cases as the calibration
    seed: int
    plan_path: str  # the calibration's plan file of this operator x dtype: once it exists, the task stops
    workdir: str


@dataclass(frozen=True)
class GpuStagePayload(ImplementationPayload):
    """One GPU stage check of one implementation: runtime, sanitizer, recovery, ncu, qos."""

    kind: ClassVar[str] = "gpu_stage"
    dtype: str
    seed: int = 0
    tool: str = "memcheck"  # the sanitizer stage's compute-sanitizer tool
    repeats: int = 50  # timed calls of the runtime stage
    trials: int = 3  # out-of-memory trials of the recovery stage
    slo_p95_us: float | None = None  # the qos stage's SLO (else the spec's)
    # The sanitizer stage's shared run (verify/sanitizer_batch.py): the group's folder, and in the group's first
    # task the members it runs for all ([{op, impl, dtype}]); the other members read its record
    group_dir: str = ""
    group: list[dict[str, str]] = dataclasses.field(default_factory=list)
    # the implementation x dtype's folder of the report's artefacts (--out): the sanitizer's logs go there
    artefact_dir: str = ""
    # the runtime stage: where its warm-up leaves the operator's work count at the timing size for the measurement
    # (core/work.py operator_work_stored), so the exclusive check does not count it while it holds the GPU alone
    work_count_path: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise PayloadError(f"GpuStagePayload: seed must be an int, not {self.seed!r}")
        slo = self.slo_p95_us
        if slo is not None and (isinstance(slo, bool) or not isinstance(slo, (int, float)) or slo <= 0):
            raise PayloadError(f"GpuStagePayload: slo_p95_us must be a positive number of microseconds or None, "
                               f"not {slo!r}")
