"""Can an implementation be captured in a CUDA graph? If so, does the replay match eager and how much
launch overhead does it save; if not, why, in the user's terms, and what to do about it.

The cause is found two ways: a dry run under PyTorch's sync-debug mode names every synchronizing call
(`.item()`, `.cpu()`, `nonzero`, `torch.cuda.synchronize`) with the user's file and line; the capture
error itself (cudaErrorStreamCaptureUnsupported and friends) is classified from its message.
"""

from __future__ import annotations

import linecache
import traceback
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

# (pattern in the error text, cause, remedy), most specific first.
CAPTURE_FAILURES: tuple[tuple[str, str, str], ...] = (
    ("item", "a host read of a device value (.item(), .tolist(), bool(tensor)) inside capture",
     "keep the value on the device (torch.where, masks) or compute it before capture"),
    ("synchron", "a synchronization inside capture (torch.cuda.synchronize, stream/event sync)",
     "remove the sync from the captured region; order work with streams and events instead"),
    ("cudamalloc", "a memory allocation outside the capture-aware allocator during capture",
     "allocate every buffer before capture (static buffers) or use PyTorch's allocator"),
    ("pageable", "a host-to-device copy from pageable memory inside capture",
     "copy inputs into static device buffers before capture; use pinned memory for transfers"),
    ("legacy stream", "work on the legacy default stream while another stream was capturing",
     "launch everything on the capturing stream (use torch.cuda.current_stream())"),
    ("operation not permitted when stream is capturing",
     "an operation that synchronizes with the host inside capture (a sync, a host read of a device value "
     "or a pageable copy)",
     "move host interaction out of the captured region; use static buffers"),
    ("capture", "the capture was invalidated by an earlier error", "run eagerly to find the first failing call"),
)

DYNAMIC_SHAPE_CAUSE = ("shapes that depend on the data (nonzero, masked_select, unique) or change per call",
                       "bucket shapes and capture one graph per bucket; avoid data-dependent output sizes")


@dataclass
class GraphCaptureReport:
    captured: bool
    matches_eager: bool | None = None
    max_abs_diff: float | None = None
    eager_us_per_call: float | None = None
    graph_us_per_call: float | None = None
    cause: str = ""
    remedy: str = ""
    error: str = ""
    sync_points: list[str] = field(default_factory=list)

    @property
    def saved_us_per_call(self) -> float | None:
        if self.eager_us_per_call is None or self.graph_us_per_call is None:
            return None
        return self.eager_us_per_call - self.graph_us_per_call


HOST_READS = (".item(", ".tolist(", ".cpu(", ".numpy(", "local_scalar_dense", "bool(", "float(", "int(")


def classify_capture_error(message: str, sync_points: Sequence[str]) -> tuple[str, str]:
    """Cause and remedy for a failed capture, preferring what the sync-debug dry run saw (each sync point
    carries the user's source line, which says whether it was a host read or an explicit sync)."""
    text = " ".join([message, *sync_points]).lower()
    if any(op in text for op in ("nonzero", "masked_select", "unique")):
        return DYNAMIC_SHAPE_CAUSE
    for point in sync_points:
        lowered = point.lower()
        if "synchronize(" in lowered:
            return CAPTURE_FAILURES[1][1:]
        if any(marker in lowered for marker in HOST_READS):
            return CAPTURE_FAILURES[0][1:]
    for pattern, cause, remedy in CAPTURE_FAILURES:
        if pattern in text:
            return cause, remedy
    return "an operation CUDA graphs do not support", "run the implementation eagerly, or capture a smaller region"


def find_sync_points(fn: Callable[..., Any], args: tuple) -> list[str]:
    """Run fn once under torch's sync-debug mode; return 'message at file:line' for each synchronizing call."""
    import torch

    points: list[str] = []
    previous = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn(*args)
            torch.cuda.set_sync_debug_mode(previous)
            torch.cuda.synchronize()
        finally:
            torch.cuda.set_sync_debug_mode(previous)
    for warning in caught:
        message = str(warning.message).splitlines()[0]
        if "synchroniz" in message.lower():
            source = linecache.getline(warning.filename, warning.lineno).strip()
            points.append(f"{message.split(' (Triggered')[0]} at {warning.filename}:{warning.lineno}: {source}")
    explicit = _explicit_synchronize_calls(fn, args)
    return points + explicit


def _explicit_synchronize_calls(fn: Callable[..., Any], args: tuple) -> list[str]:
    """torch.cuda.synchronize() itself raises no sync-debug warning; count it by wrapping it for one call."""
    import torch

    seen: list[str] = []
    original = torch.cuda.synchronize

    def spy(*a: Any, **kw: Any) -> Any:
        frame = traceback.extract_stack(limit=2)[0]
        seen.append(f"torch.cuda.synchronize() at {frame.filename}:{frame.lineno}: {frame.line or ''}")
        return original(*a, **kw)

    torch.cuda.synchronize = spy
    try:
        fn(*args)
    finally:
        torch.cuda.synchronize = original
    original()
    return seen


def _median_us(run: Callable[[], Any], calls: int) -> float:
    import statistics

    import torch

    samples = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            run()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1000.0 / calls)
    return statistics.median(samples)


def _as_tensors(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _as_tensors(item)]
    return [value] if hasattr(value, "shape") else []


def check_graph_capture(fn: Callable[..., Any], args: tuple, fresh_args: tuple | None = None,
                        calls_for_timing: int = 20) -> GraphCaptureReport:
    """Capture `fn(*args)`, replay it on `fresh_args` copied into the same static buffers, compare with eager.

    Run it last in its own process: a failed capture leaves PyTorch's CUDA generator in capture state
    ("Offset increment outside graph capture"), so later random draws in that process fail.
    """
    import torch

    static = tuple(a.clone() if torch.is_tensor(a) else a for a in args)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # warm up off the default stream: JIT compiles and autotunes happen here
            fn(*static)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    sync_points = find_sync_points(fn, static)

    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            static_out = fn(*static)
    except Exception as exc:  # the capture error is the finding
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        cause, remedy = classify_capture_error(message, sync_points)
        try:
            torch.cuda.synchronize()
        except Exception:
            pass
        return GraphCaptureReport(False, cause=cause, remedy=remedy, error=message, sync_points=sync_points)

    fresh = fresh_args if fresh_args is not None else args
    for buffer, value in zip(static, fresh):
        if torch.is_tensor(buffer):
            buffer.copy_(value)
    graph.replay()
    torch.cuda.synchronize()
    expected = fn(*[a.clone() if torch.is_tensor(a) else a for a in fresh])
    torch.cuda.synchronize()
    got_tensors, want_tensors = _as_tensors(static_out), _as_tensors(expected)
    diffs = [float((g.double() - w.double()).abs().max()) if g.numel() else 0.0
             for g, w in zip(got_tensors, want_tensors)]
    same = len(got_tensors) == len(want_tensors) and all(
        g.shape == w.shape and torch.equal(g.isnan(), w.isnan()) for g, w in zip(got_tensors, want_tensors))
    max_diff = max(diffs) if diffs else 0.0
    scale = max((float(w.double().abs().max()) for w in want_tensors if w.numel()), default=1.0)
    # Replays run the same kernels on the same data: only atomics-order rounding may differ.
    matches = same and max_diff <= 1e-6 * max(scale, 1e-30)
    eager_us = _median_us(lambda: fn(*static), calls_for_timing)
    graph_us = _median_us(graph.replay, calls_for_timing)
    return GraphCaptureReport(True, matches_eager=bool(matches), max_abs_diff=max_diff, eager_us_per_call=eager_us,
                              graph_us_per_call=graph_us, sync_points=sync_points)
