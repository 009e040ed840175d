"""The one out-of-memory recovery trial (`opgate verify --stages recovery` runs it per implementation).

Per trial, in the caller's process: GPU memory is filled with PyTorch allocations until the allocator
refuses even 2 MiB, the implementation is called with the GPU full (it should raise
`torch.cuda.OutOfMemoryError`, or succeed when it needs no memory), the filler is freed, and the same
process must compute the same answer again. torch is passed in by the caller.

The trials of one check keep most of the filler (`Filler.kept`) from the first fill to the last retry and free only
a room sized from the implementation's own first call. Refilling a whole H200 after each trial took 0.35-0.42 s a
fill in a library run, where the run's first fill took 0.07 s (fifty-third session): memory a process gives back is
not handed out again at once. Where the retry still runs out of memory beside the kept part,
that is freed too and the call retried once more, as a trial that frees everything would (`OomTrial.freed_all`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

MiB = 1 << 20
FILL_DEADLINE_S = 60.0


@dataclass(frozen=True)
class OomTrial:
    index: int
    oom_hit: bool  # the filler reached the point where not even 2 MiB more could be allocated
    filled_gib: float
    call_while_full: str  # "oom" (raised OutOfMemoryError), "ok" (needed no new memory), or the other error
    recovered: bool  # after freeing, the same process computed the same answer again
    recover_s: float
    mismatch: str = ""  # why the answer after recovery differs, or the error the retry raised
    fill_s: float = 0.0  # seconds to fill the GPU (where a library run's serial end goes: its recovery checks)
    full_call_s: float = 0.0  # seconds of the call with the GPU full
    freed_all: bool = False  # the retry ran out of memory beside the kept filler, which was freed for one more retry


@dataclass
class Filler:
    """What fills the GPU across one check's trials: `kept` until the trials end, `room_bytes` freed at each trial
    for the retry (room_for: twice the first call's peak and a slack); with room_bytes 0 nothing is kept."""
    room_bytes: int
    kept: list[Any] = field(default_factory=list)

    def release(self, torch: Any) -> None:
        self.kept.clear()
        torch.cuda.empty_cache()


# The retry's room beyond twice the first call's peak: workspaces a library allocates once (cuBLAS's) and rounding.
ROOM_SLACK = 256 * MiB


def room_for(peak_bytes: int) -> int:
    """The bytes a trial frees for the retry, from the implementation's first call's peak allocation."""
    return (2 * max(0, peak_bytes) + ROOM_SLACK + 2 * MiB - 1) // (2 * MiB) * (2 * MiB)


def first_call(torch: Any, fn: Callable[..., Any], args: Sequence[Any]) -> tuple[Any, Filler]:
    """The implementation's answer before the trials (its first call, which compiles too, before memory gets tight)
    and the filler for its trials, whose room is sized from that call's peak allocation."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    allocated = torch.cuda.memory_allocated()
    before = fn(*args)
    torch.cuda.synchronize()
    return before, Filler(room_for(torch.cuda.max_memory_allocated() - allocated))


# What the fill leaves to its halving after one allocation of what the driver says is free.
FILL_MARGIN = 64 * MiB


def fill_until_oom(torch: Any, deadline_s: float = FILL_DEADLINE_S) -> tuple[list[Any], bool]:
    """Allocate what cudaMemGetInfo says is free less FILL_MARGIN in one tensor, then chunks halving from the margin
    down to 2 MiB, until even 2 MiB fails. Each refusal is an out-of-memory error whose message PyTorch builds from
    NVML's process list (about 50 processes in a library run). Halving from 1/64 of the card took about ten errors a
    fill, this six: 0.131 s against 0.187 s a fill on an H100 with 48 idle CUDA contexts beside, to the same 54.0 GiB
    (benchmarks/oom_fill.py, forty-ninth session); a library run's recovery checks fill the card 174 times."""
    free, _total = torch.cuda.mem_get_info()
    held: list[Any] = []
    if free > 2 * FILL_MARGIN:
        try:
            held.append(torch.empty(free - FILL_MARGIN, dtype=torch.uint8, device="cuda"))
        except torch.cuda.OutOfMemoryError:  # another process took some meanwhile: the halving finds the rest
            pass
    hit = fill_halving(torch, FILL_MARGIN, held, deadline_s)
    return held, hit


def fill_beside(torch: Any, filler: Filler, deadline_s: float = FILL_DEADLINE_S) -> tuple[list[Any], bool]:
    """Fill the GPU to where even 2 MiB more fails. The first fill of a check puts all but the room and the margin
    into `filler.kept` in one tensor; each fill then allocates the rest (fill_until_oom), which the trial frees."""
    if filler.room_bytes > 0 and not filler.kept:
        free, _total = torch.cuda.mem_get_info()
        bulk = (free - filler.room_bytes - FILL_MARGIN) // (2 * MiB) * (2 * MiB)
        if bulk >= 2 * FILL_MARGIN:
            try:
                filler.kept.append(torch.empty(bulk, dtype=torch.uint8, device="cuda"))
            except torch.cuda.OutOfMemoryError:  # another process took some meanwhile: the rest fills as before
                pass
    return fill_until_oom(torch, deadline_s)


def fill_halving(torch: Any, chunk: int, held: list[Any], deadline_s: float = FILL_DEADLINE_S) -> bool:
    """Allocate `chunk`-byte tensors into `held`, halving the chunk at each refusal, until even 2 MiB is refused
    (True) or `deadline_s` passes (False)."""
    hit = False
    deadline = time.perf_counter() + deadline_s
    while chunk >= 2 * MiB and time.perf_counter() < deadline:
        try:
            held.append(torch.empty(chunk, dtype=torch.uint8, device="cuda"))
        except torch.cuda.OutOfMemoryError:
            hit = True
            chunk //= 2
    return hit


# How far beyond the implementation's own run-to-run spread (run_to_run_spread) an answer after recovery may lie:
# the largest difference between two calls is one sample of a maximum over the whole output, and another pair of
# calls can differ a little more; a state the out-of-memory error broke differs by far more.
SPREAD_MARGIN = 4.0


def _outputs(answer: Any) -> list[Any]:
    return list(answer) if isinstance(answer, (tuple, list)) else [answer]


def run_to_run_spread(torch: Any, fn: Callable[..., Any], args: Sequence[Any], before: Any) -> list[float]:
    """Per output, the largest |difference| between `before` and a second call with memory free: 0 for a
    deterministic implementation; above 0 where the summation order changes per call (cut-cross-entropy's backward
    adds each vocabulary block's partial gradient under a lock, in float16: its recovery trials differed from the
    first answer although every call with the GPU full succeeded). Outputs that are not float tensors get 0."""
    again = fn(*args)
    torch.cuda.synchronize()
    spread = []
    for b, a in zip(_outputs(before), _outputs(again)):
        if (hasattr(b, "is_floating_point") and b.is_floating_point() and hasattr(a, "shape")
                and a.shape == b.shape and a.dtype == b.dtype and b.numel()):
            both = torch.isfinite(a) & torch.isfinite(b)
            diff = (a.double() - b.double()).abs()[both]
            spread.append(float(diff.max()) if diff.numel() else 0.0)
        else:
            spread.append(0.0)
    return spread


def same_answer(torch: Any, before: Any, after: Any, spread: Sequence[float] = ()) -> str:
    """'' when `after` equals `before` (NaN where NaN; a few ulps for non-deterministic reductions; within
    SPREAD_MARGIN x `spread[k]` of output k, the implementation's own run-to-run spread), else why not. Handles a
    tensor or a tuple/list of tensors."""
    if isinstance(before, (tuple, list)):
        if not isinstance(after, (tuple, list)) or len(before) != len(after):
            return f"{type(after).__name__} after recovery, {len(before)} outputs before"
        pairs = list(zip(before, after))
    else:
        pairs = [(before, after)]
    for k, (b, a) in enumerate(pairs):
        if not hasattr(b, "shape"):
            if b != a:
                return f"output {k}: {a!r} after recovery, {b!r} before"
            continue
        if not hasattr(a, "shape"):
            return f"output {k}: {type(a).__name__} after recovery, a tensor before"
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"output {k}: {tuple(a.shape)} {a.dtype} after recovery, {tuple(b.shape)} {b.dtype} before"
        atol = SPREAD_MARGIN * spread[k] if k < len(spread) else 0.0
        if not _same_values(torch, a, b, atol):
            beyond = f" by more than {SPREAD_MARGIN:g}x its run-to-run spread ({spread[k]:.3g})" if atol else ""
            return f"output {k} differs from the answer before the out-of-memory error{beyond}"
    return ""


def run_trial(torch: Any, fn: Callable[..., Any], args: Sequence[Any], before: Any, index: int,
              filler: Filler | None = None, spread: Sequence[float] = ()) -> OomTrial:
    """One trial: fill, call with the GPU full, free the fill's room (all of it without a `filler`), call again and
    compare with `before` (within the run-to-run `spread` per output). The caller releases the filler after its last
    trial."""
    filler = filler if filler is not None else Filler(room_bytes=0)
    began = time.perf_counter()
    held, hit = fill_beside(torch, filler)
    filled = sum(t.numel() for t in [*filler.kept, *held]) / 2**30
    full_at = time.perf_counter()
    try:
        fn(*args)
        torch.cuda.synchronize()
        while_full = "ok"
    except torch.cuda.OutOfMemoryError:
        while_full = "oom"
    except Exception as exc:  # noqa: BLE001 - any other failure while full is a finding, reported as such
        while_full = f"{type(exc).__name__}: {str(exc)[:200]}"
    freed_at = time.perf_counter()
    del held
    torch.cuda.empty_cache()
    freed_all = False

    def retry() -> Any:
        after = fn(*args)
        torch.cuda.synchronize()
        return after

    try:  # out of memory in the room: everything freed and the call retried, as a whole release would
        after, freed_all = freeing_the_kept_part_if_short(torch, filler, retry)
    except Exception as exc:  # noqa: BLE001 - the retry failing is exactly what this check looks for
        mismatch = f"the retry raised {type(exc).__name__}: {str(exc)[:200]}"
    else:
        mismatch = compare_beside(torch, before, after, filler,
                                  lambda t, b, a: same_answer(t, b, a, spread))
    return OomTrial(index, hit, round(filled, 2), while_full, not mismatch, time.perf_counter() - freed_at, mismatch,
                    fill_s=round(full_at - began, 3), full_call_s=round(freed_at - full_at, 3), freed_all=freed_all)


# Elements compared at once: the comparison widens floats to float64, so a whole output at once took four times its
# float32 size beside the kept filler (benchmarks/oom_trials.py on an H100, fifty-fourth session: a 256 MiB output's
# comparison ran out of memory where the retry itself had fitted). 2^24 elements: 128 MiB a float64 slice.
COMPARE_CHUNK = 1 << 24


def _same_values(torch: Any, a: Any, b: Any, atol: float = 0.0) -> bool:
    """`a` equals `b` (same shape and dtype): floats within a few ulps and `atol`, NaN where NaN; compared in slices,
    so the extra memory stays bounded whatever the output's size."""
    flat_a, flat_b = a.reshape(-1), b.reshape(-1)
    floating = b.is_floating_point()
    rtol = 1e-5 if b.dtype in (torch.float32, torch.float64) else 1e-2
    for start in range(0, flat_b.numel(), COMPARE_CHUNK):
        x, y = flat_a[start:start + COMPARE_CHUNK], flat_b[start:start + COMPARE_CHUNK]
        same = (torch.allclose(x.double(), y.double(), rtol=rtol, atol=atol, equal_nan=True) if floating
                else torch.equal(x, y))
        if not same:
            return False
    return True


def freeing_the_kept_part_if_short(torch: Any, filler: Filler, action: Callable[[], Any]) -> tuple[Any, bool]:
    """(`action()`, False) with the kept filler still allocated; where that runs out of memory, (`action()` again
    with the filler freed, True). With nothing kept the error is the caller's."""
    try:
        return action(), False
    except torch.cuda.OutOfMemoryError:
        if not filler.kept:
            raise
        filler.release(torch)
        return action(), True


def compare_beside(torch: Any, before: Any, after: Any, filler: Filler,
                   compare: Callable[[Any, Any, Any], str] = same_answer) -> str:
    """`compare(torch, before, after)` beside the kept filler, or with it freed where that runs out of memory: the
    comparison is opgate's work, not the implementation's."""
    return freeing_the_kept_part_if_short(torch, filler, lambda: compare(torch, before, after))[0]
