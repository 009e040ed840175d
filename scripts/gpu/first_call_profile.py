"""GPU: what the first call of an implementation at its timing size costs in a process that did not warm it up.

The runtime check's timing (verify/runtime.py) runs in whichever warm worker of the spec file is idle, which is often
not the one that ran its warm-up (VerifyRuntimeWarmUpCheck). On the H100 (forty-first session) gems_cross_entropy
float16 spent 5.2 s in timing at a 1.9 ms median. This script separates the causes: run it once with `warm` (the
warm-up: one call, then exit), then with `time` in fresh processes, under the child environment opgate gives its
workers (TRITON_CACHE_AUTOTUNING=1); `time` prints the first and second call's seconds and the first call's profile.

  PYTHONPATH=src python3 scripts/gpu/first_call_profile.py warm SPEC OP IMPL DTYPE
  TRITON_PRINT_AUTOTUNING=1 PYTHONPATH=src python3 scripts/gpu/first_call_profile.py time SPEC OP IMPL DTYPE
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["warm", "time"])
    parser.add_argument("spec")
    parser.add_argument("op")
    parser.add_argument("impl")
    parser.add_argument("dtype")
    parser.add_argument("--top", type=int, default=25, help="profile rows to print")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    import torch

    from opgate.verify.gradients import upstream_kept_on_device
    from opgate.verify.runtime import cuda_inputs, load_implementation
    from opgate.verify.tasks import GpuStagePayload

    payload = GpuStagePayload(spec_file=args.spec, op=args.op, impl=args.impl, dtype=args.dtype)
    op, implementation = load_implementation(payload)
    inputs = cuda_inputs(op, op.timing_dims(), args.dtype, 0)
    torch.cuda.synchronize()
    print(f"{args.mode} {args.op} {args.dtype} at {op.timing_dims()}: imports, spec and inputs "
          f"{time.perf_counter() - started:.2f} s", flush=True)

    def one_call() -> float:
        begun = time.perf_counter()
        with upstream_kept_on_device():
            implementation.fn(*inputs)
        torch.cuda.synchronize()
        return time.perf_counter() - begun

    if args.mode == "warm":
        print(f"warm-up call {one_call():.3f} s", flush=True)
        return 0
    profile = cProfile.Profile()
    profile.enable()
    first = one_call()
    profile.disable()
    second = one_call()
    print(f"first call {first:.3f} s, second call {second:.3f} s", flush=True)
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(args.top)
    print(text.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
