"""Check 7: MIG mode and instances per GPU; whether an MPS control daemon serves this host."""

from __future__ import annotations

import os
from pathlib import Path

from opgate.checks.base import Check, CheckContext
from opgate.model.errors import SkipCheck
from opgate.probes.processes import MPS_PROCESS_NAMES, find_processes
from opgate.model.results import CheckResult, Figure, gpu_labels, slug

class MigMpsCheck(Check):
    check_id = "doctor.mig_mps"
    title = "MIG and MPS"
    timeout_s = 30.0

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        from opgate.probes.nvml import NvmlUnavailable, is_available, nvml_session, query

        mps = find_processes(MPS_PROCESS_NAMES)
        pipe_dir = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
        figures = [
            Figure("MPS control daemon", "running (pid " + ", ".join(map(str, mps[MPS_PROCESS_NAMES[0]])) + ")"
                   if MPS_PROCESS_NAMES[0] in mps else "not running", key="mig_mps.mps_control_daemon"),
            Figure("MPS servers", len(mps.get(MPS_PROCESS_NAMES[1], [])), key="mig_mps.mps_servers"),
            Figure("MPS pipe directory", pipe_dir + (" (present)" if Path(pipe_dir).exists() else " (absent)"),
                   key="mig_mps.mps_pipe_directory"),
        ]
        for var in ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "CUDA_MPS_CLIENT_PRIORITY"):
            if os.environ.get(var):
                figures.append(Figure(var, os.environ[var], key=f"mig_mps.{slug(var)}"))
        mig_lines = []
        try:
            with nvml_session() as nv:
                count = query(nv.nvmlDeviceGetCount)
                for index in range(count if is_available(count) else 0):
                    handle = nv.nvmlDeviceGetHandleByIndex(index)
                    mode = query(nv.nvmlDeviceGetMigMode, handle)
                    if not is_available(mode):
                        figures.append(Figure(f"GPU{index} MIG", "not supported", key="mig_mps.mig",
                                              labels=gpu_labels(index)))
                        continue
                    current, pending = mode
                    instances = 0
                    if current:
                        max_count = query(nv.nvmlDeviceGetMaxMigDeviceCount, handle)
                        for slot in range(max_count if is_available(max_count) else 0):
                            if is_available(query(nv.nvmlDeviceGetMigDeviceHandleByIndex, handle, slot)):
                                instances += 1
                    state = "enabled" if current else "disabled"
                    if pending != current:
                        state += f" (pending {'enabled' if pending else 'disabled'} after reset)"
                    figures.append(Figure(f"GPU{index} MIG", state, key="mig_mps.mig", labels=gpu_labels(index)))
                    if current:
                        figures.append(Figure(f"GPU{index} MIG instances", instances, key="mig_mps.mig_instances",
                                              labels=gpu_labels(index)))
                    mig_lines.append(f"GPU{index} MIG {state}" + (f", {instances} instance(s)" if current else ""))
        except NvmlUnavailable as exc:
            if not mps:
                raise SkipCheck(f"{exc}; no MPS daemon running") from None
        mps_text = "MPS daemon running" if MPS_PROCESS_NAMES[0] in mps else "no MPS daemon"
        reason = "; ".join(mig_lines + [mps_text])
        # Facts, not faults: a shared GPU is a deployment choice; the report says which sharing is in force.
        return self.passed(reason, figures=figures, extra={"mps_processes": mps})
