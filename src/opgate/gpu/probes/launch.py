"""Kernel launch overhead: a tiny kernel launched one by one vs replayed from a CUDA graph.

Both are timed with events around N launches on one stream; the per-kernel figure is elapsed / N. The
tiny kernel increments a counter, so after every measurement the counter proves every launch ran.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from opgate.gpu.probes import kernels
from opgate.gpu.probes.device import DeviceInfo, ProbeError, device_info, require_gpu
from opgate.gpu.probes.graphs import capture_and_replay
from opgate.gpu.probes.timing import Samples


@dataclass(frozen=True)
class LaunchLatency:
    device: DeviceInfo
    kernels_per_run: int
    eager_us: Samples  # per kernel, launched one by one (events around N launches)
    graph_us: Samples  # per kernel, N launches captured in one graph and replayed
    host_enqueue_us: Samples  # host time per eager launch call
    graph_capture_ms: float
    duration_s: float

    @property
    def graph_over_eager(self) -> float:
        return self.graph_us.median / self.eager_us.median

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device.to_dict(), "kernels_per_run": self.kernels_per_run,
                "eager_us": self.eager_us.summary(), "graph_us": self.graph_us.summary(),
                "host_enqueue_us": self.host_enqueue_us.summary(), "graph_capture_ms": self.graph_capture_ms,
                "graph_over_eager": self.graph_over_eager, "duration_s": self.duration_s}


def measure_launch_latency(device: int = 0, kernels_per_run: int = 1000, runs: int = 7) -> LaunchLatency:
    started = time.perf_counter()
    cupy = require_gpu()
    info = device_info(device)
    n = kernels_per_run
    with cupy.cuda.Device(device):
        stream = cupy.cuda.Stream(non_blocking=True)
        counter = cupy.zeros(1, dtype=cupy.uint32)
        cupy.cuda.Device(device).synchronize()  # the zeroing ran on the legacy stream; ours does not wait for it
        tiny = kernels.kernel("opgate_tiny")
        with stream:
            tiny((1,), (32,), (counter,))  # compile + load before anything is timed
        stream.synchronize()
        launched = 1

        eager, host = [], []
        for run in range(runs + 1):
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            with stream:
                start.record(stream)
                t0 = time.perf_counter()
                for _ in range(n):
                    tiny((1,), (32,), (counter,))
                t1 = time.perf_counter()
                end.record(stream)
            stream.synchronize()
            launched += n
            if run == 0:  # warm-up
                continue
            eager.append(cupy.cuda.get_elapsed_time(start, end) * 1e3 / n)
            host.append((t1 - t0) * 1e6 / n)

        def capture() -> Any:
            with stream:
                stream.begin_capture()
                try:
                    for _ in range(n):
                        tiny((1,), (32,), (counter,))
                finally:
                    graph = stream.end_capture()
            return graph

        graphed: list[float] = []
        uploaded: list[Any] = []

        def timed_replay(graph: Any) -> None:
            nonlocal launched
            if not uploaded:  # once, before the warm-up replay, outside the capture time
                graph.upload(stream)
                uploaded.append(graph)
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            start.record(stream)
            graph.launch(stream)
            end.record(stream)
            stream.synchronize()
            launched += n
            graphed.append(cupy.cuda.get_elapsed_time(start, end) * 1e3 / n)

        def counter_check() -> str:
            count = int(cupy.asnumpy(counter)[0])
            return "" if count == launched else (f"the tiny kernel ran {count} times, not the {launched} launched: "
                                                 "launches or graph replays were lost")

        replayed = capture_and_replay(capture, timed_replay, counter_check, replays=runs + 1)
        if not replayed.captured:
            raise ProbeError(f"CUDA graph capture of {n} launches failed: {replayed.error}")
        if replayed.problem:
            raise ProbeError(replayed.problem)
        graphed = graphed[1:]  # the first replay is the warm-up
        capture_ms = replayed.capture_ms
    return LaunchLatency(info, n, Samples.of(eager), Samples.of(graphed), Samples.of(host), capture_ms,
                         time.perf_counter() - started)
