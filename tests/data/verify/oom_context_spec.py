"""An implementation whose process runs out of GPU memory so that its CUDA context stays unusable, on the first
call of each case with a size of 63 in each process (as a FlagGems norm's fresh worker did in a library run on an
H100 the run's warm-ups had filled: "CUDA error: out of memory" at its first CUDA call, and again at the
synchronize opgate asks for after the call). On a CPU-only host it plants that fault: it makes the context check
(opgate.verify.resume._cuda_context_fault) report it and raises as torch does.

`OOM_TIMES` in the environment: how many processes run out of memory on such a case (a marker file per case in
OOM_MARKS counts them). 1: the fresh process runs the case again and it is judged; 2: it is not judged."""

import os
import pathlib

import opgate
from opgate.verify import resume

SIZE = 63  # an edge size opgate adds (2^k - 1 below the declared 64): one case of the quick plan

double = opgate.Operator(
    "double",
    reference=lambda x: x * 2,
    inputs=[opgate.TensorSpec("x", ("M", "N"))],
    dims={"M": [4, 8], "N": [64]},
    dtypes=["float32"],
)


@double.implementation("out_of_memory", backend="torch")
def double_out_of_memory(x):
    if SIZE in tuple(x.shape):
        marks = pathlib.Path(os.environ["OOM_MARKS"])
        marks.mkdir(parents=True, exist_ok=True)
        mark = marks / "x".join(str(d) for d in x.shape)
        times = int(mark.read_text()) if mark.exists() else 0
        if times < int(os.environ.get("OOM_TIMES", "1")):
            mark.write_text(str(times + 1))
            resume._cuda_context_fault = lambda: "torch: CUDA error: out of memory"
            raise RuntimeError("CUDA error: out of memory")
    return x * 2
