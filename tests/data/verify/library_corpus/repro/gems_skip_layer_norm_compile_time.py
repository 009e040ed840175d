"""FlagGems 5.0.2's skip_layer_norm (fused/skip_layernorm.py, skip_layer_norm_kernel) and rms_norm backward
(ops/rms_norm.py, rms_norm_grad_dx_kernel) compile for a long time at N = 65537, without opgate and without a GPU:
Triton compiles them here for sm_90 (an H200) from FlagGems' own source.

Both wrappers launch one program per row with BLOCK_SIZE = next_power_of_2(N) and Triton's default num_warps=4, so
N = 65537 is a 131072-element block, 1024 elements per thread. opgate met skip_layer_norm on the H200 (thirty-second
session): gems_skip_layer_norm's float16 and bfloat16 numerics checks spent 138-142 s in their cases, 113 s of it on
the first M=1,N=65537 case (one ptxas process ran 95 s), while 151 runtime measurements waited for the GPU; and both
in the thirty-eighth session's library run, at the run's end (61-104 s a compile).

    python repro/gems_skip_layer_norm_compile_time.py [--kernel rms_norm_grad_dx_kernel] [--n 4096 65535 65537]
        [--dtype float16] [--timeout 600]

Needs triton and FlagGems' source installed (flag_gems itself is not imported: it needs a GPU). Each compile runs
in its own process under the timeout, from an empty Triton cache; it prints the seconds, or that it did not
finish."""

from __future__ import annotations

import argparse
import ast
import importlib.util
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

# kernel -> (its file in flag_gems, its arguments as the wrapper passes them on a contiguous input, by pointer
# dtype: the column strides are 1, which Triton specializes into a constant, the row strides N; INV_RMS is float32)
KERNELS = {
    "skip_layer_norm_kernel": ("fused/skip_layernorm.py", lambda p: {
        "Y": p, "X": p, "R": p, "W": p, "B": p, "y_stride_r": "i32", "y_stride_c": "constexpr", "x_stride_r": "i32",
        "x_stride_c": "constexpr", "r_stride_r": "i32", "r_stride_c": "constexpr", "N": "i32", "eps": "fp32",
        "BLOCK_SIZE": "constexpr"}),
    "rms_norm_grad_dx_kernel": ("ops/rms_norm.py", lambda p: {
        "X": p, "DY": p, "INV_RMS": "*fp32", "DX": p, "W": p, "dx_stride_r": "i32", "dx_stride_c": "constexpr",
        "x_stride_r": "i32", "x_stride_c": "constexpr", "N": "i32", "eps": "fp32", "BLOCK_SIZE": "constexpr"}),
}


def kernel_source(kernel: str) -> str:
    """The kernel's source from FlagGems' installed file, decorators dropped (found, not imported), with FlagGems'
    program_id wrapper (triton_lang_extension: tl.program_id on NVIDIA) written as tl.program_id."""
    spec = importlib.util.find_spec("flag_gems")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("flag_gems is not installed: pip install --no-deps flag_gems==5.0.2 (only its source is read)")
    path = Path(list(spec.submodule_search_locations)[0]) / KERNELS[kernel][0]
    text = path.read_text()
    node = next(n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef) and n.name == kernel)
    node.decorator_list = []
    return ast.unparse(node).replace("tle.program_id", "tl.program_id")


def compile_once(kernel: str, dtype: str, n: int, warps: int) -> float:
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()  # nothing cached: every compile is timed whole
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import ASTSource

    module = Path(tempfile.mkdtemp()) / f"{kernel}_src.py"  # @triton.jit reads the source from a file
    module.write_text("import triton\nimport triton.language as tl\n\n\n@triton.jit\n" + kernel_source(kernel) + "\n")
    spec = importlib.util.spec_from_file_location(module.stem, module)
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    fn = getattr(loaded, kernel)
    signature = KERNELS[kernel][1]({"float16": "*fp16", "bfloat16": "*bf16", "float32": "*fp32"}[dtype])
    constexprs = {name: 1 for name, kind in signature.items() if kind == "constexpr" and name != "BLOCK_SIZE"}
    constexprs["BLOCK_SIZE"] = triton.next_power_of_2(n)
    started = time.perf_counter()
    triton.compile(ASTSource(fn, signature, constexprs), target=GPUTarget("cuda", 90, 32),
                   options={"num_warps": warps, "num_stages": 3})
    return time.perf_counter() - started


def _child(queue: "multiprocessing.Queue[float]", *args: object) -> None:
    queue.put(compile_once(*args))  # type: ignore[arg-type]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel", default="skip_layer_norm_kernel", choices=sorted(KERNELS))
    parser.add_argument("--dtype", default="float16", choices=["float16", "bfloat16", "float32"])
    parser.add_argument("--n", type=int, nargs="+", default=[4096, 65535, 65537])
    parser.add_argument("--warps", type=int, default=4, help="FlagGems passes none: Triton's default is 4")
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args()
    for n in args.n:
        queue: "multiprocessing.Queue[float]" = multiprocessing.Queue()
        child = multiprocessing.Process(target=_child, args=(queue, args.kernel, args.dtype, n, args.warps))
        began = time.perf_counter()
        child.start()
        child.join(args.timeout)
        what = f"{args.kernel} {args.dtype} N={n} BLOCK_SIZE={1 << (n - 1).bit_length()} num_warps={args.warps}"
        if child.is_alive():
            child.kill()
            print(f"{what}: did not finish in {args.timeout:g} s", flush=True)
        elif child.exitcode == 0 and not queue.empty():
            print(f"{what}: compiled in {queue.get():.1f} s", flush=True)
        else:
            print(f"{what}: failed (exit {child.exitcode}) after {time.perf_counter() - began:.1f} s", flush=True)


if __name__ == "__main__":
    main()
