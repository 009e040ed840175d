"""Pure judging of a GPU architecture against what the toolkit and the frameworks target: the nvcc release's range
(data/cuda_arch_targets.toml) and how a framework's arch list serves the GPU (SASS, PTX JIT, nothing). The doctor's
`doctor.arch_support` check (opgate.doctor.arch_support) collects the facts and calls it."""

from __future__ import annotations

import re

from opgate.model.results import Outcome


def arch_coverage(cc: tuple[int, int], arch_list: list[str]) -> tuple[str, str]:
    """How a framework's build serves a GPU: ("sass", arch) when machine code runs on it (same major,
    minor <= GPU's; `a` variants only on their exact arch), ("ptx", arch) when only PTX can be JIT-compiled
    (virtual arch <= GPU), ("none", "") otherwise."""
    gpu = cc[0] * 10 + cc[1]
    sass, ptx = [], []
    for arch in arch_list:
        match = re.fullmatch(r"(sm|compute)_(\d+)([af]?)", arch)
        if not match:
            continue
        kind, number, suffix = match.group(1), int(match.group(2)), match.group(3)
        major, minor = divmod(number, 10)
        if kind == "sm":
            if suffix == "a" and number != gpu:
                continue
            if suffix == "f" and (major != cc[0] or minor > cc[1]):
                continue
            if major == cc[0] and minor <= cc[1]:
                sass.append(arch)
        elif kind == "compute" and not suffix and number <= gpu:
            ptx.append(arch)
    if sass:
        return "sass", sass[-1]
    if ptx:
        return "ptx", ptx[-1]
    return "none", ""


def toolkit_range(release: tuple[int, int]) -> dict | None:
    from opgate.core.cuda_versions import parse_version
    from opgate.data import load_table

    for row in load_table("cuda_arch_targets"):
        if parse_version(row["first_cuda"])[:2] <= release <= parse_version(row["last_cuda"])[:2]:
            return row
    return None


def toolkit_outcome(sm: int, row: dict) -> Outcome:
    """An nvcc release against a GPU: passed inside its target range, failed below its lowest target (it cannot
    compile for the GPU), warned above its highest (it predates the GPU)."""
    if row["lowest_sm"] <= sm <= row["highest_sm"]:
        return Outcome.PASSED
    return Outcome.FAILED if sm < row["lowest_sm"] else Outcome.WARNED


# What a framework build's coverage of a GPU (`arch_coverage`'s first part) is worth: PTX only means a slow
# first launch while the driver JIT-compiles it; nothing means the framework cannot use the GPU.
COVERAGE_OUTCOME = {"sass": Outcome.PASSED, "ptx": Outcome.WARNED, "none": Outcome.FAILED}
