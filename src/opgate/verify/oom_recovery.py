"""`opgate verify --stages recovery`: does an implementation's process survive running out of GPU memory?

Per trial, in the check's own process: the implementation runs once (its answer before), GPU memory is
filled with PyTorch allocations until the allocator refuses even 2 MiB, the implementation is called with
the GPU full (it should raise `torch.cuda.OutOfMemoryError`, or succeed when it needs no memory), the filler
is freed, and the same process must compute the same answer again. Reported: the recovery success rate over
the trials and the mean time from freeing to a verified answer. (The other fault of issue 6, a sticky error
such as an illegal address, leaves the CUDA context unusable: opgate's runner detects it and the run goes on
in a fresh worker, see `opgate.checks.worker`.)

The check runs alone on the GPU (the runner's exclusive tasks): filling the card would starve any sibling.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

from opgate.errors import SkipCheck
from opgate.results import CheckResult, Figure, Outcome, Threshold
from opgate.verify.runtime import GpuStageCheck, cuda_inputs, load_implementation

MiB = 1 << 20
FILL_DEADLINE_S = 60.0
TRIALS = 3


@dataclass(frozen=True)
class OomTrial:
    index: int
    oom_hit: bool  # the filler reached the point where not even 2 MiB more could be allocated
    filled_gib: float
    call_while_full: str  # "oom" (raised OutOfMemoryError), "ok" (needed no new memory), or the other error
    recovered: bool  # after freeing, the same process computed the same answer again
    recover_s: float
    mismatch: str = ""  # why the answer after recovery differs, or the error the retry raised


def fill_until_oom(torch: Any, deadline_s: float = FILL_DEADLINE_S) -> tuple[list[Any], bool]:
    """Allocate chunks (halving from 1/64 of the card down to 2 MiB) until even 2 MiB fails."""
    _free, total = torch.cuda.mem_get_info()
    chunk = max(256 * MiB, (total // 64) // (2 * MiB) * (2 * MiB))
    held: list[Any] = []
    hit = False
    deadline = time.perf_counter() + deadline_s
    while chunk >= 2 * MiB and time.perf_counter() < deadline:
        try:
            held.append(torch.empty(chunk, dtype=torch.uint8, device="cuda"))
        except torch.cuda.OutOfMemoryError:
            hit = True
            chunk //= 2
    return held, hit


def same_answer(torch: Any, before: Any, after: Any) -> str:
    """'' when `after` equals `before` (NaN where NaN; a few ulps for non-deterministic reductions),
    else why not. Handles a tensor or a tuple/list of tensors."""
    if isinstance(before, (tuple, list)):
        if not isinstance(after, (tuple, list)) or len(before) != len(after):
            return f"{type(after).__name__} after recovery, {len(before)} outputs before"
        pairs = list(zip(before, after))
    else:
        pairs = [(before, after)]
    for k, (b, a) in enumerate(pairs):
        if not hasattr(b, "shape"):
            if b != a:
                return f"output {k}: {a!r} after recovery, {b!r} before"
            continue
        if not hasattr(a, "shape"):
            return f"output {k}: {type(a).__name__} after recovery, a tensor before"
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"output {k}: {tuple(a.shape)} {a.dtype} after recovery, {tuple(b.shape)} {b.dtype} before"
        if b.is_floating_point():
            rtol = 1e-5 if b.dtype in (torch.float32, torch.float64) else 1e-2
            ok = torch.allclose(a.double(), b.double(), rtol=rtol, atol=0.0, equal_nan=True)
        else:
            ok = torch.equal(a, b)
        if not ok:
            return f"output {k} differs from the answer before the out-of-memory error"
    return ""


def run_trial(torch: Any, fn: Callable[..., Any], args: Sequence[Any], before: Any, index: int) -> OomTrial:
    held, hit = fill_until_oom(torch)
    filled = sum(t.numel() for t in held) / 2**30
    try:
        fn(*args)
        torch.cuda.synchronize()
        while_full = "ok"
    except torch.cuda.OutOfMemoryError:
        while_full = "oom"
    except Exception as exc:  # noqa: BLE001 - any other failure while full is a finding, reported as such
        while_full = f"{type(exc).__name__}: {str(exc)[:200]}"
    freed_at = time.perf_counter()
    del held
    torch.cuda.empty_cache()
    try:
        after = fn(*args)
        torch.cuda.synchronize()
        mismatch = same_answer(torch, before, after)
    except Exception as exc:  # noqa: BLE001 - the retry failing is exactly what this check looks for
        mismatch = f"the retry raised {type(exc).__name__}: {str(exc)[:200]}"
    return OomTrial(index, hit, round(filled, 2), while_full, not mismatch, time.perf_counter() - freed_at, mismatch)


def judge(trials: Sequence[OomTrial]) -> tuple[Outcome, str]:
    """Pure: the verdict over the trials."""
    reached = [t for t in trials if t.oom_hit]
    if not reached:
        return Outcome.SKIPPED, "the GPU could not be filled to out-of-memory within the time limit"
    recovered = [t for t in reached if t.recovered]
    mean_s = sum(t.recover_s for t in recovered) / len(recovered) if recovered else 0.0
    odd = [t.call_while_full for t in reached if t.call_while_full not in ("oom", "ok")]
    if len(recovered) < len(reached):
        first = next(t for t in reached if not t.recovered)
        return Outcome.FAILED, (f"recovered in {len(recovered)}/{len(reached)} out-of-memory trials; trial "
                                f"{first.index}: {first.mismatch}")
    text = (f"recovered in {len(recovered)}/{len(reached)} out-of-memory trials in the same process, mean "
            f"{mean_s * 1e3:.0f} ms from freeing to the same answer")
    if odd:
        return Outcome.WARNED, (f"{text}; but with the GPU full the call raised {odd[0]} instead of "
                                "torch.cuda.OutOfMemoryError, which a caller cannot recognise and retry")
    return Outcome.PASSED, text


class VerifyOomRecoveryCheck(GpuStageCheck):
    """The implementation driven into out-of-memory TRIALS times; the same process must recover."""

    check_id = "verify.recovery"
    title = "recovery from out-of-memory"
    timeout_s = 300.0

    def evaluate(self, ctx: Any) -> CheckResult:
        options, torch = self.begin(ctx)
        op, implementation = load_implementation(options)
        fn = implementation.fn
        args = cuda_inputs(op, op.default_dims(), options.dtype, options.seed)
        before = fn(*args)  # compiles / autotunes too, before memory gets tight
        torch.cuda.synchronize()
        trials = [run_trial(torch, fn, args, before, index) for index in range(options.trials)]
        outcome, reason = judge(trials)
        if outcome is Outcome.SKIPPED:
            raise SkipCheck(reason)
        reached = [t for t in trials if t.oom_hit]
        figures = [
            Figure("trials reaching out-of-memory", f"{len(reached)}/{len(trials)}"),
            Figure("recovery success rate", round(sum(t.recovered for t in reached) / len(reached), 3)
                   if reached else None, "", Threshold(1.0, "==", "issue 6: the same process must still compute "
                                                       "correct results")),
            Figure("mean time to recover", round(sum(t.recover_s for t in reached) / len(reached) * 1e3, 1)
                   if reached else None, "ms"),
            Figure("GPU memory filled", max((t.filled_gib for t in trials), default=0.0), "GiB"),
            Figure("call with the GPU full", ", ".join(sorted({t.call_while_full for t in reached})) or "-"),
        ]
        extra = {"trials": [asdict(t) for t in trials]}
        remediation = ("Free what the failed call allocated (no tensors kept in globals or caches across the "
                       "error), then retry; do not swallow OutOfMemoryError into another exception type."
                       if outcome in (Outcome.FAILED, Outcome.WARNED) else "")
        return self.result(outcome, reason, figures=figures, extra=extra, remediation=remediation)
