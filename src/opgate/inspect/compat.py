"""Fleet verdict: will each binary run on each target GPU, natively, through PTX JIT, or not at all?

Rules (NVIDIA CUDA Programming Guide, "Binary compatibility" / "PTX compatibility" and the
arch/family-specific feature notes of CUDA 12.9+):
- SASS for sm_XY runs on compute capability X.Z with Z >= Y (same major). `a` (arch-specific) SASS runs
  only on exactly X.Y. `f` (family-specific) SASS runs on the family: same major, Z >= Y
  (sm_100f on 10.0 and 10.3, sm_120f on 12.0 and 12.1).
- PTX for compute_XY is JIT-compiled by the driver for any GPU of capability >= X.Y; compute_XYa PTX
  only for exactly X.Y; compute_XYf PTX for the family. The driver must know the PTX ISA version:
  PTX from a newer toolkit fails with cudaErrorUnsupportedPtxVersion (cuda-facts.md §1b).
The driver -> CUDA -> PTX ISA mapping comes from the data tables `cuda_toolkit_drivers` and `ptx_isa`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from opgate.core.cuda_versions import parse_version
from opgate.data import load_table
from opgate.model.errors import InputError
from opgate.inspect.model import KIND_PTX, KIND_SASS, BinaryReport, FatbinEntry, sm_to_cc

NATIVE = "native"
JIT = "jit"
UNSUPPORTED = "unsupported"
NO_DEVICE_CODE = "no-device-code"
UNREADABLE = "unreadable"

_SM_TOKEN = re.compile(r"^(?:sm|compute)_(\d{2,3})([af]?)$")
_DRIVER = re.compile(r"^\d+(?:\.\d+){0,2}$")


@dataclass(frozen=True)
class Target:
    """One kind of GPU in the fleet: its architecture and, when known, the driver it runs."""

    label: str
    sm: int
    gpu: str | None = None  # catalogue name
    driver: str | None = None
    count: int | None = None

    @property
    def cc(self) -> tuple[int, int]:
        return sm_to_cc(self.sm)

    def describe(self) -> str:
        text = f"{self.label} (sm_{self.sm})"
        return text + (f", driver {self.driver}" if self.driver else "")

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "sm": self.sm, "gpu": self.gpu, "driver": self.driver, "count": self.count}


@dataclass(frozen=True)
class Verdict:
    binary: str
    target: Target
    status: str  # native | jit | unsupported | no-device-code | unreadable
    reason: str
    sass: tuple[str, ...] = ()  # SASS images that serve this target
    ptx: tuple[str, ...] = ()  # PTX images the driver can JIT for it
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"binary": self.binary, "target": self.target.to_dict(), "status": self.status,
                "reason": self.reason, "sass": list(self.sass), "ptx": list(self.ptx),
                "warnings": list(self.warnings)}


# -- versions and data tables ------------------------------------------------------------------------

@dataclass(frozen=True)
class DriverCapability:
    """What one driver version can do: the newest CUDA release it fully supports, the newest PTX ISA."""

    driver: str
    cuda: str | None  # None: older than every release in the table
    max_ptx_isa: str | None
    uncertain: bool
    source: str


def driver_capability(driver: str) -> DriverCapability:
    rows = sorted(load_table("cuda_toolkit_drivers"), key=lambda r: parse_version(r["linux_min_driver"]))
    have = parse_version(driver)
    best = None
    for row in rows:
        if parse_version(row["linux_min_driver"]) <= have:
            best = row
    if best is None:
        return DriverCapability(driver, None, None, False, rows[0]["source"])
    isa_rows = [r for r in load_table("ptx_isa") if parse_version(r["cuda"]) <= parse_version(best["cuda"])]
    isa = max(isa_rows, key=lambda r: parse_version(r["ptx_isa"])) if isa_rows else None
    return DriverCapability(
        driver=driver,
        cuda=best["cuda"],
        max_ptx_isa=isa["ptx_isa"] if isa else None,
        uncertain=bool(best.get("uncertain") or (isa and isa.get("uncertain"))),
        source=f"{best['source']}; {isa['source'] if isa else ''}",
    )


def min_driver_for_ptx(isa: str) -> tuple[str, str] | None:
    """(CUDA release, Linux driver) of the oldest release in the tables whose driver can JIT this ISA."""
    releases = {r["cuda"]: r["linux_min_driver"] for r in load_table("cuda_toolkit_drivers")}
    for row in sorted(load_table("ptx_isa"), key=lambda r: parse_version(r["cuda"])):
        if parse_version(row["ptx_isa"]) >= parse_version(isa) and row["cuda"] in releases:
            return row["cuda"], releases[row["cuda"]]
    return None


def min_driver_for_compression(kind: str) -> tuple[str, bool] | None:
    for row in load_table("fatbin_compression"):
        if row["compression"] == kind:
            return row["min_driver"], bool(row.get("uncertain"))
    return None


# -- targets -------------------------------------------------------------------------------------------

def parse_targets(text: str) -> list[Target]:
    """`h100,a100@535.104.05,sm_89`: GPU catalogue names or sm_XY, each optionally `@DRIVER`."""
    targets = []
    for token in (t.strip() for t in text.split(",")):
        if not token:
            continue
        name, _, driver = token.partition("@")
        targets.append(_target(name.strip(), driver.strip() or None, None, f"--targets {token!r}"))
    if not targets:
        raise InputError("--targets is empty; give GPU names or architectures, e.g. --targets h100,a100,sm_89")
    return targets


def _compilable_sm_range() -> tuple[int, int]:
    """The lowest and highest sm any CUDA release in the cuda_arch_targets table compiles for."""
    rows = load_table("cuda_arch_targets")
    return min(int(r["lowest_sm"]) for r in rows), max(int(r["highest_sm"]) for r in rows)


def _target(name: str, driver: str | None, count: int | None, where: str, label: str | None = None) -> Target:
    if driver is not None and not _DRIVER.match(driver):
        raise InputError(f"{where}: driver version {driver!r} is not like 550.54.15; use the version "
                         "`nvidia-smi` prints")
    match = _SM_TOKEN.match(name.lower())
    if match:
        sm = int(match.group(1))
        lowest, highest = _compilable_sm_range()
        if not lowest <= sm <= highest:  # sm_999: no toolkit builds for it, so no binary can carry it (as analyze says)
            raise InputError(f"{where}: sm_{sm} is not an architecture any CUDA release in opgate's tables compiles "
                             f"for (sm_{lowest} to sm_{highest}); fix the name, e.g. sm_90")
        return Target(label or f"sm_{sm}", sm, None, driver, count)
    from opgate.core.gpus import lookup_gpu

    try:
        gpu = lookup_gpu(name)
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None
    return Target(label or gpu.key, gpu.sm, gpu.name, driver, count)


FLEET_FORMAT = """\
A fleet file is TOML with one [[gpu]] table per kind of GPU host:

    [[gpu]]
    model = "h100"          # GPU catalogue name (opgate's gpus table) or an sm_XY architecture
    driver = "550.54.15"    # NVIDIA driver version on those hosts (optional; enables the PTX JIT check)
    name = "prod-h100"      # label in the verdict table (optional; default: the model)
    count = 64              # number of GPUs (optional, informational)
"""


def load_fleet(path: Path) -> list[Target]:
    try:
        import tomllib  # type: ignore[import-not-found]
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

    try:
        doc = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"fleet file {path}: cannot be read ({exc.strerror or exc})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"fleet file {path}: not valid TOML ({exc}); see `opgate inspect --help`") from None
    rows = doc.get("gpu")
    if not isinstance(rows, list) or not rows:
        raise InputError(f"fleet file {path}: no [[gpu]] tables; each needs at least model = \"h100\" "
                         "(and driver = \"550.54.15\")")
    targets = []
    for index, row in enumerate(rows):
        where = f"fleet file {path}, [[gpu]] #{index + 1}"
        if not isinstance(row, dict) or not isinstance(row.get("model"), str):
            raise InputError(f"{where}: missing model = \"<gpu name or sm_XY>\"")
        unknown = set(row) - {"model", "driver", "name", "count"}
        if unknown:
            raise InputError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; allowed: model, driver, name, count")
        driver = row.get("driver")
        if driver is not None and not isinstance(driver, str):
            raise InputError(f"{where}: driver must be a string like \"550.54.15\"")
        count = row.get("count")
        if count is not None and (not isinstance(count, int) or count < 0):
            raise InputError(f"{where}: count must be a non-negative integer")
        name = row.get("name")
        if name is not None and not isinstance(name, str):
            raise InputError(f"{where}: name must be a string")
        targets.append(_target(row["model"], driver, count, where, label=name))
    return targets


# -- the verdict ---------------------------------------------------------------------------------------

def sass_runs_on(entry: FatbinEntry, target: Target) -> bool:
    if entry.sm is None:
        return False
    if entry.suffix == "a":
        return entry.sm == target.sm
    major, minor = sm_to_cc(entry.sm)
    t_major, t_minor = target.cc
    return major == t_major and minor <= t_minor  # plain and `f` (family = same major, newer minor)


def ptx_targets(entry: FatbinEntry, target: Target) -> bool:
    """Can this PTX be JIT-compiled for the target's architecture (ISA version aside)?"""
    if entry.sm is None:
        return False
    if entry.suffix == "a":
        return entry.sm == target.sm
    if entry.suffix == "f":
        major, minor = sm_to_cc(entry.sm)
        return major == target.cc[0] and minor <= target.cc[1]
    return sm_to_cc(entry.sm) <= target.cc


def runtime_floor_verdict(report: BinaryReport, target: Target, verdict: Verdict) -> Verdict:
    """A SASS/PTX verdict that also runs: is the target's driver new enough for the binary's CUDA runtime?

    A host binary built with CUDA N.x loads an N.x runtime (libcudart.so.N or a static copy); under minor
    version compatibility it runs on any driver of the N major's branch or newer, and on no older one
    (cuda_minor_version_compat.toml, with its source row)."""
    from opgate.core.cuda_versions import mvc_floor

    runtime = report.metadata.get("cuda_runtime") if report.metadata else None
    if not target.driver or not runtime or verdict.status not in (NATIVE, JIT):
        return verdict
    floor = mvc_floor(int(runtime["major"]))
    if floor is None or parse_version(target.driver) >= parse_version(floor["min_driver"]):
        return verdict
    source = next((word.rstrip(";,") for word in floor["source"].split() if word.startswith("http")), floor["source"])
    reason = (f"{verdict.reason}, but its CUDA {runtime['major']} runtime ({runtime['evidence']}) needs driver >= "
              f"{floor['min_driver']} (R{floor['min_driver_branch']}, CUDA {runtime['major']} minor version "
              f"compatibility, {source}) and the target runs {target.driver}")
    return Verdict(verdict.binary, target, UNSUPPORTED, reason, verdict.sass, verdict.ptx, verdict.warnings)


def judge(report: BinaryReport, target: Target) -> Verdict:
    verdict = runtime_floor_verdict(report, target, _judge_code(report, target))
    if report.errors and not report.fatal and verdict.status in (NATIVE, JIT, UNSUPPORTED):
        lost = (f"file only partly read ({len(report.errors)} problem(s), the verdict covers what could be read): "
                f"{report.errors[0]}")
        return Verdict(verdict.binary, target, verdict.status, verdict.reason, verdict.sass, verdict.ptx,
                       (*verdict.warnings, lost))
    return verdict


def _judge_code(report: BinaryReport, target: Target) -> Verdict:
    label = report.label
    if report.fatal:
        return Verdict(label, target, UNREADABLE, f"unreadable: {report.fatal}")
    entries = report.loaded_entries()
    if not entries:
        if report.entries:
            return Verdict(label, target, UNSUPPORTED, "every device-code entry is damaged: "
                           + "; ".join(e.error or "" for e in report.entries[:2]))
        return Verdict(label, target, NO_DEVICE_CODE, "no CUDA device code in this file")
    sass = [e for e in entries if e.kind == KIND_SASS]
    ptx = [e for e in entries if e.kind == KIND_PTX]
    native = [e for e in sass if sass_runs_on(e, target)]
    arch_ok_ptx = [e for e in ptx if ptx_targets(e, target)]
    capability = driver_capability(target.driver) if target.driver else None
    jit_ok: list[FatbinEntry] = []
    too_new: list[FatbinEntry] = []
    for entry in arch_ok_ptx:
        if capability is None or (capability.max_ptx_isa is not None and entry.ptx_isa is not None
                                  and parse_version(entry.ptx_isa) <= parse_version(capability.max_ptx_isa)):
            jit_ok.append(entry)
        else:
            too_new.append(entry)

    warnings: list[str] = []
    if too_new:
        isas = sorted({e.ptx_isa or "?" for e in too_new}, key=_isa_key)
        need = min_driver_for_ptx(isas[-1])
        warnings.append(
            f"PTX ISA {', '.join(isas)} is newer than driver {target.driver} can JIT "
            f"(it supports up to {capability.max_ptx_isa if capability else '?'}"
            f"{', CUDA ' + capability.cuda if capability and capability.cuda else ''})"
            + (f"; needs driver >= {need[1]} (CUDA {need[0]})" if need else ""))
    if capability is not None and capability.uncertain:
        warnings.append(f"driver {target.driver} maps to CUDA {capability.cuda} through a table row marked "
                        "uncertain (secondary source)")
    used = native or jit_ok
    warnings.extend(_compression_warnings(used, target))

    sass_names = tuple(dict.fromkeys(e.arch for e in native))
    ptx_names = tuple(dict.fromkeys(f"{e.virtual_arch} (PTX {e.ptx_isa})" for e in jit_ok))
    if native:
        reason = f"SASS {', '.join(sass_names)} runs on {target.describe()}"
        return Verdict(label, target, NATIVE, reason, sass_names, ptx_names, tuple(warnings))
    have = ", ".join(dict.fromkeys(e.arch for e in sass)) or "none"
    if jit_ok:
        reason = (f"no SASS for sm_{target.sm} (has {have}); the driver JIT-compiles PTX "
                  f"{', '.join(ptx_names)} on first launch in every process (seconds to minutes; cached in "
                  "the CUDA compute cache)")
        if capability is None:
            isas = sorted({e.ptx_isa or "?" for e in jit_ok}, key=_isa_key)
            need = min_driver_for_ptx(isas[-1])
            if need:
                reason += f"; needs a driver >= {need[1]} (CUDA {need[0]}) for PTX ISA {isas[-1]}"
        return Verdict(label, target, JIT, reason, (), ptx_names, tuple(warnings))
    ptx_have = ", ".join(dict.fromkeys(f"{e.virtual_arch} (PTX {e.ptx_isa})" for e in ptx)) or "none"
    if too_new:
        reason = (f"no SASS for sm_{target.sm} (has {have}) and its PTX is too new for driver "
                  f"{target.driver}: {warnings[0]}")
    else:
        reason = f"no SASS for sm_{target.sm} (has {have}) and no PTX the driver can compile for it (has {ptx_have})"
    return Verdict(label, target, UNSUPPORTED, reason, (), (), tuple(warnings))


def _isa_key(isa: str) -> tuple[int, ...]:
    try:
        return parse_version(isa)
    except ValueError:
        return (0,)


def _compression_warnings(used: Sequence[FatbinEntry], target: Target) -> list[str]:
    if not target.driver:
        return []
    out = []
    for kind in sorted({e.compression for e in used if e.compression in ("lz4", "zstd")}):
        need = min_driver_for_compression(kind)
        if need and parse_version(target.driver) < parse_version(need[0]):
            out.append(f"{kind}-compressed images may not load on driver {target.driver} (needs >= {need[0]}"
                       + (", inferred from secondary notes" if need[1] else "") + ")")
    return out


def judge_all(reports: Sequence[BinaryReport], targets: Sequence[Target]) -> list[Verdict]:
    return [judge(report, target) for report in reports for target in targets]
