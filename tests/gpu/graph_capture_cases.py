"""Child-process driver for the graph-capture GPU tests: `python graph_capture_cases.py CASE` prints JSON.
Each case runs in a fresh process because a failed capture poisons PyTorch's CUDA generator for the process."""

from __future__ import annotations

import dataclasses
import json
import sys


def clean(x):
    return (x * 2.0 + 1.0).relu()


def reads_item(x):
    scale = x.abs().max().item()
    return x / scale


def synchronizes(x):
    import torch

    y = x * 2
    torch.cuda.synchronize()
    return y


# CuPy kernels for the replay-mismatch causes: y = 2x, and a row sum whose threads add into out[row] without atomics
# (a read-modify-write race: lost updates differ from call to call).
CUPY_SOURCE = r"""
extern "C" __global__ void twice(const float* x, float* y, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
extern "C" __global__ void racy_rowsum(const float* x, float* out, long long rows, long long cols) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < rows * cols) out[i / cols] = out[i / cols] + x[i];
}
"""
_MODULE = []


def _kernel(name):
    import cupy

    if not _MODULE:
        _MODULE.append(cupy.RawModule(code=CUPY_SOURCE))
    return _MODULE[0].get_function(name)


def legacy_stream(x):
    """CuPy's default stream is the legacy default stream: under capture the launch runs eagerly, uncaptured."""
    import cupy
    import numpy
    import torch

    y = torch.empty_like(x)
    with cupy.cuda.Stream.null:
        _kernel("twice")(((x.numel() + 255) // 256,), (256,), (cupy.asarray(x), cupy.asarray(y), numpy.int64(x.numel())))
    return y


def racy(x):
    import cupy
    import numpy
    import torch

    rows = x.view(64, -1)
    out = torch.zeros(64, device=x.device)
    with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
        _kernel("racy_rowsum")(((x.numel() + 255) // 256,), (256,),
                               (cupy.asarray(rows), cupy.asarray(out), numpy.int64(64), numpy.int64(rows.shape[1])))
    return out


_CACHE = {}


def cached_by_pointer(x):
    """A result cache keyed by the input's address: the capture (on the warmed-up buffers) records no work, and a
    replay returns the stored result whatever the buffers hold now."""
    return _CACHE.setdefault(x.data_ptr(), x * 2)


def huge_under_capture(x):
    """Asks for more than the whole card, but only while a graph captures it: out of memory, not uncapturable."""
    import torch

    if torch.cuda.is_current_stream_capturing():
        torch.empty(torch.cuda.get_device_properties(x.device).total_memory, dtype=torch.uint8, device=x.device)
    return x * 2


def oom_beside_a_kept_block(x):
    """Under capture: forty 5 MiB blocks (four to a 20 MiB segment), three of every four freed, then a request for
    more than the card. The capture ends (an out-of-memory error leaves it valid), reset() releases its pool, and
    while the failure's traceback keeps the other blocks their split segments stay reserved: a second release of
    that pool broke the process's allocator (forty-ninth session)."""
    import torch

    if torch.cuda.is_current_stream_capturing():
        blocks = [torch.empty(5 << 20, dtype=torch.uint8, device=x.device) for _ in range(40)]
        kept = blocks[::4]
        del blocks
        torch.empty(torch.cuda.get_device_properties(x.device).total_memory, dtype=torch.uint8, device=x.device)
        return x * kept[0][0]
    return x * 2


def reads_item_after_a_large_buffer(x):
    """Allocates 1 GiB (from the graph's pool while capturing), then reads a device value on the host: the capture
    fails with its pool holding the GiB, which a PyTorch without pytorch/pytorch#190348 keeps until the process
    exits unless check_graph_capture releases it."""
    import torch

    buffer = torch.empty(1 << 30, dtype=torch.uint8, device=x.device)
    buffer.zero_()
    return x / (x.abs().max().item() + float(buffer[0]))


def main(case: str) -> None:
    """CASE, or CASE:timed to time the call first and pass its median, as the runtime stage does."""
    import torch

    from opgate.gpu.probes.graphs import check_graph_capture
    from opgate.gpu.probes.timing import time_cuda

    case, _, mode = case.partition(":")
    timed = mode == "timed"
    x = torch.randn(1 << 20, device="cuda")
    if case == "timing":
        sets = [(torch.randn(1 << 24, device="cuda"),) for _ in range(3)]
        print(json.dumps(time_cuda(clean, sets, repeats=20).to_dict()))
        return
    fn = {"clean": clean, "reads_item": reads_item, "synchronizes": synchronizes, "legacy_stream": legacy_stream,
          "racy": racy, "cached_by_pointer": cached_by_pointer, "huge_under_capture": huge_under_capture,
          "reads_item_after_a_large_buffer": reads_item_after_a_large_buffer,
          "oom_beside_a_kept_block": oom_beside_a_kept_block}[case]
    seconds_per_call = None
    if timed:  # as the runtime stage calls it: after a timing, with the call's median
        seconds_per_call = time_cuda(fn, [(x,)], repeats=5).median_us * 1e-6
    try:
        report = check_graph_capture(fn, (x,), (torch.randn_like(x),), seconds_per_call=seconds_per_call)
    except torch.cuda.OutOfMemoryError:
        allocator = "works"
        try:  # as the warm worker's next check would: its allocator must still work
            torch.cuda.empty_cache()
            torch.empty(1 << 20, device="cuda")
        except Exception as exc:
            allocator = str(exc).splitlines()[0]
        print(json.dumps({"raised": "OutOfMemoryError", "allocator": allocator}))
        return
    from opgate.gpu.probes.graphs import unused_reserved_bytes

    print(json.dumps({**dataclasses.asdict(report), "unused_reserved_after": unused_reserved_bytes(torch)}))


if __name__ == "__main__":
    main(sys.argv[1])
