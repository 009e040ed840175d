"""H200 diagnostic: which CUDA kernels one sanitized call of an implementation launches (torch.profiler, no
sanitizer), so a racecheck run that takes minutes can be traced to its kernels.

    PYTHONPATH=src python3 scripts/gpu/racecheck_kernels.py SPEC OP IMPL DTYPE
"""

from __future__ import annotations

import collections
import sys


def main(spec: str, op_name: str, impl: str, dtype: str) -> None:
    import torch

    from opgate.verify.runtime import cuda_inputs, load_implementation, one_config_per_autotune_key, sanitized_sizes
    from opgate.verify.tasks import ImplementationRef

    op, implementation = load_implementation(ImplementationRef(spec, op_name, impl))
    with one_config_per_autotune_key():
        for step, dims in sanitized_sizes(op):
            args = cuda_inputs(op, dims, dtype, seed=0, draw_on_gpu=False)
            implementation.fn(*args)  # compiles outside the profile
            torch.cuda.synchronize()
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                implementation.fn(*args)
                torch.cuda.synchronize()
            kernels = collections.Counter(e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
            print(f"{op_name} {dtype} {step} {dims}:")
            for name, count in kernels.most_common():
                print(f"   {count:3d} x {name[:160]}")


if __name__ == "__main__":
    main(*sys.argv[1:5])
