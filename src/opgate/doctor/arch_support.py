"""Check 3: the GPU's architecture against what the toolkit and the frameworks target."""

from __future__ import annotations

from opgate.checks.base import Check, CheckContext
from opgate.model.errors import SkipCheck
from opgate.gpu.judge.arch_support import COVERAGE_OUTCOME, arch_coverage, toolkit_outcome, toolkit_range
from opgate.model.results import CheckResult, Figure, Outcome, Threshold, slug, worst_outcome


class ArchSupportCheck(Check):
    check_id = "doctor.arch_support"
    title = "GPU architecture vs toolkit and frameworks"
    timeout_s = 120.0

    def evaluate(self, ctx: CheckContext) -> CheckResult:
        from opgate.probes.gpu_inventory import collect_inventory
        from opgate.probes.nvml import NvmlUnavailable
        from opgate.probes.toolkit import toolkit_info, torch_build

        try:
            gpus = [g for g in collect_inventory().gpus if g.compute_capability]
        except NvmlUnavailable as exc:
            raise SkipCheck(str(exc)) from None
        if not gpus:
            raise SkipCheck("no GPU with a known compute capability is visible")
        figures, outcomes, findings = [], [], []
        toolkit = toolkit_info()
        torch = torch_build()
        for cc in sorted({g.compute_capability for g in gpus}):
            sm = cc[0] * 10 + cc[1]
            label = f"sm_{sm}"
            if toolkit.release:
                row = toolkit_range(toolkit.release)
                if row:
                    outcome = toolkit_outcome(sm, row)
                    outcomes.append(outcome)
                    figures.append(Figure(f"{label}: nvcc {toolkit.release[0]}.{toolkit.release[1]} targets",
                                          f"sm_{row['lowest_sm']}..sm_{row['highest_sm']}",
                                          threshold=Threshold(f"sm_{row['lowest_sm']}", "<=", row["source"]),
                                          key=f"arch_support.sm_{sm}_nvcc_{toolkit.release[0]}_{toolkit.release[1]}"
                                              "_targets"))
                    if outcome is Outcome.FAILED:
                        findings.append(f"nvcc {toolkit.release[0]}.{toolkit.release[1]} cannot compile for {label} "
                                        f"(lowest target sm_{row['lowest_sm']})")
                    elif outcome is Outcome.WARNED:
                        findings.append(f"nvcc {toolkit.release[0]}.{toolkit.release[1]} predates {label}")
            if torch is not None:
                if torch.error:
                    outcomes.append(Outcome.WARNED)
                    findings.append(f"torch: {torch.error}")
                elif torch.cuda is None:
                    outcomes.append(Outcome.WARNED)
                    findings.append(f"torch {torch.version} is a CPU-only build: it cannot use the GPU")
                elif not torch.arch_list:  # a CUDA build whose list this process cannot read: unknown, not "none"
                    figures.append(Figure(f"{label}: torch {torch.version} (CUDA {torch.cuda}) coverage",
                                          "unknown (torch did not report the architectures it was built for)",
                                          key=f"arch_support.sm_{sm}_torch_{slug(torch.version)}_cuda_"
                                              f"{slug(torch.cuda)}_coverage"))
                else:
                    how, arch = arch_coverage(cc, torch.arch_list)
                    figures.append(Figure(f"{label}: torch {torch.version} (CUDA {torch.cuda}) coverage",
                                          f"{how} ({arch})" if arch else how,
                                          key=f"arch_support.sm_{sm}_torch_{slug(torch.version)}_cuda_"
                                              f"{slug(torch.cuda)}_coverage"))
                    outcomes.append(COVERAGE_OUTCOME[how])
                    if how == "none":
                        findings.append(f"torch {torch.version} has no SASS or PTX for {label} "
                                        f"(built for {', '.join(torch.arch_list)})")
                    elif how == "ptx":
                        findings.append(f"torch serves {label} only by JIT-compiling {arch} PTX (slow first launch)")
        if not toolkit.release:
            figures.append(Figure("nvcc", toolkit.reason or "not found", key="arch_support.nvcc"))
        if torch is None:
            figures.append(Figure("torch", "not installed", key="arch_support.torch"))
        if not outcomes:
            raise SkipCheck("neither nvcc nor a CUDA framework was found to compare with the GPU")
        outcome = worst_outcome(outcomes)
        ccs = ", ".join(f"sm_{c[0]}{c[1]}" for c in sorted({g.compute_capability for g in gpus}))
        reason = f"{ccs}: " + ("supported by the toolkit and frameworks" if not findings else "; ".join(findings))
        return self.result(outcome, reason, figures=figures,
                           remediation="" if outcome is Outcome.PASSED else
                           "Install a toolkit/framework build that targets this GPU's architecture "
                           "(e.g. a torch wheel whose get_arch_list() includes it).")
