"""What an autotuned library kernel's configs cost to compile at one key, all of them (Triton's autotuning, what the
runtime stage's warm-ups do today) against those within the per-thread limit (OPGATE_RUNTIME_AUTOTUNE=within-limit,
verify/backends/autotune_choice.py), side by side in one run.

Each config is compiled for sm_90 from scratch (a fresh Triton cache per compile) with the ptxas Triton ships, so no
GPU is needed; the order alternates between the two sets so that neither runs on a warmer process. The kernel is
named as MODULE:NAME (the Autotuner a library defines); its pointer parameters are named with --pointers, its other
non-constexpr parameters are 32-bit integers, and --constexpr gives the call's constexpr values (the key).

    PYTHONPATH=src /work/libvenv/bin/python benchmarks/autotune_configs_compile.py \\
        --kernel fla.modules.activations.ops:swish_fwd_kernel --pointers x,y --constexpr D=11008 [--json F]
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import sys
from pathlib import Path
from typing import Any


def load_tuner(name: str) -> Any:
    module, _, attr = name.partition(":")
    tuner = getattr(importlib.import_module(module), attr)
    if not hasattr(tuner, "configs"):
        raise ValueError(f"{name} is not an autotuned kernel (no configs)")
    return tuner


def jit_function(tuner: Any) -> Any:
    """The JITFunction under the autotuner (and any heuristics)."""
    fn = tuner
    for _ in range(8):
        if hasattr(fn, "arg_names") and hasattr(fn, "src"):
            return fn
        fn = getattr(fn, "fn", None)
    raise ValueError("no JITFunction under the autotuner")


def signature(jit: Any, pointers: set[str], dtype: str) -> dict[str, str]:
    params = inspect.signature(jit.fn).parameters
    return {name: ("constexpr" if "constexpr" in str(param.annotation) else f"*{dtype}" if name in pointers else "i32")
            for name, param in params.items()}


def main(argv: list[str] | None = None) -> int:
    from compile_per_thread import compile_seconds  # this folder's: one compile for sm_90 from a fresh cache

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel", required=True, help="MODULE:NAME of an autotuned Triton kernel")
    parser.add_argument("--pointers", required=True, help="comma-separated pointer parameters")
    parser.add_argument("--constexpr", action="append", default=[], help="NAME=INT, the call's constexpr values")
    parser.add_argument("--dtype", default="fp32", help="the pointers' element type (fp32, fp16, bf16)")
    parser.add_argument("--json", type=Path, help="write the rows here too")
    args = parser.parse_args(argv)
    try:
        from opgate.verify.backends import autotune_choice

        tuner = load_tuner(args.kernel)
        jit = jit_function(tuner)
        call = {name: int(value) for name, value in (item.split("=", 1) for item in args.constexpr)}
    except (ImportError, AttributeError, ValueError) as exc:
        print(f"autotune_configs_compile.py: --kernel {args.kernel} / --constexpr {args.constexpr}: {exc}",
              file=sys.stderr)
        return 2
    sig = signature(jit, set(args.pointers.split(",")), args.dtype)
    loads = [(config, autotune_choice.elements_per_thread(config, call)) for config in tuner.configs]
    bound = max(autotune_choice.ELEMENTS_PER_THREAD_LIMIT, min(held for _, held in loads))
    rows = []
    # within and over the limit alternate, so neither set compiles on a process warmed by the other
    order = sorted(loads, key=lambda pair: pair[1] > bound)
    within = [pair for pair in order if pair[1] <= bound]
    over = [pair for pair in order if pair[1] > bound]
    interleaved = [pair for couple in zip(within, over) for pair in couple] + within[len(over):] + over[len(within):]
    compile_seconds(jit, sig, {**call, **interleaved[0][0].kwargs}, interleaved[0][0].num_warps, 3)  # first-use costs
    for config, held in interleaved:
        seconds = compile_seconds(jit, sig, {**call, **config.kwargs}, config.num_warps, config.num_stages or 3)
        rows.append({"config": autotune_choice.describe(config), "elements_a_thread": held,
                     "within_limit": held <= bound, "compile_s": round(seconds, 3)})
    every = sum(row["compile_s"] for row in rows)
    kept = sum(row["compile_s"] for row in rows if row["within_limit"])
    print(f"{args.kernel} at {call} ({args.dtype}), sm_90, one compile at a time on one process")
    print(f"{'config':<40} {'elements/thread':>15} {'within limit':>12} {'compile s':>10}")
    for row in sorted(rows, key=lambda r: r["elements_a_thread"]):
        print(f"{row['config']:<40} {row['elements_a_thread']:>15g} {str(row['within_limit']):>12} "
              f"{row['compile_s']:>10.2f}")
    print(f"{'way':<40} {'configs':>15} {'':>12} {'compile s':>10}")
    print(f"{'every config (Triton autotuning)':<40} {len(rows):>15} {'':>12} {every:>10.2f}")
    print(f"{'within the limit (within-limit)':<40} {len(within):>15} {'':>12} {kept:>10.2f}")
    if args.json:
        args.json.write_text(json.dumps({"kernel": args.kernel, "constexprs": call, "dtype": args.dtype,
                                         "rows": rows, "every_s": round(every, 2), "within_s": round(kept, 2)},
                                        indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
