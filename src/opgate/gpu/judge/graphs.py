"""Why a CUDA graph replay differs from eager: the cause the probe measured, not a guess.

`opgate.gpu.probes.graphs.check_graph_capture` records, after a replay that differs from eager, three facts: how
far repeated eager calls on the same inputs differ among themselves (and repeated replays), and how many output
elements a replay into poisoned outputs left poisoned. They separate three causes that read alike from the
mismatch alone:

  nondeterministic  eager (or replay) results differ among themselves by more than the match tolerance: a race
                    or unordered atomics; the graph replays the same kernels and is not to blame.
  outside capture   the replay did not write (all or part of) the outputs: the work ran on a stream the capture
                    did not record (the legacy default stream, a library's own stream), eagerly, at capture time.
                    Unless eager calls return the same output storage every time: then the graph holds no work
                    because a cache returned a stored result (frozen state).
  frozen state      the replay writes every output, replays agree with each other, yet differ from eager on new
                    inputs: the implementation depends on something a graph freezes (a host-side value, a pointer,
                    a cache).
"""

from __future__ import annotations

from dataclasses import dataclass

NONDETERMINISTIC = "nondeterministic"
ROUNDING_ORDER = "rounding_order"  # nondeterministic, but only by the rounding of an unordered float sum: not a fault
OUTSIDE_CAPTURE = "outside_capture"
FROZEN_STATE = "frozen_state"

STREAM_REMEDY = ("Launch every kernel on the caller's stream, torch.cuda.current_stream(), which is the capturing "
                 "stream under torch.cuda.graph (CuPy: launch inside `with cupy.cuda.ExternalStream("
                 "torch.cuda.current_stream().cuda_stream):`), so stream capture records the work.")
RACE_REMEDY = ("Look for a race (compute-sanitizer racecheck finds shared-memory ones: opgate verify --stages "
               "sanitizer --sanitizer-tools racecheck) or floating-point atomics whose order changes the sum; write "
               "each output element from one thread, or reduce in a fixed order, where results must be reproducible.")
FROZEN_REMEDY = ("Look for host-side values baked in at capture time (Python scalars from tensors, cached pointers, "
                 "allocator-dependent buffers, a result cache keyed by shape).")


@dataclass(frozen=True)
class GraphMismatchFacts:
    """What the probe measured after a replay that differed from eager (None: not measured)."""

    replay_diff: float  # max |replay - eager| on the replay's inputs
    tolerance: float  # the largest difference that still counted as a match
    eager_calls: int = 0  # repeated eager calls on the same inputs
    eager_spread: float | None = None  # max |difference| among those calls
    replays: int = 0  # repeated replays on the same inputs
    replay_spread: float | None = None  # max |difference| among those replays
    unwritten: int | None = None  # output elements a replay into poisoned outputs left poisoned (eager writes them)
    elements: int = 0  # output elements in all
    eager_reuses_outputs: bool = False  # repeated eager calls returned the same output storage: a result cache
    # the largest spread that is the rounding of a sum taken in another order (float atomics), absolute; 0: unknown
    rounding: float = 0.0


@dataclass(frozen=True)
class GraphMismatchCause:
    kind: str  # NONDETERMINISTIC | OUTSIDE_CAPTURE | FROZEN_STATE
    cause: str  # a clause that follows "CUDA graph replay differs from eager (...): "
    remedy: str
    failure_class: str = ""  # "stream" where the work runs on another stream (docs/verify-method.md)


def _spread_text(calls: int, spread: float | None, what: str) -> str:
    return f"{calls} {what} on the same inputs differ by up to {spread:.3g}" if spread is not None else ""


def graph_mismatch_cause(facts: GraphMismatchFacts) -> GraphMismatchCause:
    """The cause of a replay mismatch, in the order that decides it: a result that differs from itself explains
    any mismatch (checked first); then a replay that leaves outputs unwritten; only then frozen state."""
    noisy = [(calls, spread, what) for calls, spread, what in
             ((facts.eager_calls, facts.eager_spread, "eager calls"), (facts.replays, facts.replay_spread, "replays"))
             if spread is not None and spread > facts.tolerance]
    if noisy and facts.rounding > 0 and facts.replay_diff <= facts.rounding and all(
            spread <= facts.rounding for _, spread, _ in noisy):
        measured = " and ".join(_spread_text(*entry) for entry in noisy)
        return GraphMismatchCause(ROUNDING_ORDER, f"nondeterministic only in the last digits (float atomics summing "
                                                  f"in a varying order): {measured}, within {facts.rounding:.3g}, "
                                                  "the rounding of such a sum; a replay is as right as an eager call",
                                  "If results must be bit-reproducible (a regression test, a checkpoint compare), "
                                  "reduce in a fixed order instead of with atomics.")
    if noisy:
        measured = " and ".join(_spread_text(*entry) for entry in noisy)
        return GraphMismatchCause(NONDETERMINISTIC, f"the implementation is nondeterministic (a race or unordered "
                                                    f"atomics): {measured}, so a replay cannot be expected to match "
                                                    "one eager call; the graph is not to blame", RACE_REMEDY)
    if facts.unwritten and facts.eager_reuses_outputs:
        return GraphMismatchCause(FROZEN_STATE, "the implementation depends on state a graph freezes: it returns the "
                                                "same output storage on every call (a result cache), so the graph "
                                                "holds no work and a replay into poisoned outputs wrote "
                                                f"{facts.elements - facts.unwritten} of {facts.elements} elements",
                                  FROZEN_REMEDY)
    if facts.unwritten:
        where = "outside the capturing stream (e.g. the legacy default stream or another library's stream)"
        if facts.unwritten >= facts.elements:
            cause = f"its work runs {where}: a replay into poisoned outputs wrote none of them"
        else:
            cause = (f"part of its work runs {where}: a replay into poisoned outputs left {facts.unwritten} of "
                     f"{facts.elements} output elements unwritten")
        return GraphMismatchCause(OUTSIDE_CAPTURE, cause, STREAM_REMEDY, failure_class="stream")
    measured = []
    if facts.eager_spread is not None:
        measured.append(f"{facts.eager_calls} eager calls agree")
    if facts.unwritten is not None:
        measured.append("a replay writes every output")
    how = f" ({', '.join(measured)}, yet the replay differs on new inputs)" if measured else ""
    return GraphMismatchCause(FROZEN_STATE, "the implementation depends on state a graph freezes (host-side "
                                            f"values, pointers, a cache){how}", FROZEN_REMEDY)
