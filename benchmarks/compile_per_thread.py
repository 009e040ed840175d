"""What one Triton compile costs against the elements of a block each thread holds: the reason the numerics check's
config rotation (verify/backends/autotune_choice.py) leaves out configs over ELEMENTS_PER_THREAD_LIMIT at a key.

Two kernels shaped like the library corpus's slowest cases: an elementwise gradient over a flat block (fla's
activation kernels: 8192 elements, 1-32 warps) and a whole-row reduction (fla's softmax and logsumexp: one block of
the row). Each is compiled for sm_90 from scratch (a fresh Triton cache per compile) to PTX and a cubin with the
ptxas Triton ships; no GPU is needed. Each row says whether the rotation may choose the config at that key. The
library corpus's configs run side by side with the limited rotation's in one run: the rows marked 'no' are the
compiles the limit removes.

    PYTHONPATH=src python benchmarks/compile_per_thread.py [--row-block 65536] [--row-warps 4,8,16,32] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import triton
import triton.language as tl

from opgate.verify.backends import autotune_choice


@triton.jit
def flat_gradient(x, dy, dx, total, width: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < total
    column = offsets % width  # a constexpr width: a division by a constant per element, as fla's kernels do
    value = tl.load(x + offsets, mask=inside, other=0.0).to(tl.float32)
    upstream = tl.load(dy + offsets, mask=inside, other=0.0).to(tl.float32)
    gate = tl.sigmoid(value)
    result = upstream * gate * (1.0 + value * (1.0 - gate)) + column.to(tl.float32) * 0.0
    tl.store(dx + offsets, result.to(dx.dtype.element_ty), mask=inside)


@triton.jit
def row_logsumexp(x, out, width: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    columns = tl.arange(0, BLOCK)
    value = tl.load(x + row * width + columns, mask=columns < width, other=-float("inf")).to(tl.float32)
    top = tl.max(value, 0)
    tl.store(out + row, tl.log(tl.sum(tl.exp(value - top), 0)) + top)


def compile_seconds(kernel, signature: dict[str, str], constexprs: dict[str, int], warps: int,
                    stages: int = 3) -> float:
    """One compile of `kernel` for sm_90 from scratch (a fresh Triton cache), in seconds; no GPU needed."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    with tempfile.TemporaryDirectory() as cache:
        os.environ["TRITON_CACHE_DIR"] = cache  # nothing from an earlier compile
        source = ASTSource(kernel, {**signature, **{name: "constexpr" for name in constexprs}}, constexprs=constexprs)
        began = time.perf_counter()
        triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages})
        return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--flat-warps", default="1,2,4,8,32")
    parser.add_argument("--row-block", type=int, default=65536)
    parser.add_argument("--row-warps", default="4,8,16,32")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    flat = {"x": "*bf16", "dy": "*bf16", "dx": "*bf16", "total": "i32"}
    row = {"x": "*bf16", "out": "*fp32"}
    plan = [("flat gradient, bf16", flat_gradient, flat, {"width": 4097, "BLOCK": 8192}, int(w))
            for w in args.flat_warps.split(",")]
    plan += [("whole-row logsumexp, bf16", row_logsumexp, row, {"width": args.row_block + 1, "BLOCK": args.row_block},
              int(w)) for w in args.row_warps.split(",")]
    compile_seconds(flat_gradient, flat, {"width": 5, "BLOCK": 128}, 4)  # Triton's own first-compile start-up
    rows = []
    print(f"{'kernel':28} {'block':>7} {'warps':>5} {'elements a thread':>17} {'compile (s)':>11} {'chosen now':>10}")
    for name, kernel, signature, constexprs, warps in plan:
        held = constexprs["BLOCK"] / (warps * 32)
        seconds = compile_seconds(kernel, signature, constexprs, warps)
        chosen = held <= autotune_choice.ELEMENTS_PER_THREAD_LIMIT
        rows.append({"kernel": name, "block": constexprs["BLOCK"], "warps": warps, "elements_per_thread": held,
                     "compile_s": round(seconds, 2), "chosen": chosen})
        print(f"{name:28} {constexprs['BLOCK']:7d} {warps:5d} {held:17.0f} {seconds:11.2f} "
              f"{'yes' if chosen else 'no':>10}", flush=True)
    kept = sum(r["compile_s"] for r in rows if r["chosen"])
    every = sum(r["compile_s"] for r in rows)
    print(f"every config: {every:.1f} s of compiles; within the limit: {kept:.1f} s")
    if args.json:
        args.json.write_text(json.dumps({"triton": triton.__version__, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
