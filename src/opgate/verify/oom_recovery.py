"""`opgate verify --stages recovery`: does an implementation's process survive running out of GPU memory?

Before the trials, in the check's own process, the implementation runs twice with memory free: its answer before,
and how far a second answer lies from it (0 unless its summation order changes per call, as lock- or atomic-added
partial sums do), the margin every later comparison allows. Per trial: GPU memory is
filled with PyTorch allocations until the allocator refuses even 2 MiB, the implementation is called with
the GPU full (it should raise `torch.cuda.OutOfMemoryError`, or succeed when it needs no memory), the filler
is freed (all but what the trials keep: room enough for twice the first call's peak, or everything where
that was too little; gpu/probes/oom.py), and the same process must compute the same answer again.
Reported: the recovery success rate over the trials and the mean time from freeing to a verified answer.
(The other fault of issue 6, a sticky error such as an illegal address, leaves the CUDA context unusable:
opgate's runner detects it and the run goes on in a fresh worker, see `opgate.engine.worker`.)

The check runs alone on the GPU (the runner's exclusive tasks): filling the card would starve any sibling.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Sequence

from opgate.model.errors import SkipCheck
from opgate.gpu.probes.oom import SPREAD_MARGIN, OomTrial, first_call, run_to_run_spread, run_trial
from opgate.model.results import CheckResult, Figure, Outcome, Threshold
from opgate.verify.phase_clock import PhaseClock
from opgate.verify.runtime import GpuStageCheck, cuda_inputs, load_implementation, one_config_per_autotune_key

TRIALS = 3


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
    freed_all = sum(t.freed_all for t in reached)
    if freed_all:
        text += (f" ({freed_all} of them ran out of memory again in the room kept free for the retry, twice the "
                 "first call's peak, and recovered once all was freed)")
    if odd:
        return Outcome.WARNED, (f"{text}; but with the GPU full the call raised {odd[0]} instead of "
                                "torch.cuda.OutOfMemoryError, which a caller cannot recognise and retry")
    return Outcome.PASSED, text


class VerifyOomRecoveryCheck(GpuStageCheck):
    """The implementation driven into out-of-memory TRIALS times; the same process must recover."""

    def evaluate(self, ctx: Any) -> CheckResult:
        clock = PhaseClock()  # where the check's seconds go (extra["phase_s"]): a library run's serial end
        options, torch = self.begin(ctx)
        op, implementation = load_implementation(options)
        fn = implementation.fn
        args = cuda_inputs(op, op.default_dims(), options.dtype, options.seed)
        clock.lap("inputs")
        # one config per autotune key, as in the numerics and the sanitizer (verify/backends/autotune_choice.py):
        # recovery does not depend on the config, and Triton's autotuning at this size compiled and benchmarked
        # every config while the GPU was held alone (fla's kernels: 10-24 s a check on the H200, against 0.8 s
        # for kernels that do not autotune); the scope spans the trials, so no call autotunes with the GPU full
        with one_config_per_autotune_key():
            before, filler = first_call(torch, fn, args)
            clock.lap("first_call")
            spread = run_to_run_spread(torch, fn, args, before)  # a second call with memory free: what varies anyway
            clock.lap("second_call")
            try:
                trials = [run_trial(torch, fn, args, before, index, filler, spread) for index in range(options.trials)]
            finally:
                filler.release(torch)
            clock.lap("trials")
        outcome, reason = judge(trials)
        if outcome is Outcome.SKIPPED:
            raise SkipCheck(reason)
        if any(spread):  # say what "the same answer" meant for an implementation whose answers vary anyway
            reason += (f"; its answers differ between two calls with memory free by up to {max(spread):.3g}, so an "
                       f"answer within {SPREAD_MARGIN:g}x that counts as the same")
        reached = [t for t in trials if t.oom_hit]
        figures = [
            Figure("trials reaching out-of-memory", f"{len(reached)}/{len(trials)}",
                   key="verify.recovery.trials_reaching_out_of_memory"),
            Figure("recovery success rate", round(sum(t.recovered for t in reached) / len(reached), 3)
                   if reached else None, "", Threshold(1.0, "==", "issue 6: the same process must still compute "
                                                       "correct results"), key="verify.recovery.recovery_success_rate"),
            Figure("mean time to recover", round(sum(t.recover_s for t in reached) / len(reached) * 1e3, 1)
                   if reached else None, "ms", key="verify.recovery.mean_time_to_recover"),
            Figure("GPU memory filled", max((t.filled_gib for t in trials), default=0.0), "GiB",
                   key="verify.recovery.gpu_memory_filled"),
            Figure("call with the GPU full", ", ".join(sorted({t.call_while_full for t in reached})) or "-",
                   key="verify.recovery.call_with_the_gpu_full"),
        ]
        extra = {"trials": [asdict(t) for t in trials], "phase_s": clock.laps, "room_bytes": filler.room_bytes,
                 "run_to_run_spread": spread}
        remediation = ("Free what the failed call allocated (no tensors kept in globals or caches across the "
                       "error), then retry; do not swallow OutOfMemoryError into another exception type."
                       if outcome in (Outcome.FAILED, Outcome.WARNED) else "")
        return self.result(outcome, reason, figures=figures, extra=extra, remediation=remediation)
