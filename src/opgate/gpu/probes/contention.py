"""Link contention on a multi-GPU host: every GPU copying to (and from) the host at once, and every ordered GPU
pair copying peer-to-peer at once, each against the same copy alone. Host copies reuse opgate.gpu.probes.host_links'
`measure_all_to_host` (one GPU for "alone", all for "together"), so both figures come from one method.

The judgement (spread across GPUs, worst GPU named, share kept against alone) is pure: `opgate.gpu.judge.contention`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Sequence

from opgate.gpu.probes.bandwidth import MiB
from opgate.gpu.probes.device import require_gpu
from opgate.gpu.probes.timing import bandwidth_gbs

Pair = tuple[int, int]


@dataclass(frozen=True)
class ContentionFigures:
    """Per key (a GPU index for host copies, "src->dst" for peer copies): GB/s alone and all at once."""

    kind: str  # "H2D", "D2H" or "P2P"
    alone_gbs: dict[str, float]
    together_gbs: dict[str, float]
    aggregate_together_gbs: float
    transfer_bytes: int

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "alone_gbs": dict(self.alone_gbs), "together_gbs": dict(self.together_gbs),
                "aggregate_together_gbs": self.aggregate_together_gbs, "transfer_bytes": self.transfer_bytes}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ContentionFigures":
        return cls(str(data["kind"]), {str(k): float(v) for k, v in data["alone_gbs"].items()},
                   {str(k): float(v) for k, v in data["together_gbs"].items()},
                   float(data["aggregate_together_gbs"]), int(data["transfer_bytes"]))


def pair_key(pair: Pair) -> str:
    return f"{pair[0]}->{pair[1]}"


def measure_host_contention(devices: Sequence[int], direction: str, transfer_bytes: int = 256 * MiB,
                            repeats: int = 4) -> ContentionFigures:
    from opgate.gpu.probes.host_links import measure_all_to_host

    alone = {str(d): measure_all_to_host([d], direction, transfer_bytes, repeats).per_gpu_gbs[d] for d in devices}
    together = measure_all_to_host(list(devices), direction, transfer_bytes, repeats)
    return ContentionFigures(direction, alone, {str(d): g for d, g in together.per_gpu_gbs.items()},
                             together.aggregate_gbs, transfer_bytes)


def measure_peer_copies(pairs: Sequence[Pair], transfer_bytes: int = 64 * MiB, repeats: int = 4) -> tuple[
        dict[Pair, float], float]:
    """All `pairs` copy src -> dst at the same time (cudaMemcpyPeerAsync, one stream per pair on its source GPU);
    per-pair GB/s from its own events, and the aggregate over the host's wall time."""
    from opgate.gpu.probes.p2p import _enable_peer

    cupy = require_gpu()
    runtime = cupy.cuda.runtime
    n = transfer_bytes
    state: list[dict[str, Any]] = []
    try:
        for src, dst in pairs:
            if runtime.deviceCanAccessPeer(src, dst):
                _enable_peer(cupy, src, dst)  # as the P2P probe does: direct copies where the topology allows
            entry: dict[str, Any] = {"pair": (src, dst)}
            with cupy.cuda.Device(dst):
                entry["dst_buf"] = cupy.empty((n,), dtype=cupy.uint8)
            with cupy.cuda.Device(src):
                entry["src_buf"] = cupy.full((n,), 0x5A, dtype=cupy.uint8)
                entry["stream"] = cupy.cuda.Stream(non_blocking=True)
                entry["start"], entry["end"] = cupy.cuda.Event(), cupy.cuda.Event()
            state.append(entry)
        for device in {d for pair in pairs for d in pair}:
            cupy.cuda.Device(device).synchronize()

        def issue(entry: dict[str, Any]) -> None:
            src, dst = entry["pair"]
            runtime.memcpyPeerAsync(entry["dst_buf"].data.ptr, dst, entry["src_buf"].data.ptr, src, n,
                                    entry["stream"].ptr)

        for entry in state:  # warm-up, each pair alone
            with cupy.cuda.Device(entry["pair"][0]):
                issue(entry)
                entry["stream"].synchronize()
        wall = time.perf_counter()
        for entry in state:
            with cupy.cuda.Device(entry["pair"][0]):
                entry["start"].record(entry["stream"])
                for _ in range(repeats):
                    issue(entry)
                entry["end"].record(entry["stream"])
        for entry in state:
            with cupy.cuda.Device(entry["pair"][0]):
                entry["stream"].synchronize()
        wall_ms = (time.perf_counter() - wall) * 1e3
        per_pair = {}
        for entry in state:
            with cupy.cuda.Device(entry["pair"][0]):
                per_pair[entry["pair"]] = bandwidth_gbs(n * repeats, cupy.cuda.get_elapsed_time(entry["start"],
                                                                                               entry["end"]))
    finally:
        state.clear()
        cupy.get_default_memory_pool().free_all_blocks()
    return per_pair, bandwidth_gbs(n * repeats * len(pairs), wall_ms)


def measure_pair_contention(devices: Sequence[int], transfer_bytes: int = 64 * MiB,
                            repeats: int = 4) -> ContentionFigures:
    pairs = [(s, d) for s in devices for d in devices if s != d]
    alone = {pair_key(p): measure_peer_copies([p], transfer_bytes, repeats)[0][p] for p in pairs}
    together, aggregate = measure_peer_copies(pairs, transfer_bytes, repeats)
    return ContentionFigures("P2P", alone, {pair_key(p): g for p, g in together.items()}, aggregate, transfer_bytes)
