"""Check 5: is any key CUDA entry point served by something other than the vendor library?"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Mapping

from opgate.checks.base import Check, CheckContext
from opgate.gpu.judge.interposition import judge_providers
from opgate.model.results import CheckResult, Figure, Outcome

# Which disk copy of each family to load in the probe: one per family, pip wheels first (what a
# framework in this environment loads), then the system toolkit.
FAMILIES_TO_LOAD = ("cudart", "cublas", "cublasLt", "cudnn", "cufft", "nccl", "nvrtc")


def pick_vendor_libraries(copies: Mapping[str, list[str]]) -> list[str]:
    # The driver library is found the way CUDA finds it: by soname, through the dynamic loader.
    chosen = ["libcuda.so.1"]
    for family in FAMILIES_TO_LOAD:
        paths = copies.get(family, [])
        paths = sorted(paths, key=lambda p: (0 if "site-packages" in p else 1, p))
        if paths:
            chosen.append(paths[0])
    return chosen


class InterpositionCheck(Check):
    check_id = "doctor.interposition"
    title = "Symbol interposition (LD_PRELOAD hijack)"
    timeout_s = 60.0

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        from opgate.probes.libraries import disk_copies

        libraries = pick_vendor_libraries(disk_copies())
        env = dict(os.environ)  # the user's environment, LD_PRELOAD included
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]),
                                                          env.get("PYTHONPATH", "")]))
        proc = subprocess.run([sys.executable, "-m", "opgate.probes.interposition", *libraries],
                              capture_output=True, text=True, timeout=self.timeout_s - 5, env=env)
        if proc.returncode != 0:
            return self.result(Outcome.ERROR, f"symbol probe exited with {proc.returncode}: "
                               f"{proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else 'no output'}")
        report = json.loads(proc.stdout.strip().splitlines()[-1])
        outcome, findings, figures = judge_providers(report)
        if report["ld_preload"]:
            figures.append(Figure("LD_PRELOAD", " ".join(report["ld_preload"]), key="interposition.ld_preload"))
        if report["preload_file"]:
            figures.append(Figure("/etc/ld.so.preload", " ".join(report["preload_file"]),
                                  key="interposition.etc_ld_so_preload"))
        resolved = sum(1 for p in report["providers"].values() if p)
        if outcome is Outcome.FAILED:
            reason = "; ".join(findings)
            remediation = ("Remove the interposing library from LD_PRELOAD / /etc/ld.so.preload or the link line, "
                           "unless it is a tool you mean to run (a profiler or sanitizer shim).")
        else:
            reason = (f"{resolved} of {len(report['providers'])} key entry points resolve to the vendor libraries; "
                      f"none interposed")
            remediation = ""
        return self.result(outcome, reason, figures=figures, remediation=remediation,
                           extra={"probe": report, "libraries_loaded": libraries})
