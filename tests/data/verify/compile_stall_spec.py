"""An implementation whose JIT compile never finishes at one shape (any case with a size of 63), as LLVM's O3 ran
for minutes on fla's token_shift backward at D=65537 with 2 warps (2048 elements per thread). It marks the compile
as Triton's jit hook does (opgate.verify.resume.compile_started), then never returns. opgate must report that case
as not judged, a compile-time finding (failure class `compile_time`, a warning), not as a crash of the kernel, and
judge every other case."""

import opgate
from opgate.verify import resume

STALL_SIZE = 63  # an edge size opgate adds (2^k - 1 below the declared 64): one case of the quick plan

double = opgate.Operator(
    "double",
    reference=lambda x: x * 2,
    inputs=[opgate.TensorSpec("x", ("M", "N"))],
    dims={"M": [4, 8], "N": [64]},
    dtypes=["float32"],
)


@double.implementation("compile_stalls", backend="torch")
def double_compile_stalls(x):
    if STALL_SIZE in tuple(x.shape):
        resume.compile_started("planted_kernel")
        while True:  # the compiler's loop: never returns, never sleeps
            pass
    return x * 2
