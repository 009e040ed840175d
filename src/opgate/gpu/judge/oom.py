"""Out of memory during a numerics case: the implementation's own demand (a verdict), or not (could not judge).

An out-of-memory error says only that an allocation failed. On a GPU shared with other processes (CI runners share
one card; another `opgate verify` run's recovery stage fills it on purpose) it may say nothing about the
implementation, so it fails the implementation only where opgate can show the demand was the implementation's own:

  own         no other process holds more than OTHERS_SLACK (the memory went to this process: its inputs, the
              implementation's buffers), or the request alone exceeds what the card could give this process if no
              other process held anything;
  others      another process holds more than OTHERS_SLACK: the case could not be judged (an error naming the
              free and total memory and what the others hold), never a failed case;
  unmeasured  no device memory figures at all: opgate cannot show it, so it does not judge the case either.

Judged after one retry of the case with this process's cached memory given back (the retry that succeeds is
judged like any case).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

GiB = 1 << 30
OWN = "own"
OTHERS = "others"
# A result's extra key: the check could not judge a size because other processes held the GPU's memory (the GiB they
# held). The runner's follow-up runs such a check again once with the GPU emptied of the run's idle workers
# (verify/resume.follow_up, CheckTask.gpu_alone).
BESIDE_OTHERS_KEY = "out_of_memory_beside_others_gib"
UNMEASURED = "unmeasured"
# What used memory outside this process's allocators may be without another process: this process's CUDA context
# (~0.5 GiB on an H200 with torch and CuPy loaded), cuBLAS/cuDNN workspaces and the driver's reservations; 5% of the
# card on large cards, where the driver reserves more.
OTHERS_SLACK_BYTES = 2 * GiB
OTHERS_SLACK_SHARE = 0.05

# Exception class names of out-of-memory errors: torch.cuda.OutOfMemoryError, cupy.cuda.memory.OutOfMemoryError.
OOM_CLASS_NAMES = ("OutOfMemoryError",)
# Messages of out-of-memory errors raised as something else (a RuntimeError from an extension, cuda-python's
# CUresult/cudaError_t text, CUDA error 2): cudaErrorMemoryAllocation is 2, CUDA_ERROR_OUT_OF_MEMORY 2 as well.
# Triton's launcher raises RuntimeError("Triton Error [CUDA]: " + cuGetErrorString(...)) (triton-lang/triton,
# third_party/nvidia/backend/driver.c), "out of memory" for CUDA_ERROR_OUT_OF_MEMORY: memory the driver takes outside
# torch's allocator (a kernel's local memory at its first launch), which the allocator's cached blocks can block. A
# FlagGems norm at N = 65537 raised it once beside a library run's warm-ups and passed its next launches in the same
# process (forty-sixth session): read as the kernel's own error, it had been a size-limit deviation.
OOM_MESSAGE = re.compile(r"cudaErrorMemoryAllocation|CUDA_ERROR_OUT_OF_MEMORY|CUDA out of memory|"
                         r"CUDA error: out of memory|CUDA error 2\b|out of memory allocating|"
                         r"Triton Error \[CUDA\]: out of memory", re.IGNORECASE)
_UNITS = {"b": 1, "bytes": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40, "kb": 10**3,
          "mb": 10**6, "gb": 10**9}
# torch: "Tried to allocate 2.00 GiB"; CuPy: "Out of memory allocating 1,073,741,824 bytes (allocated so far: ...)"
_REQUEST = (re.compile(r"Tried to allocate ([0-9.]+) ?(bytes|[KMGT]i?B)\b", re.IGNORECASE),
            re.compile(r"out of memory allocating ([0-9,]+) (bytes)", re.IGNORECASE))


def is_out_of_memory(class_names: Sequence[str], message: str) -> bool:
    """An out-of-memory error, from the class names of an exception and its causes and its message."""
    return any(name in OOM_CLASS_NAMES for name in class_names) or bool(OOM_MESSAGE.search(message))


def exception_is_out_of_memory(exc: BaseException) -> bool:
    """torch's or CuPy's OutOfMemoryError, or an error whose message (or its cause's) says CUDA ran out of memory."""
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and seen not in chain and len(chain) < 4:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    return is_out_of_memory([type(e).__name__ for e in chain], " ".join(str(e) for e in chain))


def requested_bytes(message: str) -> int | None:
    """The size of the allocation that failed, when the message says it."""
    for pattern in _REQUEST:
        match = pattern.search(message)
        if match:
            return int(float(match.group(1).replace(",", "")) * _UNITS[match.group(2).lower()])
    return None


@dataclass(frozen=True)
class OomFacts:
    """The device's memory after the retry failed too (opgate.gpu.probes.device_memory's snapshot)."""

    free_bytes: int
    total_bytes: int
    own_bytes: int  # this process's allocators
    requested_bytes: int | None = None
    other_pids: tuple[int, ...] = ()  # what NVML lists (informative: in a container it may include this process)
    other_bytes_reported: int | None = None  # their sum, where NVML reports it


@dataclass(frozen=True)
class OomVerdict:
    cause: str  # OWN | OTHERS | UNMEASURED
    detail: str  # one clause with the figures
    held_by_others_bytes: int = 0

    @property
    def judged(self) -> bool:
        return self.cause == OWN


def _gib(n: int | float) -> str:
    return f"{n / GiB:.1f} GiB"


def others_slack(total_bytes: int) -> int:
    return max(OTHERS_SLACK_BYTES, int(OTHERS_SLACK_SHARE * total_bytes))


def judge_oom(facts: OomFacts | None, why_unmeasured: str = "") -> OomVerdict:
    """Whose demand made the allocation fail (see the module docstring)."""
    if facts is None:
        return OomVerdict(UNMEASURED, f"opgate could not read the device's memory ({why_unmeasured or 'no figures'})"
                                      ", so it cannot show the demand was the implementation's own")
    # Used memory that is not this process's allocators: other processes, plus this process's context.
    held_elsewhere = max(0, facts.total_bytes - facts.free_bytes - facts.own_bytes)
    memory = (f"{_gib(facts.free_bytes)} free of {_gib(facts.total_bytes)}, this process's allocators hold "
              f"{_gib(facts.own_bytes)}")
    if held_elsewhere <= others_slack(facts.total_bytes):
        return OomVerdict(OWN, f"no other process holds more than {_gib(others_slack(facts.total_bytes))} "
                               f"({memory}): the memory went to this case", held_elsewhere)
    attainable = facts.free_bytes + held_elsewhere  # what this process could get if every other process left
    if facts.requested_bytes is not None and facts.requested_bytes > attainable:
        return OomVerdict(OWN, f"the implementation asked for {_gib(facts.requested_bytes)}, more than this card "
                               f"could give it with no other process on it ({_gib(attainable)}; {memory})",
                          held_elsewhere)
    pids = f" (NVML lists pid {', '.join(map(str, facts.other_pids[:5]))})" if facts.other_pids else ""
    return OomVerdict(OTHERS, f"another process holds {_gib(held_elsewhere)} of the GPU{pids}; {memory}",
                      held_elsewhere)
