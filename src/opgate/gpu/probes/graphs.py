"""The one home of CUDA graph capture: capture work, replay it, check the replay did what eager work does.

`capture_and_replay` is that sequence, with the library's calls passed in; it serves all three users:
`graph_smoke_test` (cuda-bindings: a memset and a copy; doctor.runtime_features), the launch probe
(CuPy: N tiny kernels whose counter proves every launch ran; opgate.gpu.probes.launch) and
`check_graph_capture` (torch: a user's implementation, replay compared with eager; verify's runtime stage).

Can an implementation be captured in a CUDA graph? If so, does the replay match eager and how much
launch overhead does it save; if not, why, in the user's terms, and what to do about it.

The cause is found two ways: a dry run under PyTorch's sync-debug mode names every synchronizing call
(`.item()`, `.cpu()`, `nonzero`, `torch.cuda.synchronize`) with the user's file and line; the capture
error itself (cudaErrorStreamCaptureUnsupported and friends) is classified from its message.

A replay that differs from eager is measured further (`GraphCaptureReport`'s mismatch facts): repeated eager calls
and repeated replays on the same inputs (do they differ among themselves?), and a replay into poisoned outputs (does
the graph write them at all?). opgate.gpu.judge.graphs names the cause from those facts.
"""

from __future__ import annotations

import contextlib
import linecache
import time
import traceback
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Sequence, TypeVar

from opgate.gpu.probes.timing import time_torch_batches

Graph = TypeVar("Graph")


@dataclass(frozen=True)
class GraphReplay(Generic[Graph]):
    """What capturing work into a CUDA graph and replaying it showed."""

    graph: Graph | None  # the captured graph (None when capture failed), for the caller to time or free
    capture_ms: float  # host time of the capture call
    replays: int
    problem: str = ""  # '' when the replays did what the eager work does; else what went wrong
    error: str = ""  # the capture error's first line, when capture failed

    @property
    def captured(self) -> bool:
        return self.graph is not None


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def capture_and_replay(capture: Callable[[], Graph], replay: Callable[[Graph], None], check: Callable[[], str],
                       replays: int = 1, not_findings: tuple[type[BaseException], ...] = ()) -> GraphReplay[Graph]:
    """`capture()` the work into a graph (an exception there is the finding: `error`), `replay(graph)`
    `replays` times, then `check()` what the replays left behind ('' when right, else the problem).
    `not_findings`: exceptions that say nothing about capturability (running out of memory), raised as they are."""
    started = time.perf_counter()
    try:
        graph = capture()
    except not_findings:
        raise
    except Exception as exc:  # the capture error is the finding
        return GraphReplay(None, (time.perf_counter() - started) * 1e3, 0, error=_first_line(exc))
    capture_ms = (time.perf_counter() - started) * 1e3
    for _ in range(replays):
        replay(graph)
    return GraphReplay(graph, capture_ms, replays, problem=check())


def graph_smoke_test(rt: Any, n_bytes: int = 1 << 20) -> str:
    """cuda-bindings: capture a memset and a copy into a graph, instantiate, replay twice, check the bytes.
    The detail line on success; CudaCallError naming the failing call or the wrong bytes otherwise."""
    import ctypes

    from opgate.gpu.probes.device import CudaCallError
    from opgate.gpu.probes.device import cuda_result as ok

    stream = ok(rt.cudaStreamCreateWithFlags(rt.cudaStreamNonBlocking))
    src = ok(rt.cudaMalloc(n_bytes))
    dst = ok(rt.cudaMalloc(n_bytes))
    made: list[Any] = []  # [graph, exec_graph] as far as they were made

    def capture() -> Any:
        ok(rt.cudaStreamBeginCapture(stream, rt.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal))
        ok(rt.cudaMemsetAsync(src, 0x5A, n_bytes, stream))
        ok(rt.cudaMemcpyAsync(dst, src, n_bytes, rt.cudaMemcpyKind.cudaMemcpyDeviceToDevice, stream))
        made.append(ok(rt.cudaStreamEndCapture(stream)))
        made.append(ok(rt.cudaGraphInstantiate(made[0], 0)))
        return made[1]

    def check() -> str:
        ok(rt.cudaStreamSynchronize(stream))
        host = (ctypes.c_ubyte * n_bytes)()
        ok(rt.cudaMemcpy(ctypes.addressof(host), dst, n_bytes, rt.cudaMemcpyKind.cudaMemcpyDeviceToHost))
        wrong = sum(1 for b in bytes(host) if b != 0x5A)
        return f"graph replay wrote {wrong} wrong bytes of {n_bytes}" if wrong else ""

    try:
        replayed = capture_and_replay(capture, lambda graph: ok(rt.cudaGraphLaunch(graph, stream)), check, replays=2)
        if not replayed.captured:
            raise CudaCallError(replayed.error)
        if replayed.problem:
            raise CudaCallError(replayed.problem)
        return f"captured 2 nodes, replayed twice, {n_bytes} bytes verified"
    finally:
        if len(made) > 1:
            rt.cudaGraphExecDestroy(made[1])
        if made:
            rt.cudaGraphDestroy(made[0])
        rt.cudaFree(src)
        rt.cudaFree(dst)
        rt.cudaStreamDestroy(stream)

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
    # Measured after a replay that differs from eager (None: not measured); judged by opgate.gpu.judge.graphs.
    tolerance: float | None = None  # the largest |replay - eager| that counted as a match
    eager_calls: int = 0
    eager_spread: float | None = None  # max |difference| among eager_calls calls on the same inputs
    replays: int = 0
    replay_spread: float | None = None  # max |difference| among replays on the same inputs
    unwritten: int | None = None  # output elements a replay into poisoned outputs left poisoned (eager writes them)
    elements: int = 0
    eager_reuses_outputs: bool = False  # two eager calls returned the same output storage (a result cache)
    # After a capture that failed: the bytes its memory pool still keeps reserved in this process, which only the
    # process's exit gives back (release_abandoned_pool; 0: none)
    kept_bytes: int = 0
    # seconds of the check's parts: warm_up (off the default stream, finding sync points), capture, replay_and_eager
    # (the replay and the eager call compared with it), mismatch_facts, replay_timing; where a check's time goes
    seconds: dict[str, float] = field(default_factory=dict)
    # why eager calls were not timed against replays (replay_timing_calls): HOST_BOUND or TOO_SLOW; '' where they were
    replay_not_timed: str = ""

    @property
    def saved_us_per_call(self) -> float | None:
        if self.eager_us_per_call is None or self.graph_us_per_call is None:
            return None
        return self.eager_us_per_call - self.graph_us_per_call


# After a mismatch: eager calls and replays repeated on the same inputs, to see whether results differ among
# themselves. A race shows within a few calls; a graph replay is cheap, an eager call at timing sizes is too.
MISMATCH_EAGER_CALLS = 4
MISMATCH_REPLAYS = 3


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


def _set_sync_debug_mode(torch: Any, mode: Any) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the prototype notice, not a finding
        torch.cuda.set_sync_debug_mode(mode)


def find_sync_points(fn: Callable[..., Any], args: tuple) -> list[str]:
    """Run fn once under torch's sync-debug mode, with torch.cuda.synchronize wrapped (it raises no sync-debug
    warning itself); return 'message at file:line' for each synchronizing call. One call for both: at a library's
    timing sizes a call can take seconds (fla's KL-divergence gradient on the H100, forty-first session)."""
    import torch

    points: list[str] = []
    explicit: list[str] = []
    original = torch.cuda.synchronize

    def spy(*a: Any, **kw: Any) -> Any:
        frame = traceback.extract_stack(limit=2)[0]
        explicit.append(f"torch.cuda.synchronize() at {frame.filename}:{frame.lineno}: {frame.line or ''}")
        return original(*a, **kw)

    previous = torch.cuda.get_sync_debug_mode()
    # Setting the mode warns that it "is a prototype feature and does not yet detect all synchronizing operations":
    # recorded, that warning was a sync point in every runtime result's graph facts (H100 library runs)
    _set_sync_debug_mode(torch, "warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.synchronize = spy
            try:
                fn(*args)
            finally:
                torch.cuda.synchronize = original
    finally:
        _set_sync_debug_mode(torch, previous)
    original()
    for warning in caught:
        message = str(warning.message).splitlines()[0]
        if "synchroniz" in message.lower():
            source = linecache.getline(warning.filename, warning.lineno).strip()
            points.append(f"{message.split(' (Triggered')[0]} at {warning.filename}:{warning.lineno}: {source}")
    return points + explicit


def _as_tensors(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _as_tensors(item)]
    return [value] if hasattr(value, "shape") else []


def max_spread(runs: Sequence[Sequence[Any]]) -> float:
    """The largest |difference| between the first run's output tensors and any later run's: 0 when every run is
    bit-identical in value, inf where shapes or NaN positions differ."""
    import torch

    spread = 0.0
    for run in runs[1:]:
        for a, b in zip(runs[0], run):
            if a.shape != b.shape or not torch.equal(a.isnan(), b.isnan()):
                return float("inf")
            if not a.numel():
                continue
            same = (a == b) | a.isnan()  # NaN positions agree (checked above); equal infinities are no difference
            gap = torch.where(same, torch.zeros((), dtype=torch.float64, device=a.device),
                              (a.double() - b.double()).abs())
            spread = max(spread, float(gap.max()))
    return spread


def _poison_value(tensor: Any) -> Any:
    """NaN for floating outputs, the dtype's largest value for integers; None where opgate cannot poison (bool)."""
    import torch

    if tensor.is_floating_point():
        return float("nan")
    if tensor.dtype == torch.bool or tensor.is_complex():
        return None
    return torch.iinfo(tensor.dtype).max


def poison_(tensors: Sequence[Any]) -> None:
    """Fill each output tensor with its poison in place (what a replay must overwrite)."""
    for tensor in tensors:
        value = _poison_value(tensor)
        if value is not None:
            tensor.fill_(value)


def poisoned_left(after: Sequence[Any], expected: Sequence[Any]) -> tuple[int, int]:
    """(elements still holding the poison where eager writes something else, elements in all)."""
    unwritten = total = 0
    for got, want in zip(after, expected):
        total += got.numel()
        value = _poison_value(got)
        if value is None or got.shape != want.shape:
            continue
        if got.is_floating_point():
            left = got.isnan() & ~want.isnan()
        else:
            left = (got == value) & (want != value)
        unwritten += int(left.sum())
    return unwritten, total


def mismatch_facts(fn: Callable[..., Any], static: tuple, graph: Any, captured: Sequence[Any],
                   expected: Sequence[Any]) -> dict[str, Any]:
    """After a replay differed from eager: eager calls and replays repeated on the inputs in `static` (they differ
    among themselves: nondeterminism), then one replay into poisoned outputs (left poisoned: the graph does not hold
    that work). `captured`: the graph's output tensors; `expected`: eager's outputs on the same inputs."""
    import torch

    eager_runs, returned = [], []
    for _ in range(MISMATCH_EAGER_CALLS):
        outputs = _as_tensors(fn(*[a.clone() if torch.is_tensor(a) else a for a in static]))
        torch.cuda.synchronize()
        returned.append(outputs)  # held, so a fresh result cannot land in a freed one's memory
        eager_runs.append([o.clone() for o in outputs])
    pointers = [o.data_ptr() for outputs in returned for o in outputs if o.numel()]
    replay_runs = []
    for _ in range(MISMATCH_REPLAYS):
        graph.replay()
        torch.cuda.synchronize()
        replay_runs.append([o.clone() for o in captured])
    poison_(captured)
    torch.cuda.synchronize()
    graph.replay()
    torch.cuda.synchronize()
    unwritten, elements = poisoned_left(captured, expected)
    return {"eager_calls": MISMATCH_EAGER_CALLS, "eager_spread": max_spread(eager_runs),
            "replays": MISMATCH_REPLAYS, "replay_spread": max_spread(replay_runs), "unwritten": unwritten,
            "elements": elements,
            "eager_reuses_outputs": len(set(pointers)) < len(pointers) or returns_captured(fn, static, captured)}


def returns_captured(fn: Callable[..., Any], static: tuple, captured: Sequence[Any]) -> bool:
    """Whether an eager call on the captured inputs returns an output the graph holds: a result cache (keyed by
    the inputs' addresses, say) hands back its stored tensor, while a fresh result cannot land in memory the graph's
    outputs still hold. Whether eager calls on copies reuse storage depends on where the allocator puts the copies
    (it failed to show a pointer-keyed cache on the H100, forty-second session); this does not. Called last: it
    may write into the static inputs."""
    import torch

    held = {t.data_ptr() for t in captured if t.numel()}
    again = _as_tensors(fn(*static))
    torch.cuda.synchronize()
    return any(t.data_ptr() in held for t in again if t.numel())


MATCH_RTOL = 1e-6  # a replay matches eager within this much of the largest |output|


# The fewest batches of one call each that time eager calls against graph replays.
FEWEST_REPLAY_BATCHES = 3

# A graph saves a call's launches: the host's time to submit them, and the GPU's gaps between kernels, each gap
# shorter than the host's launch of the next kernel. So where the host submits a call in under this share of the
# call's time on the GPU, a graph saves less than that share, and the eager calls and replays are not timed: at a
# library's timing sizes they cost up to TIMED_CALLS_BUDGET_S a check while the GPU is held alone.
HOST_BOUND_SHARE = 0.05


# GraphCaptureReport.replay_not_timed: the host submits the call in under HOST_BOUND_SHARE of its GPU time, or the
# call is too slow for even FEWEST_REPLAY_BATCHES of one call within the budget
HOST_BOUND = "host_bound"
TOO_SLOW = "too_slow"


def launch_bound_share(seconds_per_call: float | None, host_submit_s: float | None) -> float | None:
    """The host's share of a call's time (submitting it against running it on the GPU), None where unknown."""
    if not seconds_per_call or host_submit_s is None or seconds_per_call <= 0:
        return None
    return host_submit_s / seconds_per_call


def gpu_bound(seconds_per_call: float | None, host_submit_s: float | None) -> bool:
    """Whether the host submits a call in under HOST_BOUND_SHARE of its GPU time (a graph cannot save more)."""
    share = launch_bound_share(seconds_per_call, host_submit_s)
    return share is not None and share < HOST_BOUND_SHARE


def replay_timing_calls(seconds_per_call: float | None, calls: int = 20, batches: int = 5,
                        host_submit_s: float | None = None) -> tuple[int, int] | None:
    """(calls a batch, batches) for timing eager calls against graph replays: `calls` x `batches` each, unless a
    call is so slow (`seconds_per_call`, the runtime stage's median) that both would outlast the timing budget;
    then as many calls a batch as fit, and FEWEST_REPLAY_BATCHES of one call. None: not timed, because the host
    submits a call in under HOST_BOUND_SHARE of its GPU time (`host_submit_s`: a graph cannot save more), or not even
    the fewest calls fit (microseconds of launches beside a call of a third of a second or more)."""
    from opgate.gpu.probes.timing import TIMED_CALLS_BUDGET_S

    if gpu_bound(seconds_per_call, host_submit_s):
        return None
    if seconds_per_call is None or seconds_per_call * calls * batches * 2 <= TIMED_CALLS_BUDGET_S:
        return calls, batches
    fitting = int(TIMED_CALLS_BUDGET_S / (seconds_per_call * batches * 2))
    if fitting >= 1:
        return fitting, batches
    if seconds_per_call * FEWEST_REPLAY_BATCHES * 2 <= TIMED_CALLS_BUDGET_S:
        return 1, FEWEST_REPLAY_BATCHES
    return None


def check_graph_capture(fn: Callable[..., Any], args: tuple, fresh_args: tuple | None = None,
                        calls_for_timing: int = 20, seconds_per_call: float | None = None,
                        host_submit_s: float | None = None) -> GraphCaptureReport:
    """Capture `fn(*args)`, replay it on `fresh_args` copied into the same static buffers, compare with eager.
    `seconds_per_call` (what a timing measured): fn is warm, so it is warmed up once, not three times, and a slow
    call is timed against its replay fewer times, or not at all (replay_timing_calls: eager_us_per_call is then
    None); so is a call whose host submits it in `host_submit_s`, a small share of its GPU time.

    Run it last in its own process: a failed capture leaves PyTorch's CUDA generator in capture state
    ("Offset increment outside graph capture"), so later random draws in that process fail.
    Running out of memory anywhere in it raises torch.cuda.OutOfMemoryError: the static copies and the graph's own
    outputs did not fit beside the caller's tensors, which says nothing about whether `fn` can be captured.
    """
    import torch

    # A caller that timed fn (seconds_per_call) ran it compiled and autotuned at these shapes: one warm-up off the
    # default stream is left, and it is the sync-debug call. Otherwise the first calls compile and autotune, whose
    # own synchronisations are not the implementation's: three warm-ups, then that call.
    timed = seconds_per_call is not None
    began = time.perf_counter()
    static = tuple(a.clone() if torch.is_tensor(a) else a for a in args)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    sync_points: list[str] = []
    with torch.cuda.stream(side):
        if timed:
            sync_points = find_sync_points(fn, static)
        else:
            for _ in range(3):
                fn(*static)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    if not timed:
        sync_points = find_sync_points(fn, static)
    warm_up_s = time.perf_counter() - began

    graph = torch.cuda.CUDAGraph()
    pool = torch.cuda.graph_pool_handle()  # named, so that a failed capture's pool can be released by its id
    outputs: list[Any] = []
    ended: list[bool] = []  # True once the capture's capture_end returned (_EndNoted)
    report: GraphCaptureReport | None = None
    try:
        report = _capture_and_compare(torch, fn, static, fresh_args if fresh_args is not None else args, graph, pool,
                                      outputs, sync_points, (seconds_per_call, host_submit_s), calls_for_timing,
                                      ended)
        report.seconds = {"warm_up": round(warm_up_s, 3), **report.seconds}
        return report  # the block below still fills in its kept_bytes
    finally:
        # Nothing of the graph outlives the check: reset() destroys it and releases its pool, whatever still refers
        # to the graph object; a pool that a failed capture keeps all the same is released by hand.
        outputs.clear()
        with contextlib.suppress(Exception):
            graph.reset()
        if report is None or not report.captured:
            kept = release_abandoned_pool(torch, pool, capture_ended=bool(ended))
            if report is not None:
                report.kept_bytes = kept


# Reserved bytes no tensor uses, after the allocator's cache went back, above which a failed capture's pool is taken
# to be kept: the default pool gives back everything unused, so anything left is in a pool still counted in use.
ABANDONED_POOL_SLACK_BYTES = 64 * 2**20


def unused_reserved_bytes(torch: Any) -> int:
    """What this process's caching allocator reserves beyond what its tensors use, once its cache went back."""
    torch.cuda.empty_cache()
    return max(0, int(torch.cuda.memory_reserved()) - int(torch.cuda.memory_allocated()))


def release_abandoned_pool(torch: Any, pool: Any, capture_ended: bool) -> int:
    """After a capture that failed, and graph.reset(): the bytes its private pool still keeps that only the process's
    exit gives back (0: none; more: the caller retires its process).

    reset() releases a graph's pool only where its capture ended (capture_end returned). In the PyTorch of the H100
    hosts (2.11) a capture that did not end keeps its pool's memory until the process exits (pytorch/pytorch#190348
    fixes it): in a library run's warm worker FlagGems' cross-entropy gradient, not capturable (a host read inside
    capture), left 16 GiB reserved with no tensor allocated after its float32 check and 50-56 GiB after the next ones
    (forty-seventh and forty-eighth sessions, OPGATE_WORKER_MEMORY_LOG). Such a pool is released by its id, as
    PyTorch's own tests do (torch._C._cuda_releasePool).

    Never where the capture ended: reset() released that pool already, and a second release takes its use count
    below zero (an internal assert that fires after the decrement), which fails every later empty_cache of the
    process. A capture that ran out of memory ends, and its pool's split blocks stay reserved while the failure's
    traceback holds their tensors: releasing it again broke one warm worker of the forty-ninth session's library run
    (44 runtime checks after it raised from empty_cache). What such a pool still holds goes back once those tensors
    die. A release that raises is such a case too (a PyTorch whose reset() released the pool): the process retires."""
    if capture_ended:
        return 0
    try:
        unused = unused_reserved_bytes(torch)
        if unused <= ABANDONED_POOL_SLACK_BYTES:
            return 0  # a PyTorch whose reset() released it, or a capture that failed before it allocated
        release = getattr(torch._C, "_cuda_releasePool", None)
        if release is None:
            return unused
        try:
            release(torch.cuda.current_device(), pool)
        except Exception:  # not the graph's to release any more: the allocator's count of it may now be broken
            return unused
        kept = unused_reserved_bytes(torch)
    except Exception:  # a context or allocator the failure broke: the worker's health checks retire the process
        return 0
    return kept if kept > ABANDONED_POOL_SLACK_BYTES else 0


class _EndNoted:
    """torch.cuda.graph's context, noting in `ended` that its exit (capture_end) returned: a capture whose body
    raised has still ended where the stream capture stayed valid (an out-of-memory error), not where the failure
    invalidated it (a host read)."""

    def __init__(self, context: Any, ended: list[bool]) -> None:
        self.context, self.ended = context, ended

    def __enter__(self) -> Any:
        return self.context.__enter__()

    def __exit__(self, *exc: Any) -> Any:
        suppressed = self.context.__exit__(*exc)
        self.ended.append(True)
        return suppressed


def _capture_and_compare(torch: Any, fn: Callable[..., Any], static: tuple, fresh: tuple, graph: Any, pool: Any,
                         outputs: list[Any], sync_points: list[str],
                         call_times: tuple[float | None, float | None], calls_for_timing: int,
                         ended: list[bool]) -> GraphCaptureReport:
    """check_graph_capture's capture into `graph` (its memory from `pool`), its replay on `fresh` copied into
    `static`, the comparison with eager and the launch timing (`call_times`: the timing's seconds a call and the
    host's seconds to submit one, replay_timing_calls); `outputs` gets the captured call's outputs, `ended`
    True once the capture ended (_EndNoted)."""
    diff: dict[str, Any] = {}

    def capture() -> Any:
        with _EndNoted(torch.cuda.graph(graph, pool=pool), ended):
            outputs.append(fn(*static))
        return graph

    def replay(captured: Any) -> None:
        for buffer, value in zip(static, fresh):
            if torch.is_tensor(buffer):
                buffer.copy_(value)
        captured.replay()
        torch.cuda.synchronize()

    def check() -> str:
        expected = fn(*[a.clone() if torch.is_tensor(a) else a for a in fresh])
        torch.cuda.synchronize()
        got_tensors, want_tensors = _as_tensors(outputs[0]), _as_tensors(expected)
        diffs = [float((g.double() - w.double()).abs().max()) if g.numel() else 0.0
                 for g, w in zip(got_tensors, want_tensors)]
        same = len(got_tensors) == len(want_tensors) and all(
            g.shape == w.shape and torch.equal(g.isnan(), w.isnan()) for g, w in zip(got_tensors, want_tensors))
        diff["max"] = max(diffs) if diffs else 0.0
        diff["expected"] = want_tensors
        scale = max((float(w.double().abs().max()) for w in want_tensors if w.numel()), default=1.0)
        # Replays run the same kernels on the same data: only atomics-order rounding may differ.
        diff["tolerance"] = MATCH_RTOL * max(scale, 1e-30)
        matches = same and diff["max"] <= diff["tolerance"]
        return "" if matches else f"the replay differs from eager by up to {diff['max']:.3g}"

    # A capture allocates from the graph's private memory pool, and while a capture is underway PyTorch's allocator
    # does not hand it the blocks it keeps cached for the regular pool (the caller's freed tensors, the warm-up's
    # outputs): they go back to the driver first. On the H100 a float16 capture ran out of memory with 9 of 79 GiB
    # free by the driver's count and more cached (fla's cross-entropy gradient, forty-second session).
    torch.cuda.empty_cache()
    began = time.perf_counter()
    replayed = capture_and_replay(capture, replay, check, not_findings=(torch.cuda.OutOfMemoryError,))
    seconds = {"capture": round(replayed.capture_ms / 1e3, 3),
               "replay_and_eager": round(time.perf_counter() - began - replayed.capture_ms / 1e3, 3)}
    if not replayed.captured:
        cause, remedy = classify_capture_error(replayed.error, sync_points)
        try:
            torch.cuda.synchronize()
        except Exception:
            pass
        return GraphCaptureReport(False, cause=cause, remedy=remedy, error=replayed.error, sync_points=sync_points,
                                  seconds=seconds)
    max_diff = diff["max"]
    matches = not replayed.problem
    began = time.perf_counter()
    facts = ({} if matches else
             mismatch_facts(fn, static, graph, _as_tensors(outputs[0]), diff["expected"]))
    if facts:
        seconds["mismatch_facts"] = round(time.perf_counter() - began, 3)
    seconds_per_call, host_submit_s = call_times
    timing = replay_timing_calls(seconds_per_call, calls_for_timing, host_submit_s=host_submit_s)
    eager_us = graph_us = None
    not_timed = "" if timing is not None else HOST_BOUND if gpu_bound(seconds_per_call, host_submit_s) else TOO_SLOW
    if timing is not None:
        calls, batches = timing
        began = time.perf_counter()
        eager_us = time_torch_batches(torch, lambda: fn(*static), calls, batches).median
        graph_us = time_torch_batches(torch, graph.replay, calls, batches).median
        seconds["replay_timing"] = round(time.perf_counter() - began, 3)
    return GraphCaptureReport(True, matches_eager=bool(matches), max_abs_diff=max_diff, eager_us_per_call=eager_us,
                              graph_us_per_call=graph_us, sync_points=sync_points, tolerance=diff.get("tolerance"),
                              seconds=seconds, replay_not_timed=not_timed, **facts)
