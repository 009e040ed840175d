"""How fast this host does the CPU work a verify run is made of, so that runs on different hosts can be compared.

On the H100 hosts of the forty-second session the same library run took 8-60% longer per task (median by kind) on
two hosts than on a third, with the same code and inputs; without a measure of the host, a slower run reads as a
slower opgate. This prints one JSON line, measured the same way on every host:

- sha256_s: one core hashing 256 MiB (plain CPU speed);
- compile_s: the median of 3 Triton compiles of one fixed kernel for sm_90, each with an empty cache (LLVM and ptxas,
  what a library run spends most of its CPU on); no GPU is needed;
- compile_parallel_s: the wall time of as many of those compiles at once as the host has cores (how the cores
  share the work when every slot compiles), and `cores`; `triton`, its version (compile times differ between
  versions: compare hosts at the same one).

    python3 scripts/host_speed.py [--out FILE] [--parallel N]

Exit codes: 0 measured, 2 bad usage, 3 a measurement failed (its error on stderr).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HASHED_BYTES = 256 * 2**20
COMPILES = 3
BLOCK = 16384  # a whole 16384-element row in one program: a second or two of LLVM and ptxas

KERNEL_SOURCE = '''
import os, sys, time
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget


@triton.jit
def row_softmax(x, y, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    values = tl.load(x + offsets, mask=offsets < n, other=-float("inf"))
    exps = tl.exp(values - tl.max(values, 0))
    tl.store(y + offsets, exps / tl.sum(exps, 0), mask=offsets < n)


source = triton.compiler.ASTSource(fn=row_softmax, signature={"x": "*fp32", "y": "*fp32", "n": "i32",
                                                              "BLOCK": "constexpr"}, constexprs={"BLOCK": %d})
started = time.perf_counter()
triton.compile(source, target=GPUTarget("cuda", 90, 32))
print(time.perf_counter() - started)
''' % BLOCK


def sha256_seconds() -> float:
    block = os.urandom(2**20)
    digest = hashlib.sha256()
    started = time.perf_counter()
    for _ in range(HASHED_BYTES // len(block)):
        digest.update(block)
    return time.perf_counter() - started


def compile_processes(count: int, script: Path) -> tuple[float, list[float]]:
    """(wall seconds, each process's own compile seconds) of `count` compiles started at once, each with an empty
    Triton cache of its own inside `script`'s folder (removed with it)."""
    caches = [Path(tempfile.mkdtemp(prefix="triton-cache-", dir=script.parent)) for _ in range(count)]
    started = time.perf_counter()
    children = [subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, env={**os.environ, "TRITON_CACHE_DIR": str(cache)})
                for cache in caches]
    seconds = []
    for child in children:
        out, err = child.communicate(timeout=600)
        if child.returncode != 0:
            raise RuntimeError(f"a Triton compile exited with {child.returncode}: {err.strip()[-400:]}")
        seconds.append(float(out.strip().splitlines()[-1]))
    return time.perf_counter() - started, seconds


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="also write the JSON line to this file (atomically)")
    parser.add_argument("--parallel", type=int, default=os.cpu_count() or 1,
                        help="compiles at once for compile_parallel_s (default: the host's cores)")
    args = parser.parse_args(argv)
    if args.parallel < 1:
        print(f"host_speed.py: --parallel {args.parallel}: must be 1 or more", file=sys.stderr)
        return 2
    if args.out is not None and not args.out.parent.is_dir():
        print(f"host_speed.py: --out {args.out}: its folder does not exist; create it or name another", file=sys.stderr)
        return 2
    try:
        with tempfile.TemporaryDirectory(prefix="host-speed-") as folder:
            script = Path(folder) / "compile_once.py"
            script.write_text(KERNEL_SOURCE)
            single = [compile_processes(1, script)[1][0] for _ in range(COMPILES)]
            wall, each = compile_processes(args.parallel, script)
        figures = {"sha256_s": round(sha256_seconds(), 3), "compile_s": round(statistics.median(single), 3),
                   "compile_parallel_s": round(wall, 3), "compile_parallel_median_s": round(statistics.median(each), 3),
                   "cores": os.cpu_count(), "parallel": args.parallel,
                   "triton": importlib.metadata.version("triton")}  # compile times differ between its versions
    except Exception as exc:  # a missing Triton, a compile that failed: no figure rather than a wrong one
        print(f"host_speed.py: could not measure: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 3
    line = json.dumps(figures)
    print(line)
    if args.out is not None:
        partial = args.out.with_name(args.out.name + ".partial")
        partial.write_text(line + "\n")
        partial.replace(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
