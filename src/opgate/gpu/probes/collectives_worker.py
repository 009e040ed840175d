"""One rank of `opgate.gpu.probes.collectives`: `python -m opgate.gpu.probes.collectives_worker CONFIG.json RANK`.

Joins the group through a file rendezvous, times every (collective, size) of the sweep, runs the arrival probe,
and writes rankN.json beside the config. With nccl, rank r uses GPU r of the visible ones (as torchrun's
LOCAL_RANK does); with gloo, CPU tensors.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any, Callable

from opgate.engine.atomic import write_atomically
from opgate.gpu.probes.collectives import (
    ITEMSIZE, MULTICAST_OFF_ENV, OPS, cap_sizes, effective_size, elements_per_rank, iterations_for)


def _monotonic_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)  # one clock for every process of the host


class _Rank:
    def __init__(self, torch: Any, dist: Any, rank: int, ranks: int, device: Any) -> None:
        self.torch, self.dist, self.rank, self.ranks, self.device = torch, dist, rank, ranks, device
        self.cuda = device.type == "cuda"
        # the non-deprecated names where this torch has them (2.13 renames the *_tensor forms)
        self._gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        self._scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def prepare(self, op: str, size_bytes: int) -> tuple[Callable[[], None], Callable[[], bool], Callable[[], None]]:
        """(call, check, zero): `call` runs the collective once; `check` says whether the first call's result
        is right; `zero` refills the buffers with zeros so timed repetitions cannot overflow."""
        torch, n, r = self.torch, self.ranks, self.rank
        count = elements_per_rank(op, size_bytes, n)
        full = lambda c, v: torch.full((c,), float(v), dtype=torch.float32, device=self.device)  # noqa: E731
        if op == "all_reduce":
            buf = full(count, r + 1)
            expected = n * (n + 1) / 2

            def call() -> None:
                self.dist.all_reduce(buf)

            def check() -> bool:
                return bool((buf == expected).all().item())

            def zero() -> None:
                buf.zero_()
        elif op == "all_gather":
            src, out = full(count, r + 1), torch.empty(count * n, dtype=torch.float32, device=self.device)

            def call() -> None:
                self._gather(out, src)

            def check() -> bool:  # row k of the gathered output came from rank k, which sent k + 1
                want = torch.arange(1, n + 1, dtype=torch.float32, device=self.device).unsqueeze(1)
                return bool((out.view(n, count) == want).all().item())

            def zero() -> None:
                src.zero_()
        elif op == "reduce_scatter":
            src, out = full(count * n, r + 1), torch.empty(count, dtype=torch.float32, device=self.device)
            expected = n * (n + 1) / 2

            def call() -> None:
                self._scatter(out, src)

            def check() -> bool:
                return bool((out == expected).all().item())

            def zero() -> None:
                src.zero_()
        elif op == "broadcast":
            buf = full(count, 7 if r == 0 else -1)

            def call() -> None:
                self.dist.broadcast(buf, src=0)

            def check() -> bool:
                return bool((buf == 7).all().item())

            def zero() -> None:
                buf.zero_()
        else:
            raise ValueError(f"unknown collective {op!r}; choose from {', '.join(OPS)}")
        return call, check, zero

    def time_one(self, op: str, size_bytes: int) -> dict[str, Any]:
        warmup, iterations = iterations_for(size_bytes)
        call, check, zero = self.prepare(op, size_bytes)
        call()
        self.sync()
        correct = check()
        zero()
        for _ in range(warmup - 1):
            call()
        self.sync()
        self.dist.barrier()
        self.sync()
        start = time.perf_counter()
        for _ in range(iterations):
            call()
        self.sync()
        seconds = (time.perf_counter() - start) / iterations
        return {"op": op, "size_bytes": effective_size(op, size_bytes, self.ranks), "iterations": iterations,
                "seconds": seconds, "correct": correct}

    def arrivals(self, size_bytes: int, iterations: int, delay_s: float) -> dict[str, Any]:
        call, _, zero = self.prepare("all_reduce", size_bytes)
        zero()
        call()
        self.sync()
        self.dist.barrier()
        entered, left = [], []
        for _ in range(iterations):
            if delay_s:
                time.sleep(delay_s)  # the planted straggler of opgate's tests
            entered.append(_monotonic_ns())
            call()
            self.sync()
            left.append(_monotonic_ns())
        return {"op": "all_reduce", "size_bytes": effective_size("all_reduce", size_bytes, self.ranks),
                "enter_ns": entered, "exit_ns": left}


def _device_label(torch: Any, device: Any) -> str:
    if device.type != "cuda":
        return "cpu"
    props = torch.cuda.get_device_properties(device)
    bus = getattr(props, "pci_bus_id", None)
    return f"cuda:{device.index} ({props.name}{', bus ' + str(bus) if bus is not None else ''})"


def main(argv: list[str]) -> int:
    config = json.loads(Path(argv[1]).read_text())
    rank = int(argv[2])
    ranks = int(config["ranks"])
    import torch
    import torch.distributed as dist

    backend = config["backend"]
    if backend == "nccl":
        if torch.cuda.device_count() < ranks:
            print(f"rank {rank}: {ranks} ranks need {ranks} GPUs, torch sees {torch.cuda.device_count()}",
                  file=sys.stderr)
            return 3
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        free, _total = torch.cuda.mem_get_info(device)
    else:
        device = torch.device("cpu")
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // max(1, ranks)
    timeout = datetime.timedelta(seconds=float(config["timeout_s"]))
    dist.init_process_group(backend, init_method="file://" + config["rendezvous"], rank=rank, world_size=ranks,
                            timeout=timeout)
    worker = _Rank(torch, dist, rank, ranks, device)
    # every rank must sweep the same sizes: the cap comes from the smallest free memory of any rank
    free_t = torch.tensor([float(free)], device=device)
    dist.all_reduce(free_t, op=dist.ReduceOp.MIN)
    sizes, cap = cap_sizes(config["sizes"], int(free_t.item()), ranks, float(config["cap_fraction"]))
    timings = []
    for op in config["ops"]:
        for size in sizes:
            timings.append(worker.time_one(op, size))
            if worker.cuda and size >= (64 << 20):
                torch.cuda.empty_cache()  # the growing sweep would otherwise keep every size's blocks cached
    probe_bytes = min(int(config["probe_bytes"]), max(sizes) if sizes else ITEMSIZE)
    delay = float(config["planted_delay_s"]) if rank == int(config["planted_delay_rank"]) else 0.0
    arrivals = worker.arrivals(probe_bytes, int(config["probe_iterations"]), delay)
    version = ""
    if backend == "nccl":
        try:
            raw = torch.cuda.nccl.version()  # a tuple in recent PyTorch, an int (2.18.3 -> 21803) in older
            version = ".".join(str(v) for v in raw) if isinstance(raw, tuple) else str(raw)
        except Exception as exc:  # version unknown is not a failure of the measurement
            version = f"unknown ({type(exc).__name__})"
    else:
        version = f"gloo (torch {torch.__version__})"
    dist.barrier()
    dist.destroy_process_group()
    report = {"rank": rank, "pid": os.getpid(), "host": socket.gethostname(), "device": _device_label(torch, device),
              "timings": timings, "arrivals": arrivals, "size_cap_bytes": cap, "backend_version": version,
              "env": {k: os.environ.get(k, "") for k in MULTICAST_OFF_ENV}}
    write_atomically(Path(config["result_dir"]) / f"rank{rank}.json", json.dumps(report), durable=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
