"""Doctor check: the CUDA extensions the user's framework loads carry code for this host's GPUs.

In its own child process the check imports the frameworks (default: torch when installed), lists the
shared objects now mapped (/proc/self/maps), reads the fatbin headers of those that carry device code
(headers only: no decompression) and judges each against every local GPU and the installed driver with
the same rules as `opgate inspect`: SASS that runs natively, PTX the driver can JIT (a warning: slow
first launch), or neither (a failure: the first kernel launch fails with "no kernel image").
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from pathlib import Path
from typing import Sequence

from opgate.checks.base import Check, CheckContext
from opgate.model.errors import SkipCheck
from opgate.model.results import CheckResult, Figure, slug

MAPS = Path("/proc/self/maps")


def loaded_shared_objects(maps_text: str | None = None) -> list[str]:
    """Paths of the files mapped into this process (shared objects, the executable), in first-seen order."""
    text = MAPS.read_text() if maps_text is None else maps_text
    seen: dict[str, None] = {}
    for line in text.splitlines():
        fields = line.split(None, 5)
        if len(fields) < 6:
            continue
        path = fields[5].strip()
        if not path.startswith("/") or path.endswith(" (deleted)"):
            continue
        seen.setdefault(path, None)
    return [p for p in seen if os.path.isfile(p)]


def default_frameworks() -> list[str]:
    return ["torch"] if importlib.util.find_spec("torch") is not None else []


def import_frameworks(names: Sequence[str]) -> tuple[list[str], list[str]]:
    imported, failures = [], []
    for name in names:
        try:
            importlib.import_module(name)
            imported.append(name)
        except Exception as exc:  # an extension that fails to import is itself a finding
            failures.append(f"{name}: {type(exc).__name__}: {exc}")
    return imported, failures


def local_targets():
    """One Target per distinct local GPU architecture, with the driver version, via NVML."""
    from opgate.inspect.compat import Target
    from opgate.probes.nvml import NvmlUnavailable, is_available, nvml_session, query

    targets: dict[int, Target] = {}
    try:
        with nvml_session() as pynvml:
            driver = query(pynvml.nvmlSystemGetDriverVersion)
            if not is_available(driver):
                raise SkipCheck(f"NVML did not report the driver version: {driver}")
            for index in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
                name = query(pynvml.nvmlDeviceGetName, handle)
                name = name if is_available(name) else "unknown GPU"
                sm = major * 10 + minor
                targets.setdefault(sm, Target(label=f"GPU {index} {name}", sm=sm, gpu=name, driver=driver))
    except NvmlUnavailable as exc:  # no driver/GPU on this host
        raise SkipCheck(str(exc)) from None
    except SkipCheck:
        raise
    except Exception as exc:
        raise SkipCheck(f"NVML could not describe the GPUs: {type(exc).__name__}: {exc}") from None
    if not targets:
        raise SkipCheck("NVML sees no GPU")
    return list(targets.values())


class ExtensionBinariesCheck(Check):
    check_id = "doctor.extension_binaries"
    title = "Loaded CUDA extensions carry code for this GPU"
    timeout_s = 180.0

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        targets = local_targets()
        frameworks = list(ctx.options.get("frameworks") or default_frameworks())
        imported, failures = import_frameworks(frameworks)
        return self.judge(loaded_shared_objects(), targets, imported, failures)

    def judge(self, paths: Sequence[str], targets, imported: Sequence[str] = (),
              import_failures: Sequence[str] = ()) -> CheckResult:
        """Judge the given libraries against the targets (separate from evaluate so it runs without a GPU)."""
        from opgate.model.errors import InputError
        from opgate.inspect.compat import JIT, NATIVE, UNSUPPORTED, judge
        from opgate.inspect.sources import inspect_file

        reports = []
        for path in paths:
            try:
                reports.extend(r for r in inspect_file(Path(path), kernels=False, explicit=False) if r.entries)
            except InputError:
                continue  # a mapping that vanished or cannot be read is not an extension we can judge
        verdicts = [judge(r, t) for r in reports for t in targets]
        # A library without usable code in its registered fatbin may load kernels it embeds in its data
        # sections (cuFFT 12 does): look there before calling it unsupported.
        rechecked = {v.binary for v in verdicts if v.status != NATIVE}
        if rechecked:
            deep_reports = {}
            for path in rechecked:
                try:
                    deep_reports.update((r.path, r) for r in inspect_file(Path(path), kernels=False,
                                                                           explicit=False, deep=True))
                except InputError:
                    continue
            verdicts = [judge(deep_reports[v.binary], v.target) if v.binary in deep_reports and v.status != NATIVE
                        else v for v in verdicts]
        counts = {s: sum(1 for v in verdicts if v.status == s) for s in (NATIVE, JIT, UNSUPPORTED)}
        figures = [
            Figure("frameworks imported", ", ".join(imported) or "none", key="extension_binaries.frameworks_imported"),
            Figure("mapped files with CUDA device code", len(reports),
                   key="extension_binaries.mapped_files_with_cuda_device_code"),
            Figure("GPU architectures", ", ".join(f"sm_{t.sm}" for t in targets),
                   key="extension_binaries.gpu_architectures"),
            Figure("native (SASS)", counts[NATIVE], key="extension_binaries.native_sass"),
            Figure("PTX JIT only", counts[JIT], key="extension_binaries.ptx_jit_only"),
            Figure("no usable code", counts[UNSUPPORTED], key="extension_binaries.no_usable_code"),
        ]
        for verdict in verdicts:
            if verdict.status in (JIT, UNSUPPORTED):
                binary = Path(verdict.binary).name
                figures.append(Figure(f"{verdict.status}: {binary} on sm_{verdict.target.sm}", verdict.reason,
                                      key=f"extension_binaries.{slug(verdict.status)}_{slug(binary)}_on_sm_"
                                          f"{verdict.target.sm}"))
        extra = {"verdicts": [v.to_dict() for v in verdicts], "import_failures": list(import_failures)}
        failed_imports = f"; could not import {'; '.join(import_failures)}" if import_failures else ""
        if not reports:
            if import_failures:
                return self.warned(f"no loaded library carries CUDA device code{failed_imports}", figures=figures,
                                   extra=extra)
            return self.skipped("no loaded library carries CUDA device code (import a CUDA framework with "
                                "--framework)", figures=figures, extra=extra)
        bad = [v for v in verdicts if v.status == UNSUPPORTED]
        jit = [v for v in verdicts if v.status == JIT]
        if bad:
            names = ", ".join(sorted({Path(v.binary).name for v in bad}))
            return self.failed(f"{len(bad)} library x GPU pair(s) have neither SASS nor usable PTX: {names}"
                               + failed_imports, figures=figures, extra=extra,
                               remediation="install a build of these packages compiled for this GPU's "
                                           "architecture, or a driver new enough for their PTX")
        if jit or import_failures:
            names = ", ".join(sorted({Path(v.binary).name for v in jit}))
            reason = (f"{len(jit)} library x GPU pair(s) run only through PTX JIT (slow first launch): {names}"
                      if jit else f"{len(reports)} libraries carry SASS for this GPU") + failed_imports
            return self.warned(reason, figures=figures, extra=extra,
                               remediation="prefer builds with SASS for this GPU (e.g. -gencode code=sm_XY)")
        return self.passed(f"all {len(reports)} loaded libraries with device code carry SASS for "
                           f"{', '.join(f'sm_{t.sm}' for t in targets)}", figures=figures, extra=extra)
