"""fla 0.6.0's token_shift backward (token_shift_bwd_kernel_short) takes minutes to compile for D = 65537 with few
warps, without opgate and without a GPU: Triton 3.6.0 compiles it here for sm_90 (an H200) from fla's own source.

BD = next_power_of_2(D) = 131072 elements per program, so num_warps=2 is 2048 elements per thread; LLVM's O3 pass
(triton/backends/nvidia/compiler.py make_llir) then ran past 240 s on a 2-core machine (4 warps: 233 s, 8: 36-61 s,
16: 2-6 s, 32: 0.5 s). Every dtype alike. fla autotunes over num_warps in [2, 4, 8, 16, 32] x num_stages [1, 2, 3]
keyed on BD, so a first backward call at such a D compiles every config and stalls for minutes in production too.
opgate met it as fla_token_shift.grad float16 never finishing its numerics on the H200 (its one config per key
was 2 warps there); it now reports such a case as not judged [compile_time] instead of a crash.

    python repro/fla_token_shift_bwd_compile_time.py [--warps 2 4 8 16 32] [--dtype float16] [--timeout 240]

Needs triton 3.6.0 and fla's source installed (fla itself is not imported: it would need torch and a GPU). Each
compile runs in its own process under the timeout; it prints the seconds, or that it did not finish."""

from __future__ import annotations

import argparse
import ast
import importlib.util
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path

KERNEL = "token_shift_bwd_kernel_short"


def kernel_source() -> str:
    """The kernel's source from fla's installed file, decorators dropped (found, not imported)."""
    spec = importlib.util.find_spec("fla")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("fla is not installed: pip install fla-core==0.6.0 (only its source is read)")
    path = Path(list(spec.submodule_search_locations)[0]) / "modules" / "token_shift.py"
    text = path.read_text()
    node = next(n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef) and n.name == KERNEL)
    node.decorator_list = []
    return ast.unparse(node)


def compile_once(dtype: str, d: int, warps: int, stages: int) -> float:
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import ASTSource

    module = Path(tempfile.mkdtemp()) / f"{KERNEL}_src.py"  # @triton.jit reads the source from a file
    module.write_text("import triton\nimport triton.language as tl\n\n\n@triton.jit\n" + kernel_source() + "\n")
    spec = importlib.util.spec_from_file_location(module.stem, module)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    fn = getattr(loaded, KERNEL)
    pointer = {"float16": "*fp16", "bfloat16": "*bf16", "float32": "*fp32"}[dtype]
    signature = {"dx": pointer, "dy": pointer, "cu_seqlens": "constexpr", "grad_cache_in": "constexpr",
                 "grad_cache_out": "constexpr", "T": "i32", "D": "constexpr", "BD": "constexpr",
                 "IS_VARLEN": "constexpr", "USE_INITIAL_STATE": "constexpr", "HAS_DCACHE": "constexpr"}
    constexprs = {"cu_seqlens": None, "grad_cache_in": None, "grad_cache_out": None, "D": d,
                  "BD": triton.next_power_of_2(d), "IS_VARLEN": False, "USE_INITIAL_STATE": False,
                  "HAS_DCACHE": False}
    started = time.perf_counter()
    triton.compile(ASTSource(fn, signature, constexprs), target=GPUTarget("cuda", 90, 32),
                   options={"num_warps": warps, "num_stages": stages})
    del tl
    return time.perf_counter() - started


def _child(queue: "multiprocessing.Queue[float]", *args: object) -> None:
    queue.put(compile_once(*args))  # type: ignore[arg-type]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="float16", choices=["float16", "bfloat16", "float32"])
    parser.add_argument("--d", type=int, default=65537)
    parser.add_argument("--warps", type=int, nargs="+", default=[32, 16, 8, 2])
    parser.add_argument("--stages", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=240.0)
    args = parser.parse_args()
    for warps in args.warps:
        queue: "multiprocessing.Queue[float]" = multiprocessing.Queue()
        child = multiprocessing.Process(target=_child, args=(queue, args.dtype, args.d, warps, args.stages))
        began = time.perf_counter()
        child.start()
        child.join(args.timeout)
        if child.is_alive():
            child.kill()
            print(f"{KERNEL} {args.dtype} D={args.d} num_warps={warps}: did not finish in {args.timeout:g} s")
        elif child.exitcode == 0 and not queue.empty():
            print(f"{KERNEL} {args.dtype} D={args.d} num_warps={warps}: compiled in {queue.get():.1f} s")
        else:
            print(f"{KERNEL} {args.dtype} D={args.d} num_warps={warps}: failed (exit {child.exitcode}) after "
                  f"{time.perf_counter() - began:.1f} s")


if __name__ == "__main__":
    main()
