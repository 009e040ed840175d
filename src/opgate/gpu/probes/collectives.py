"""Collectives through `torch.distributed`, one process per rank: all-reduce, all-gather, reduce-scatter and
broadcast over a sweep of message sizes, with nccl-tests' algorithm and bus bandwidth.

Definitions (nccl-tests, doc/PERFORMANCE.md, https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md):
  algbw = S / t, where S is the size nccl-tests prints: the buffer of all-reduce and broadcast, the whole
  gathered output of all-gather, the whole input of reduce-scatter; t the time of one operation.
  busbw = algbw x factor: all-reduce 2(n-1)/n, all-gather and reduce-scatter (n-1)/n, broadcast 1, so busbw
  is comparable to the hardware's link bandwidth whatever the rank count.
nccl-tests averages the time over ranks; so does `SizeResult.time_s`. Each rank's own time is kept beside it.

The slowest rank: in a collective every rank waits for the last one to arrive, so a straggler does not show
as a longer time of its own (everyone's time is gated by it) but as arriving last. A short probe after the sweep
records, per iteration, the moment each rank enters the collective on the host's monotonic clock (shared by
all processes of one host); the rank that enters last, on average, is the one the others wait for.

The same code runs with `gloo` on CPU tensors (the tests run 2-4 real processes that way) and with `nccl` on
one GPU per process. Every child gets NVLink multicast switched off (MULTICAST_OFF_ENV): a program using it can
take a shared host's GPUs out of service.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
MIN_BYTES = 8
MAX_BYTES = 4 << 30  # 4 GiB, the top of the sweep the issue asks for
ITEMSIZE = 4  # float32 elements, as nccl-tests' default -d float
# NVLink multicast (NVLS) off in NCCL, PyTorch's symmetric memory and NVSHMEM: the lending hosts' rule
# (device docs, KINDS.md), forced in every child whatever the parent's environment says.
MULTICAST_OFF_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
LATENCY_MAX_BYTES = 64 << 10  # sizes up to 64 KiB are reported as latency (time dominated by fixed cost)


class CollectiveRunError(Exception):
    """The ranks did not produce a usable result: a rank died, hung or its results are missing."""


def bus_factor(op: str, ranks: int) -> float:
    """nccl-tests' busbw / algbw for `op` on `ranks` ranks (doc/PERFORMANCE.md)."""
    if ranks < 1:
        raise ValueError(f"rank count must be >= 1, not {ranks}")
    if op == "all_reduce":
        return 2.0 * (ranks - 1) / ranks
    if op in ("all_gather", "reduce_scatter"):
        return (ranks - 1) / ranks
    if op == "broadcast":
        return 1.0
    raise ValueError(f"unknown collective {op!r}; choose from {', '.join(OPS)}")


def algbw_gbs(size_bytes: int, seconds: float) -> float:
    """Algorithm bandwidth in GB/s (10^9 bytes/s, as nccl-tests prints it)."""
    if seconds <= 0:
        raise ValueError(f"time must be positive, not {seconds}")
    return size_bytes / seconds / 1e9


def busbw_gbs(op: str, size_bytes: int, seconds: float, ranks: int) -> float:
    return algbw_gbs(size_bytes, seconds) * bus_factor(op, ranks)


def message_sizes(min_bytes: int = MIN_BYTES, max_bytes: int = MAX_BYTES, factor: int = 2) -> list[int]:
    """min, min*factor, ... up to max (nccl-tests' -b/-e/-f)."""
    if min_bytes < 1 or max_bytes < min_bytes or factor < 2:
        raise ValueError(f"bad sweep: {min_bytes}..{max_bytes} step x{factor}")
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= factor
    return sizes


def elements_per_rank(op: str, size_bytes: int, ranks: int) -> int:
    """Elements each rank sends (all-gather) / receives (reduce-scatter) / holds (all-reduce, broadcast) so the
    operation's nccl-tests size S is `size_bytes`, rounded down to whole elements per rank (at least 1)."""
    if op in ("all_gather", "reduce_scatter"):
        return max(1, size_bytes // (ITEMSIZE * ranks))
    return max(1, size_bytes // ITEMSIZE)


def effective_size(op: str, size_bytes: int, ranks: int) -> int:
    """The S that really moves after rounding to whole elements (printed in place of the requested size)."""
    count = elements_per_rank(op, size_bytes, ranks)
    return count * ITEMSIZE * (ranks if op in ("all_gather", "reduce_scatter") else 1)


def bytes_needed_per_rank(op: str, size_bytes: int, ranks: int) -> int:
    """Device memory one rank allocates for one size: all-reduce and broadcast in place; all-gather an output of S
    and an input of S/n; reduce-scatter an input of S and an output of S/n."""
    if op in ("all_gather", "reduce_scatter"):
        return size_bytes + size_bytes // ranks
    return size_bytes


def cap_sizes(sizes: Sequence[int], free_bytes: int, ranks: int, fraction: float = 0.4) -> tuple[list[int], int]:
    """The sizes whose largest buffer fits in `fraction` of a rank's free memory, and that cap in bytes."""
    budget = int(free_bytes * fraction)
    kept = [s for s in sizes if max(bytes_needed_per_rank(op, s, ranks) for op in OPS) <= budget]
    return kept, budget


def iterations_for(size_bytes: int) -> tuple[int, int]:
    """(warm-up, timed iterations) for one size; the same on every rank, so the ranks stay in step.
    nccl-tests defaults to 5 and 20; large messages take fewer so a 4 GiB sweep fits the check's budget."""
    if size_bytes >= 512 << 20:
        return 2, 5
    if size_bytes >= 32 << 20:
        return 3, 10
    return 5, 20


# -- what the ranks report ---------------------------------------------------------------------------
@dataclass(frozen=True)
class RankTiming:
    op: str
    size_bytes: int  # nccl-tests' S, after rounding
    iterations: int
    seconds: float  # mean time of one operation on this rank's own clock
    correct: bool  # the first call's result held the expected values


@dataclass(frozen=True)
class RankArrivals:
    op: str
    size_bytes: int
    enter_ns: tuple[int, ...]  # CLOCK_MONOTONIC when the rank entered each probe iteration's collective
    exit_ns: tuple[int, ...]  # ... and when its result was there (after synchronize)


@dataclass(frozen=True)
class RankReport:
    rank: int
    pid: int
    device: str  # "cuda:3 (NVIDIA H200, 0000:18:00.0)" or "cpu"
    timings: tuple[RankTiming, ...]
    arrivals: RankArrivals | None
    backend_version: str = ""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "RankReport":
        arrivals = data.get("arrivals")
        return cls(int(data["rank"]), int(data["pid"]), str(data["device"]),
                   tuple(RankTiming(**t) for t in data["timings"]),
                   RankArrivals(arrivals["op"], int(arrivals["size_bytes"]), tuple(arrivals["enter_ns"]),
                                tuple(arrivals["exit_ns"]))
                   if arrivals else None, str(data.get("backend_version", "")))


@dataclass(frozen=True)
class SizeResult:
    op: str
    size_bytes: int
    ranks: int
    time_s: float  # mean over ranks (nccl-tests)
    per_rank_s: tuple[float, ...]
    algbw_gbs: float
    busbw_gbs: float
    correct: bool

    @property
    def latency_us(self) -> float:
        return self.time_s * 1e6


@dataclass(frozen=True)
class Straggler:
    """Who the others waited for in the arrival probe."""

    op: str
    size_bytes: int
    iterations: int
    mean_lag_us: tuple[float, ...]  # per rank: how long after the first rank it entered, on average
    last_counts: tuple[int, ...]  # per rank: in how many iterations it entered last
    slowest_rank: int
    # mean time from the last rank's arrival until every rank had its result: the collective's own cost,
    # the scale the lag is read against
    span_us: float

    @property
    def slowest_lag_us(self) -> float:
        return self.mean_lag_us[self.slowest_rank]

    @property
    def lag_over_span(self) -> float:
        """The slowest rank's mean lag over the collective's own time: 0 = no one waited."""
        return self.slowest_lag_us / self.span_us if self.span_us > 0 else float("inf")

    @property
    def last_share(self) -> float:
        return self.last_counts[self.slowest_rank] / self.iterations if self.iterations else 0.0


@dataclass(frozen=True)
class CollectiveRun:
    backend: str
    ranks: int
    devices: tuple[str, ...]
    results: tuple[SizeResult, ...]
    straggler: Straggler | None
    size_cap_bytes: int | None  # the largest buffer a rank may allocate (from free memory), None if uncapped
    largest_requested_bytes: int
    duration_s: float
    backend_version: str = ""
    env: Mapping[str, str] = field(default_factory=dict)

    def by_op(self, op: str) -> list[SizeResult]:
        return [r for r in self.results if r.op == op]

    def largest(self, op: str) -> SizeResult | None:
        rows = self.by_op(op)
        return max(rows, key=lambda r: r.size_bytes) if rows else None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["env"] = dict(self.env)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "CollectiveRun":
        straggler = data.get("straggler")
        return cls(
            backend=str(data["backend"]), ranks=int(data["ranks"]), devices=tuple(data["devices"]),
            results=tuple(SizeResult(**{**r, "per_rank_s": tuple(r["per_rank_s"])}) for r in data["results"]),
            straggler=Straggler(**{**straggler, "mean_lag_us": tuple(straggler["mean_lag_us"]),
                                   "last_counts": tuple(straggler["last_counts"])}) if straggler else None,
            size_cap_bytes=data.get("size_cap_bytes"), largest_requested_bytes=int(data["largest_requested_bytes"]),
            duration_s=float(data["duration_s"]), backend_version=str(data.get("backend_version", "")),
            env=dict(data.get("env", {})))


# -- analysis: rank reports -> results (pure) ----------------------------------------------------------
def combine_rank_reports(reports: Sequence[RankReport]) -> tuple[list[SizeResult], Straggler | None]:
    """Per (op, size): the ranks' times averaged (nccl-tests), bandwidths from that average; and the arrival
    probe's straggler. Raises CollectiveRunError when the ranks did not all time the same operations."""
    if not reports:
        raise CollectiveRunError("no rank reported")
    ranks = len(reports)
    ordered = sorted(reports, key=lambda r: r.rank)
    if [r.rank for r in ordered] != list(range(ranks)):
        raise CollectiveRunError(f"rank reports {[r.rank for r in ordered]} are not ranks 0..{ranks - 1}")
    keys = [(t.op, t.size_bytes) for t in ordered[0].timings]
    for report in ordered[1:]:
        if [(t.op, t.size_bytes) for t in report.timings] != keys:
            raise CollectiveRunError(f"rank {report.rank} timed other operations than rank 0")
    results = []
    for index, (op, size) in enumerate(keys):
        per_rank = tuple(r.timings[index].seconds for r in ordered)
        mean = sum(per_rank) / ranks
        results.append(SizeResult(op, size, ranks, mean, per_rank, algbw_gbs(size, mean),
                                  busbw_gbs(op, size, mean, ranks), all(r.timings[index].correct for r in ordered)))
    return results, find_straggler(ordered)


def find_straggler(reports: Sequence[RankReport]) -> Straggler | None:
    """The rank that entered the probe's collectives last, on average (see the module docstring)."""
    arrivals = [r.arrivals for r in reports]
    if any(a is None for a in arrivals) or not arrivals:
        return None
    assert all(a is not None for a in arrivals)
    probes = [a for a in arrivals if a is not None]
    iterations = min(len(a.enter_ns) for a in probes)
    if iterations == 0:
        return None
    ranks = len(probes)
    lags = [0.0] * ranks
    last = [0] * ranks
    span = 0.0
    for i in range(iterations):
        entered = [a.enter_ns[i] for a in probes]
        first, final = min(entered), max(entered)
        for rank, t in enumerate(entered):
            lags[rank] += (t - first) / 1e3
        last[max(range(ranks), key=lambda r: entered[r])] += 1
        span += max(0, max(a.exit_ns[i] for a in probes) - final) / 1e3
    mean_lag = tuple(lag / iterations for lag in lags)
    slowest = max(range(ranks), key=lambda r: (mean_lag[r], last[r]))
    return Straggler(probes[0].op, probes[0].size_bytes, iterations, mean_lag, tuple(last), slowest,
                     span / iterations)


# -- the launcher ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CollectiveConfig:
    """What every rank runs. Plain data: written as JSON for the rank processes."""

    backend: str  # "nccl" (one GPU per rank) or "gloo" (CPU tensors)
    ranks: int
    ops: tuple[str, ...] = OPS
    sizes: tuple[int, ...] = tuple(message_sizes())
    cap_fraction: float = 0.4  # of each rank's free device memory a buffer may take
    probe_iterations: int = 12
    probe_bytes: int = 1 << 20
    timeout_s: float = 300.0
    # A planted straggler for opgate's own tests: this rank sleeps before each probe iteration's collective.
    # The doctor check never sets it.
    planted_delay_rank: int = -1
    planted_delay_s: float = 0.0

    def __post_init__(self) -> None:
        if self.backend not in ("nccl", "gloo"):
            raise ValueError(f"backend must be nccl or gloo, not {self.backend!r}")
        if self.ranks < 2:
            raise ValueError(f"collectives need 2 or more ranks, not {self.ranks}")
        unknown = [op for op in self.ops if op not in OPS]
        if unknown:
            raise ValueError(f"unknown collective {unknown[0]!r}; choose from {', '.join(OPS)}")


def child_env(backend: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of every rank: the parent's, this opgate on PYTHONPATH, NVLink multicast forced off."""
    env = dict(os.environ if base is None else base)
    package_root = str(Path(__file__).resolve().parents[3])  # src/, above opgate/gpu/probes/
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    env.update(MULTICAST_OFF_ENV)
    env.setdefault("PYTHONUNBUFFERED", "1")
    if backend == "gloo":
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # one host: loopback, whatever the host's other interfaces
        env.setdefault("OMP_NUM_THREADS", "1")
    return env


def run_collectives(config: CollectiveConfig, env: Mapping[str, str] | None = None) -> CollectiveRun:
    """Start `config.ranks` processes (`python -m opgate.gpu.probes.collectives_worker`), wait for all, combine.

    A rank that exits non-zero or outlives the timeout takes the others down with it (a collective would
    otherwise hang on the missing peer); CollectiveRunError names the rank and the tail of its stderr."""
    from opgate.engine.children import die_with_parent, kill_process_group, register_child, unregister_child

    started = time.perf_counter()
    children_env = child_env(config.backend, env)
    with tempfile.TemporaryDirectory(prefix="opgate-collectives-") as tmp:
        folder = Path(tmp)
        config_path = folder / "config.json"
        config_path.write_text(json.dumps({**asdict(config), "rendezvous": str(folder / "rendezvous"),
                                           "result_dir": str(folder)}))
        procs: list[subprocess.Popen[bytes]] = []
        logs = []
        try:
            for rank in range(config.ranks):
                log = open(folder / f"rank{rank}.stderr", "wb")
                logs.append(log)
                proc = subprocess.Popen(
                    [sys.executable, "-m", "opgate.gpu.probes.collectives_worker", str(config_path), str(rank)],
                    stdout=log, stderr=subprocess.STDOUT, env=children_env, start_new_session=True,
                    preexec_fn=die_with_parent)
                register_child(proc)
                procs.append(proc)
            failed = _wait_all(procs, config.timeout_s)
        finally:
            for proc in procs:
                if proc.poll() is None:
                    kill_process_group(proc)
                unregister_child(proc)
            for log in logs:
                log.close()
        if failed is not None:
            rank, why = failed
            tail = (folder / f"rank{rank}.stderr").read_text(errors="replace")[-1500:].strip()
            raise CollectiveRunError(f"rank {rank} {why}; its output ends: {tail or '(nothing)'}")
        reports = []
        for rank in range(config.ranks):
            path = folder / f"rank{rank}.json"
            if not path.exists():
                raise CollectiveRunError(f"rank {rank} exited 0 but wrote no result")
            reports.append(RankReport.from_dict(json.loads(path.read_text())))
        metas = [json.loads((folder / f"rank{rank}.json").read_text()) for rank in range(config.ranks)]
    meta = metas[0]
    # what every child really had (read inside each rank), not what the parent meant to give it
    seen_env = {k: ",".join(sorted({str(m.get("env", {}).get(k, "")) for m in metas})) for k in MULTICAST_OFF_ENV}
    results, straggler = combine_rank_reports(reports)
    return CollectiveRun(
        backend=config.backend, ranks=config.ranks, devices=tuple(r.device for r in reports), results=tuple(results),
        straggler=straggler, size_cap_bytes=meta.get("size_cap_bytes"),
        largest_requested_bytes=max(config.sizes), duration_s=time.perf_counter() - started,
        backend_version=reports[0].backend_version,
        env=seen_env)


def _wait_all(procs: Sequence[subprocess.Popen[bytes]], timeout_s: float) -> tuple[int, str] | None:
    """None when every rank exited 0; else (rank, what happened) for the first that failed or hung."""
    deadline = time.monotonic() + timeout_s
    while True:
        codes = [p.poll() for p in procs]
        for rank, code in enumerate(codes):
            if code not in (None, 0):
                return rank, f"exited with code {code}"
        if all(code == 0 for code in codes):
            return None
        if time.monotonic() > deadline:
            waiting = [rank for rank, code in enumerate(codes) if code is None]
            return waiting[0], f"did not finish within {timeout_s:.0f} s (ranks still running: {waiting})"
        time.sleep(0.02)
