"""opgate's collectives sweep beside a plain torch.distributed all-reduce timed in the same run, as a table.

The contrast is deliberately independent code: torch.multiprocessing.spawn, one process per rank, all_reduce timed
with CUDA events (nccl) or the host clock (gloo) around a loop, busbw by nccl-tests' 2(n-1)/n. If the two disagree
by much at the same size, one of them measures something else.

    PYTHONPATH=src python3 benchmarks/collectives.py                     # nccl, every GPU, 8 B .. 4 GiB
    PYTHONPATH=src python3 benchmarks/collectives.py --backend gloo --ranks 3 --max-bytes 1048576   # CPU
    ... --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

PLAIN_SIZES = (8, 1 << 20, 64 << 20, 1 << 30, 4 << 30)


def _plain_rank(rank: int, ranks: int, backend: str, rendezvous: str, sizes: list[int], out_dir: str) -> None:
    import torch
    import torch.distributed as dist

    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend, init_method="file://" + rendezvous, rank=rank, world_size=ranks)
    rows = []
    for size in sizes:
        x = torch.ones(max(1, size // 4), dtype=torch.float32, device=device)
        iterations = 5 if size >= (512 << 20) else 20
        for _ in range(3):
            dist.all_reduce(x)
        if backend == "nccl":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            dist.barrier()
            start.record()
            for _ in range(iterations):
                dist.all_reduce(x)
            end.record()
            torch.cuda.synchronize()
            seconds = start.elapsed_time(end) / 1e3 / iterations
        else:
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(iterations):
                dist.all_reduce(x)
            seconds = (time.perf_counter() - t0) / iterations
        rows.append({"size_bytes": x.numel() * 4, "seconds": seconds})
        del x
    dist.destroy_process_group()
    Path(out_dir, f"plain{rank}.json").write_text(json.dumps(rows))


def plain_allreduce(backend: str, ranks: int, sizes: list[int]) -> list[dict[str, Any]]:
    """Mean over ranks of the plain loop's time per all-reduce, per size."""
    import torch.multiprocessing as mp

    from opgate.gpu.probes.collectives import MULTICAST_OFF_ENV, busbw_gbs

    os.environ.update(MULTICAST_OFF_ENV)  # the spawned ranks inherit it: NVLink multicast stays off here too
    if backend == "gloo":
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    with tempfile.TemporaryDirectory(prefix="opgate-plain-") as tmp:
        mp.spawn(_plain_rank, args=(ranks, backend, str(Path(tmp) / "rdv"), sizes, tmp), nprocs=ranks, join=True)
        per_rank = [json.loads(Path(tmp, f"plain{r}.json").read_text()) for r in range(ranks)]
    out = []
    for i, row in enumerate(per_rank[0]):
        mean = sum(p[i]["seconds"] for p in per_rank) / ranks
        out.append({"size_bytes": row["size_bytes"], "time_us": mean * 1e6,
                    "busbw_gbs": busbw_gbs("all_reduce", row["size_bytes"], mean, ranks)})
    return out


def main(argv: list[str] | None = None) -> int:
    from opgate.gpu.judge.collectives import render_sweep
    from opgate.gpu.probes.collectives import CollectiveConfig, message_sizes, run_collectives

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    parser.add_argument("--ranks", type=int, default=0, help="default: every GPU (nccl) or 2 (gloo)")
    parser.add_argument("--max-bytes", type=int, default=4 << 30)
    parser.add_argument("--plain-only", action="store_true", help="only the plain torch.distributed contrast")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    ranks = args.ranks
    if ranks <= 0:
        if args.backend == "nccl":
            import torch

            ranks = torch.cuda.device_count()
        else:
            ranks = 2
    if ranks < 2:
        print(f"collectives need 2 or more ranks; this host has {ranks} GPU(s)")
        return 0
    report: dict[str, Any] = {"backend": args.backend, "ranks": ranks}
    opgate_rows: dict[int, Any] = {}
    if not args.plain_only:
        started = time.perf_counter()
        run = run_collectives(CollectiveConfig(args.backend, ranks, sizes=tuple(message_sizes(8, args.max_bytes)),
                                               timeout_s=300))
        print(render_sweep(run))
        print(f"# opgate sweep: {time.perf_counter() - started:.1f} s wall")
        report["opgate"] = run.to_dict()
        opgate_rows = {r.size_bytes: r for r in run.by_op("all_reduce")}
    sizes = [s for s in PLAIN_SIZES if s <= args.max_bytes]
    started = time.perf_counter()
    plain = plain_allreduce(args.backend, ranks, sizes)
    print(f"# plain torch.distributed all_reduce: {time.perf_counter() - started:.1f} s wall")
    report["plain"] = plain
    print()
    print(f"| all_reduce, {ranks} x {args.backend} | opgate time (us) | opgate busbw (GB/s) | plain time (us) "
          "| plain busbw (GB/s) |")
    print("| --- | --- | --- | --- | --- |")
    for row in plain:
        mine = opgate_rows.get(row["size_bytes"])
        ours = (f"{mine.latency_us:.2f} | {mine.busbw_gbs:.2f}" if mine else "- | -")
        print(f"| {row['size_bytes']} B | {ours} | {row['time_us']:.2f} | {row['busbw_gbs']:.2f} |")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
