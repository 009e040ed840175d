"""Portability matrix: compile every Triton implementation of a spec for each target, without a GPU.

One child process per (implementation, target), through opgate's isolated runner: a compiler crash or hang
costs that cell only. Inside the child (`TritonCompileCheck`), `opgate.analyze.capture` runs the launcher on
CPU tensors for every dtype and shape the operator declares, compiling each distinct kernel specialization for
the target; the cubin is read back for registers, shared and local memory (`opgate.analyze.resources`).

Each kernel gets a status:
  ok                 compiled, fits the target
  spills             compiled, but uses local memory (register spills / stack): runs, slowly (a warning)
  resource_overflow  compiled, but needs more shared memory per block than the target allows: cannot launch
  compile_error      Triton or ptxas rejected it for this target (first line of the error kept)
  capture_error      the launcher itself failed before launching (e.g. it needs a real GPU)
  timeout / crashed  the child process was killed or died (from the runner)
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from opgate.core.limits import SmLimits, known_ccs, sm_limits
from opgate.core.occupancy import KernelLaunch, OccupancyResult, occupancy
from opgate.analyze.roofline import dims_cases
from opgate.checks.base import Check, CheckContext
from opgate.model.errors import InputError
from opgate.model.results import CheckResult, Outcome

DEFAULT_TARGETS = ("sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120")
STATUS_OUTCOME = {
    "ok": Outcome.PASSED,
    "spills": Outcome.WARNED,
    "resource_overflow": Outcome.FAILED,
    "compile_error": Outcome.FAILED,
    "capture_error": Outcome.FAILED,
    "timeout": Outcome.ERROR,
    "crashed": Outcome.ERROR,
}
STATUS_ORDER = ("crashed", "timeout", "capture_error", "compile_error", "resource_overflow", "spills", "ok")


# -- targets -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Target:
    label: str  # "sm_90"
    arch: int  # 90: what Triton's GPUTarget takes

    @property
    def cc(self) -> tuple[int, int]:
        return self.arch // 10, self.arch % 10


def parse_targets(text: str | Sequence[str], allow_unknown: bool = False) -> list[Target]:
    """"sm_80,sm_90", "80,9.0", or GPU keys from the catalogue ("h100" -> sm_90); duplicates dropped.

    An architecture opgate has no SM limits for (sm_999) is refused unless `allow_unknown`
    (`--allow-unknown-arch`): its compile would fail in the compiler, not in the user's kernel."""
    from opgate.core.limits import parse_cc
    from opgate.core.gpus import lookup_gpu

    items = text.split(",") if isinstance(text, str) else [p for t in text for p in t.split(",")]
    targets: list[Target] = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        try:
            major, minor = parse_cc(item)
        except InputError:
            try:
                major, minor = lookup_gpu(item).compute_capability
            except InputError:
                raise InputError(
                    f"target {item!r} is neither an sm_XY architecture nor a GPU in opgate's catalogue; "
                    f"write e.g. sm_90 or h100"
                ) from None
        target = Target(f"sm_{major}{minor}", major * 10 + minor)
        if not allow_unknown and (major, minor) not in known_ccs():
            known = ", ".join(f"sm_{a}{b}" for a, b in sorted(known_ccs()))
            raise InputError(f"target {item!r} is not an architecture opgate knows ({known}); fix the name, or "
                             "pass --allow-unknown-arch to compile for it anyway")
        if target not in targets:
            targets.append(target)
    if not targets:
        raise InputError("--targets is empty; give at least one target, e.g. sm_90")
    return targets


def limits_for_arch(arch: int) -> SmLimits | None:
    cc = (arch // 10, arch % 10)
    return sm_limits(cc) if cc in known_ccs() else None


# -- results --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class KernelReport:
    """One distinct compiled kernel (a specialization) for one target."""

    label: str
    kernel_name: str
    status: str
    message: str = ""
    dtypes: tuple[str, ...] = ()  # operator dtypes whose launches produced this specialization
    shapes: int = 0  # how many (dtype, dims) launches produced it
    config: str = ""
    num_warps: int | None = None
    num_ctas: int | None = None
    registers: int | None = None
    static_shared_bytes: int | None = None
    dynamic_shared_bytes: int | None = None
    local_bytes: int | None = None
    resources_source: str = ""
    notes: tuple[str, ...] = ()
    occupancy: OccupancyResult | None = None  # filled in by the parent, never crosses the process boundary

    @property
    def threads_per_block(self) -> int | None:
        return None if self.num_warps is None else self.num_warps * 32

    @property
    def shared_bytes(self) -> int | None:
        if self.dynamic_shared_bytes is None and self.static_shared_bytes is None:
            return None
        return (self.static_shared_bytes or 0) + (self.dynamic_shared_bytes or 0)

    def to_dict(self) -> dict[str, Any]:
        data = {
            "label": self.label, "kernel_name": self.kernel_name, "status": self.status, "message": self.message,
            "dtypes": list(self.dtypes), "shapes": self.shapes, "config": self.config,
            "num_warps": self.num_warps, "num_ctas": self.num_ctas, "registers": self.registers,
            "static_shared_bytes": self.static_shared_bytes, "dynamic_shared_bytes": self.dynamic_shared_bytes,
            "local_bytes": self.local_bytes, "resources_source": self.resources_source, "notes": list(self.notes),
        }
        if self.occupancy is not None:
            data["occupancy"] = self.occupancy.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "KernelReport":
        return cls(
            label=data["label"], kernel_name=data["kernel_name"], status=data["status"],
            message=data.get("message", ""), dtypes=tuple(data.get("dtypes", ())), shapes=data.get("shapes", 0),
            config=data.get("config", ""), num_warps=data.get("num_warps"), num_ctas=data.get("num_ctas"),
            registers=data.get("registers"), static_shared_bytes=data.get("static_shared_bytes"),
            dynamic_shared_bytes=data.get("dynamic_shared_bytes"), local_bytes=data.get("local_bytes"),
            resources_source=data.get("resources_source", ""), notes=tuple(data.get("notes", ())),
        )


@dataclass(frozen=True)
class CompileOutcome:
    """Everything one (implementation, target) child found."""

    operator: str
    implementation: str
    target: str
    arch: int
    status: str
    message: str = ""
    kernels: tuple[KernelReport, ...] = ()
    duration_s: float = 0.0
    details: str = ""  # stderr tail or traceback when the child crashed

    def to_dict(self) -> dict[str, Any]:
        return {
            "operator": self.operator, "implementation": self.implementation, "target": self.target,
            "arch": self.arch, "status": self.status, "message": self.message,
            "kernels": [k.to_dict() for k in self.kernels], "duration_s": round(self.duration_s, 3),
            "details": self.details,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "CompileOutcome":
        return cls(
            operator=data["operator"], implementation=data["implementation"], target=data["target"],
            arch=data["arch"], status=data["status"], message=data.get("message", ""),
            kernels=tuple(KernelReport.from_dict(k) for k in data.get("kernels", ())),
            duration_s=float(data.get("duration_s", 0.0)), details=data.get("details", ""),
        )


def worst_status(statuses: Sequence[str]) -> str:
    for status in STATUS_ORDER:
        if status in statuses:
            return status
    return "ok"


# -- error headlines -------------------------------------------------------------------------------------

_LOCATION = re.compile(r"^at \d+:\d+:$")


def error_headline(exc: BaseException) -> str:
    """The one line of a Triton/ptxas error that says what is wrong.

    Triton's CompilationError starts with "at L:C:" and the offending source, and ends with the cause;
    PTXASError carries ptxas' stderr, whose "ptxas ..." line is the cause.
    """
    text = str(exc).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    for line in lines:
        if line.startswith("ptxas") and ("error" in line or "fatal" in line):
            return line
    if _LOCATION.match(lines[0]) and len(lines) > 1:
        return lines[-1]
    return f"{type(exc).__name__}: {lines[0]}" if not lines[0].startswith(type(exc).__name__) else lines[0]


# -- the child: capture and compile -----------------------------------------------------------------------------

def _capture_arguments(op: Any, dims: Mapping[str, int], dtype: str) -> list[Any]:
    """CPU tensors of the right shape and dtype (zeros: nothing is computed) and the scalars, in order."""
    import torch

    from opgate.core.spec import Scalar

    arguments: list[Any] = []
    for inp in op.inputs:
        if isinstance(inp, Scalar):
            arguments.append(inp.value)
            continue
        torch_dtype = getattr(torch, inp.dtype or dtype)
        arguments.append(torch.zeros(inp.concrete_shape(_full_dims(op, dims)), dtype=torch_dtype))
    return arguments


def _label(compiled: Any) -> str:
    src = compiled.src
    names = list(getattr(src.fn, "arg_names", []))
    constants = []
    for key, value in sorted(getattr(src, "constants", {}).items()):
        index = key[0] if isinstance(key, tuple) and key else key
        name = names[index] if isinstance(index, int) and index < len(names) else str(key)
        constants.append(f"{name}={value}")
    signature = getattr(src, "signature", {})
    pointers = sorted({v for v in signature.values() if isinstance(v, str) and v.startswith("*")})
    # Integer arguments Triton specialized as multiples of 16 (n=4096 and n=1000 compile differently).
    divisible = []
    for key, attributes in sorted(getattr(src, "attrs", {}).items()):
        index = key[0] if isinstance(key, tuple) and key else key
        if not isinstance(index, int) or index >= len(names):
            continue
        kind = signature.get(names[index], "")
        if isinstance(kind, str) and not kind.startswith("*") and ["tt.divisibility", 16] in list(attributes):
            divisible.append(f"{names[index]}%16")
    metadata = compiled.metadata
    parts = [*pointers, *constants, *divisible, f"num_warps={metadata.num_warps}"]
    if getattr(metadata, "num_stages", None) is not None:
        parts.append(f"num_stages={metadata.num_stages}")
    return f"{compiled.metadata.name}[{', '.join(parts)}]"


def _judge(report: KernelReport, limits: SmLimits | None, target: str) -> KernelReport:
    shared = report.shared_bytes or 0
    if limits is not None and shared > limits.smem_per_block_optin:
        return replace(report, status="resource_overflow", message=(
            f"needs {shared} B of shared memory per block; {target} allows at most "
            f"{limits.smem_per_block_optin} B"))
    if report.local_bytes:
        return replace(report, status="spills", message=(
            f"{report.local_bytes} B/thread of local memory (stack: register spills or local arrays)"))
    return report


def occupancy_static_shared(section_bytes: int, arch: int, limits: SmLimits | None) -> int:
    """Static shared memory as the driver reports it (CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES), from a cubin.

    From sm_90 on, ptxas puts the 1 KB the driver reserves per block at the start of the kernel's
    .nv.shared.<kernel> section (a kernel using only dynamic shared memory gets a 1024 B section); the driver
    reports static shared memory without it and adds the reserved 1 KB itself, e.g. 16 B static for a kernel
    with one `__shared__ int` on an H200 (NVIDIA/Fuser#5272). scripts/occupancy_driver_cases.py checks this
    mapping on a real GPU (cubin section vs the driver's attribute).
    """
    reserved = limits.reserved_smem_per_block if limits is not None else 1024
    if arch >= 90 and section_bytes >= reserved:
        return section_bytes - reserved
    return section_bytes


def _report_for(compiled: Any, limits: SmLimits | None, target: str, arch: int) -> KernelReport:
    from opgate.analyze.resources import read_kernel_resources

    metadata = compiled.metadata
    notes: list[str] = []
    resources = None
    cubin = compiled.asm.get("cubin") if hasattr(compiled.asm, "get") else None
    if cubin:
        resources = read_kernel_resources(cubin, metadata.name)
    if resources is None:
        notes.append("registers unknown: no cubin reader available (Triton reports them only on a GPU)")
    if getattr(metadata, "num_ctas", 1) and metadata.num_ctas > 1:
        notes.append(f"launches clusters of {metadata.num_ctas} CTAs; occupancy is per CTA")
    if getattr(metadata, "tmem_size", 0):
        notes.append(f"allocates {metadata.tmem_size} tensor-memory columns; occupancy does not model TMEM")
    report = KernelReport(
        label=_label(compiled),
        kernel_name=metadata.name,
        status="ok",
        num_warps=metadata.num_warps,
        num_ctas=getattr(metadata, "num_ctas", None),
        registers=resources.registers if resources else None,
        static_shared_bytes=(occupancy_static_shared(resources.static_shared_bytes, arch, limits)
                             if resources else 0),
        dynamic_shared_bytes=int(metadata.shared),  # Triton launches with this much dynamic shared memory
        local_bytes=resources.local_bytes if resources else None,
        resources_source=resources.source if resources else "triton metadata (shared memory only)",
        notes=tuple(notes),
    )
    return _judge(report, limits, target)


def _representative_sm_count(cc: tuple[int, int]) -> int:
    from opgate.core.gpus import all_gpus

    for gpu in all_gpus():
        if gpu.compute_capability == cc:
            return gpu.sm_count
    return 0


def compile_implementation(spec_file: str | Path, operator: str, implementation: str, arch: int,
                           dtypes: Sequence[str] | None = None) -> CompileOutcome:
    """Capture and compile every kernel of one implementation for one target (run this in a child process)."""
    from opgate.analyze.capture import GpuNeededError, compile_only
    from opgate.core.spec import load_spec_file

    started = time.perf_counter()
    target = f"sm_{arch}"
    limits = limits_for_arch(arch)
    # The compile-only driver must be active before the spec is imported: specs may ask it for a device.
    stand_in = limits or sm_limits("9.0")
    with compile_only(arch, stand_in, _representative_sm_count((arch // 10, arch % 10))) as recorder:
        op = next((o for o in load_spec_file(spec_file) if o.name == operator), None)
        if op is None or implementation not in op.implementations:
            raise InputError(f"spec {spec_file} has no implementation {implementation!r} of operator {operator!r}")
        launcher = op.implementations[implementation].fn
        failures: list[tuple[str, BaseException]] = []
        for dtype in dtypes or op.dtypes:
            for dims in dims_cases(op.dims):
                with recorder.tagged(dtype=dtype, dims=dims):
                    try:
                        launcher(*_capture_arguments(op, dims, dtype))
                    except Exception as exc:  # the launcher, not a kernel compile, failed
                        failures.append((dtype, exc))
        records = list(recorder.records)

    kernels: dict[str, KernelReport] = {}
    for record in records:
        if record.compiled is not None:
            key = record.compiled.hash
        else:
            key = f"error:{record.kernel_name}:{error_headline(record.error)}"  # type: ignore[arg-type]
        dtype = record.context.get("dtype", "")
        if key in kernels:
            known = kernels[key]
            kernels[key] = replace(known, shapes=known.shapes + 1,
                                   dtypes=known.dtypes + ((dtype,) if dtype not in known.dtypes else ()))
            continue
        if record.compiled is not None:
            report = _report_for(record.compiled, limits, target, arch)
        else:
            error = record.error
            status = "capture_error" if isinstance(error, GpuNeededError) else "compile_error"
            report = KernelReport(label=record.kernel_name, kernel_name=record.kernel_name, status=status,
                                  message=error_headline(error))  # type: ignore[arg-type]
        kernels[key] = replace(report, dtypes=(dtype,), shapes=1, config=record.config)
    for dtype, exc in failures:
        key = f"capture:{error_headline(exc)}"
        if key in kernels:
            known = kernels[key]
            kernels[key] = replace(known, shapes=known.shapes + 1,
                                   dtypes=known.dtypes + ((dtype,) if dtype not in known.dtypes else ()))
            continue
        kernels[key] = KernelReport(label="launcher", kernel_name="launcher", status="capture_error",
                                    message=error_headline(exc), dtypes=(dtype,), shapes=1)
    reports = tuple(kernels.values())
    if not reports:
        reports = (KernelReport(label="launcher", kernel_name="launcher", status="capture_error",
                                message="the implementation launched no Triton kernel"),)
    status = worst_status([k.status for k in reports])
    first_problem = next((k for k in reports if k.status == status and k.message), None)
    return CompileOutcome(operator=operator, implementation=implementation, target=target, arch=arch,
                          status=status, message=first_problem.message if first_problem else "",
                          kernels=reports, duration_s=time.perf_counter() - started)


class TritonCompileCheck(Check):
    """Child-process side of the portability matrix: one implementation, one target."""

    check_id = "analyze.portability"
    title = "Triton compile for one target"
    verbs = ("analyze",)
    timeout_s = 300.0

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        options = ctx.options
        outcome = compile_implementation(options["spec_file"], options["operator"], options["implementation"],
                                         int(options["arch"]), options.get("dtypes"))
        return self.result(STATUS_OUTCOME[outcome.status], outcome.message or outcome.status,
                           extra={"compile": outcome.to_dict()})


# -- the parent: run the matrix ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class MatrixRequest:
    spec_file: Path
    operator: str
    implementation: str
    target: Target
    dtypes: tuple[str, ...] | None = None


def with_occupancy(outcome: CompileOutcome) -> CompileOutcome:
    """Add the occupancy of every compiled kernel whose registers are known, for the target's CC."""
    limits = limits_for_arch(outcome.arch)
    if limits is None:
        return outcome
    kernels = []
    for kernel in outcome.kernels:
        if kernel.registers is not None and kernel.num_warps is not None and kernel.status in ("ok", "spills"):
            launch = KernelLaunch(
                threads_per_block=kernel.num_warps * 32,
                registers_per_thread=kernel.registers,
                static_shared_bytes=kernel.static_shared_bytes or 0,
                dynamic_shared_bytes=kernel.dynamic_shared_bytes or 0,
            )
            kernel = replace(kernel, occupancy=occupancy(launch, limits))
        kernels.append(kernel)
    return replace(outcome, kernels=tuple(kernels))


def run_matrix(requests: Sequence[MatrixRequest], jobs: int, timeout_s: float,
               on_done: Any = None) -> list[CompileOutcome]:
    """Run every request in its own child process (opgate.engine.runner), at most `jobs` at once."""
    from opgate.engine.runner import CheckTask, run_checks

    tasks = [
        CheckTask(
            check_id=f"analyze.portability.{r.operator}.{r.implementation}.{r.target.label}",
            title=f"{r.operator}/{r.implementation} on {r.target.label}",
            target="opgate.analyze.portability:TritonCompileCheck",
            timeout_s=timeout_s,
            context=CheckContext(verb="analyze", options={
                "spec_file": str(r.spec_file), "operator": r.operator, "implementation": r.implementation,
                "arch": r.target.arch, "dtypes": list(r.dtypes) if r.dtypes else None,
            }),
            # Compile for real: the interpreter would replace every @triton.jit with an interpreted function.
            env={"TRITON_INTERPRET": "0"},
        )
        for r in requests
    ]
    results = run_checks(tasks, jobs=jobs, on_done=on_done)
    outcomes = []
    for request, result in zip(requests, results):
        outcomes.append(with_occupancy(_outcome_from_result(request, result, timeout_s)))
    return outcomes


def _outcome_from_result(request: MatrixRequest, result: CheckResult, timeout_s: float) -> CompileOutcome:
    data = result.extra.get("compile")
    if data:
        return CompileOutcome.from_dict(data)
    if result.outcome is Outcome.ERROR and "timed out" in result.reason:
        status, message = "timeout", f"compiling took longer than {timeout_s:g} s and was stopped"
    else:
        # The child died, or the check raised (a bad implementation name, or an opgate bug: traceback in extra).
        status, message = "crashed", result.reason
    return CompileOutcome(operator=request.operator, implementation=request.implementation,
                          target=request.target.label, arch=request.target.arch, status=status, message=message,
                          duration_s=result.duration_s,
                          details=str(result.extra.get("stderr_tail") or result.extra.get("traceback") or ""))


def _full_dims(op: Any, dims: Mapping[str, int]) -> dict[str, int]:
    """`dims` with the spec's derived dims (Operator.derived_dims) filled in."""
    with_derived = getattr(op, "with_derived", None)
    return with_derived({k: v for k, v in dims.items() if k not in getattr(op, "derived_dims", {})}) \
        if with_derived else dict(dims)
