"""The runtime check's graph capture on real library calls, two ways in one run, GPU only.

For each GPU implementation of the given spec files, in one dtype at its timing size: time it as the runtime stage
does (gpu/probes/timing.py time_cuda, which now records the host's time to submit a call), then run the graph check
(gpu/probes/graphs.py check_graph_capture) both ways, alternating which goes first:
- before: eager calls timed against replays for every call that fits the budget (replay_timing_calls without the
  host's time);
- now: not timed where the host submits a call in under HOST_BOUND_SHARE of its GPU time.
Prints a table per call (median, host submit time, graph check seconds each way) and the totals.

    PYTHONPATH=src:/tmp/site python3 benchmarks/graph_replay_timing.py tests/data/verify/library_corpus/fla_losses.py \
        [--dtype float32] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

GPU_BACKENDS = ("triton", "torch")  # the backends whose implementations the runtime stage times (gpu_stages)


def graph_seconds(fn: Any, captured: tuple, replayed: tuple, median_s: float, host_s: float | None) -> tuple[float, Any]:
    from opgate.gpu.probes.graphs import check_graph_capture

    started = time.perf_counter()
    report = check_graph_capture(fn, captured, replayed, seconds_per_call=median_s, host_submit_s=host_s)
    return time.perf_counter() - started, report


def one_call(torch: Any, op: Any, impl: Any, dtype: str, before_first: bool) -> dict[str, Any]:
    """One implementation timed as the runtime stage times it (its autotuning scope, a gradient's upstream kept on
    the GPU), then its graph check both ways, `before_first` deciding the order."""
    from opgate.gpu.probes.timing import time_cuda
    from opgate.verify.gradients import upstream_kept_on_device
    from opgate.verify.runtime import cuda_inputs, rotating_input_sets, runtime_autotuning

    with upstream_kept_on_device(), runtime_autotuning():
        sets = rotating_input_sets(tuple(cuda_inputs(op, op.timing_dims(), dtype, seed=0)), count=3)
        stats = time_cuda(impl.fn, sets)
        row: dict[str, Any] = {"call": f"{op.name}.{impl.name} {dtype}", "median_us": round(stats.median_us, 1),
                               "host_submit_us": round(stats.host_submit_us or 0.0, 1)}
        ways = {"before": None, "now": (stats.host_submit_us or 0.0) * 1e-6}
        for way in (["before", "now"] if before_first else ["now", "before"]):
            seconds, report = graph_seconds(impl.fn, sets[0], sets[1], stats.median_us * 1e-6, ways[way])
            row[f"{way}_s"] = round(seconds, 3)
            row[f"{way}_timed"] = report.saved_us_per_call is not None
            row[f"{way}_matches"] = report.matches_eager
    del sets
    torch.cuda.empty_cache()
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec_files", nargs="+")
    parser.add_argument("--dtype", default="float32", help="the dtype each call is timed in, where declared")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args(argv)
    missing = [p for p in args.spec_files if not Path(p).is_file()]
    if missing:
        print(f"graph_replay_timing.py: {missing[0]}: no such spec file", file=sys.stderr)
        return 2
    import torch

    if not torch.cuda.is_available():
        print("graph_replay_timing.py: no CUDA device: this benchmark times GPU calls", file=sys.stderr)
        return 2
    from opgate.verify.loaded_specs import loaded_operators

    rows: list[dict[str, Any]] = []
    for spec_file in args.spec_files:
        for op in loaded_operators(spec_file):
            if args.dtype not in op.dtypes:
                continue
            for impl in op.implementations.values():
                if impl.backend not in GPU_BACKENDS:
                    continue
                try:
                    row = one_call(torch, op, impl, args.dtype, before_first=len(rows) % 2 == 0)
                except Exception as exc:  # one call that does not fit or fails is a row, not the end of the run
                    print(f"{op.name}.{impl.name}: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
                    torch.cuda.empty_cache()
                    continue
                rows.append(row)
                print(f"{row['call']:58s} median {row['median_us']:>10.1f} us  host {row['host_submit_us']:>7.1f} us"
                      f"  before {row['before_s']:6.3f} s ({'timed' if row['before_timed'] else 'not timed'})"
                      f"  now {row['now_s']:6.3f} s ({'timed' if row['now_timed'] else 'not timed'})", flush=True)
    before, now = sum(r["before_s"] for r in rows), sum(r["now_s"] for r in rows)
    skipped = sum(1 for r in rows if r["before_timed"] and not r["now_timed"])
    print(f"{len(rows)} calls: graph checks {before:.1f} s before, {now:.1f} s now; replay timing left out of {skipped}")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "before_s": before, "now_s": now}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
