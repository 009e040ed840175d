"""Gaming: results that look right in a benchmark loop and are not what the caller asked for.

What KernelBench learned: an implementation can return a cached result for a repeated input, return an
alias of its input, mutate its inputs, or do its work on a side stream the caller's stream never waits for
(timings look fast and results arrive late). The verify child runs these probes after the case loop, on one
declared case (typical values, contiguous), with the implementation's own function on its own device:

  cached      call twice with the same input buffers, the second time holding a second case's values
              (copied in place): the second result must match the second truth. It is a stale result when it
              fails there and equals the first result, or matches the first truth, or a call with fresh
              buffers holding the same values passes (a numerically weak kernel is not called a cheat).
  alias       an output sharing storage with an input, when the reference's outputs do not.
  mutation    every input compared bit for bit before and after the call.
  side stream on a GPU: the call runs with a non-default current stream that is kept busy (a ~10 ms GPU sleep)
              and then writes the inputs into buffers that held poison, as a caller's preceding kernel would; its
              result is read by a copy on that stream only (no device-wide sync). It is side-stream work when
              that copy differs from the result after a full synchronize (the result arrives late), or when the
              synchronized result is wrong although the plain call on the same values is right (the work did not
              wait for the caller's stream: it read the inputs before they were written, or its output was
              overwritten by the caller's own pending work). A fast kernel on a private stream finishes before
              the copy is even enqueued; only the busy caller's stream makes the missing wait visible.

Only the user's own Python implementations (torch, triton) are probed: opgate's extras are the reference.
Every finding fails the implementation and names what was measured. Cached, alias and mutation are failure class
`gaming` (the result is not what the caller asked for); side-stream work is class `stream`: a kernel launched on
the legacy default stream or on a library's own stream (CuPy's default) is a common interop mistake, not a cheat,
and the reason says how to launch on the caller's stream instead.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from opgate.model.results import CheckResult, Figure, Outcome, Threshold

FAILURE_CLASS = "gaming"
STREAM_CLASS = "stream"
PROBED_BACKENDS = ("torch", "triton")
SIDE_STREAM_TRIALS = 3
# torch.cuda._sleep cycles on the caller's stream before its inputs are written: ~10 ms at the H200's 1.98 GHz,
# longer than any launch latency, so work that does not wait for the caller's stream runs before its inputs exist.
SIDE_STREAM_BUSY_CYCLES = 20_000_000
TRICKS = ("cached", "alias", "mutation", "side_stream")
REMEDIES = {
    "cached": "compute every call from the inputs it is given: no result cache keyed by shape, pointer or id",
    "alias": "return a new tensor (or write into out=): an output that shares an input's storage changes when "
             "the caller reuses that input",
    "mutation": "do not write into the inputs; work on a copy (or declare the input as mutated once the spec "
                "supports it)",
    "side_stream": "launch on the caller's stream, torch.cuda.current_stream() (CuPy: launch inside `with "
                   "cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):`; CuPy's default is the legacy "
                   "default stream, which PyTorch's non-blocking streams never wait for), or order both ways: "
                   "other.wait_stream(torch.cuda.current_stream()) before the launch and "
                   "torch.cuda.current_stream().wait_stream(other) before returning",
}
# The failure class a finding gives the result: a trick that returns something other than what was asked is gaming;
# work on another stream is a stream-ordering bug, named for what it is.
CLASS_OF_TRICK = {"cached": FAILURE_CLASS, "alias": FAILURE_CLASS, "mutation": FAILURE_CLASS,
                  "side_stream": STREAM_CLASS}
# What a side-stream finding says first: the measured fact, then how it showed.
OTHER_STREAM = "runs on a stream other than the caller's current stream"


@dataclass(frozen=True)
class GamingFinding:
    trick: str  # one of TRICKS
    reason: str


@dataclass
class GamingProbe:
    """What the probes found on one implementation (findings), what they ran and what they skipped."""

    findings: list[GamingFinding] = field(default_factory=list)
    probed: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    case: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"case": self.case, "probed": self.probed, "skipped": self.skipped,
                "findings": [dataclasses.asdict(f) for f in self.findings]}


# -- tensors ----------------------------------------------------------------------------------------------------

def _is_tensor(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


def storage_span(tensor: Any) -> tuple[int, int]:
    """[start, end) of the bytes of the tensor's storage."""
    storage = tensor.untyped_storage()
    return storage.data_ptr(), storage.data_ptr() + storage.nbytes()


def shares_storage(a: Any, b: Any) -> bool:
    if a.device != b.device:
        return False
    (s1, e1), (s2, e2) = storage_span(a), storage_span(b)
    return s1 < e2 and s2 < e1 and e1 > s1 and e2 > s2


def bits_of(tensor: Any) -> Any:
    """The tensor's bytes (NaN payloads and -0.0 included): what "unchanged" means."""
    import torch

    flat = tensor.detach().contiguous().reshape(-1)
    return flat.view(torch.uint8) if flat.element_size() > 0 and flat.numel() else flat


def same_bits(a: Any, b: Any) -> bool:
    import torch

    if tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype:
        return False
    return bool(torch.equal(bits_of(a).cpu(), bits_of(b).cpu()))


def _outputs(result: Any) -> list[Any]:
    return list(result) if isinstance(result, (list, tuple)) else [result]


def _snapshot(outputs: Sequence[Any]) -> list[Any]:
    return [o.detach().clone() if _is_tensor(o) else o for o in outputs]


def _to_cpu(outputs: Sequence[Any]) -> list[Any]:
    return [o.detach().cpu() if _is_tensor(o) else o for o in outputs]


# -- the probes -------------------------------------------------------------------------------------------------

# judge(outputs on CPU, case index 0|1) -> passed?
Judge = Callable[[Sequence[Any], int], bool]


def probe_mutation(names: Sequence[str], before: Sequence[Any], after: Sequence[Any]) -> list[GamingFinding]:
    findings = []
    for name, old, new in zip(names, before, after):
        if not _is_tensor(old) or same_bits(old, new):
            continue
        changed = int((bits_of(old).cpu().reshape(old.numel(), -1) != bits_of(new).cpu().reshape(old.numel(), -1))
                      .any(dim=1).sum()) if old.numel() else 0
        findings.append(GamingFinding("mutation", f"mutates its input {name} ({changed} of {old.numel()} elements "
                                                  "changed by the call)"))
    return findings


def probe_alias(names: Sequence[str], inputs: Sequence[Any], outputs: Sequence[Any],
                reference_aliases: set[tuple[int, int]]) -> list[GamingFinding]:
    """Outputs sharing storage with an input, except pairs (output, input) where the reference aliases too."""
    findings = []
    for o, out in enumerate(outputs):
        if not _is_tensor(out):
            continue
        for i, (name, inp) in enumerate(zip(names, inputs)):
            if _is_tensor(inp) and (o, i) not in reference_aliases and shares_storage(out, inp):
                label = "its output" if len(outputs) == 1 else f"output {o}"
                findings.append(GamingFinding("alias", f"returns an alias of its input {name}: {label} shares "
                                                       f"{name}'s storage (the reference returns a new tensor)"))
    return findings


def aliasing_pairs(inputs: Sequence[Any], outputs: Sequence[Any]) -> set[tuple[int, int]]:
    return {(o, i) for o, out in enumerate(outputs) if _is_tensor(out)
            for i, inp in enumerate(inputs) if _is_tensor(inp) and shares_storage(out, inp)}


def probe_cached(call: Callable[[Sequence[Any]], list[Any]], buffers: Sequence[Any], first: Sequence[Any],
                 second_values: Sequence[Any], device: str, judge: Judge) -> list[GamingFinding]:
    """Call again on `buffers` (the first call's inputs) refilled in place with `second_values`."""
    for buffer, value in zip(buffers, second_values):
        if _is_tensor(buffer):
            buffer.copy_(value)
    reused = _to_cpu(call(buffers))
    if judge(reused, 1):
        return []
    first_cpu = _to_cpu(first)
    equal_first = all(_is_tensor(a) and _is_tensor(b) and same_bits(a, b) for a, b in zip(reused, first_cpu))
    matches_first = judge(reused, 0)
    fresh = [v.to(device) if _is_tensor(v) else v for v in second_values]
    fresh_passes = judge(_to_cpu(call(fresh)), 1)
    if not (equal_first or matches_first or fresh_passes):
        return []  # wrong on the second values whatever the buffers: a numerics failure, not a cache
    how = ("it is bit for bit the first call's result" if equal_first else
           "it matches the first call's truth" if matches_first else
           "a call with fresh buffers holding the same values is right")
    return [GamingFinding("cached", "returns a cached/stale result: called again on the same input buffers "
                                    f"holding new values, its result is wrong for them ({how})")]


def _poison_like(tensor: Any) -> Any:
    import math

    import torch

    if tensor.dtype.is_floating_point:
        return torch.full_like(tensor, math.nan)
    if tensor.dtype == torch.bool:
        return torch.ones_like(tensor)
    return torch.full_like(tensor, torch.iinfo(tensor.dtype).max)


def probe_side_stream(call: Callable[[Sequence[Any]], list[Any]], inputs: Sequence[Any],
                      right: Callable[[Sequence[Any]], bool] | None = None) -> list[GamingFinding]:
    """Run the call with a busy non-default current stream that writes the inputs just before it, and read the
    result on that stream only. `right(outputs on CPU)`: whether a result is right for `inputs` (given only when
    the plain, synchronized call on these values is right)."""
    import torch

    for _ in range(SIDE_STREAM_TRIALS):
        stream = torch.cuda.Stream()
        staged = [v.detach().clone() if _is_tensor(v) else v for v in inputs]
        targets = [_poison_like(v) if _is_tensor(v) else v for v in inputs]
        torch.cuda.synchronize()
        with torch.cuda.stream(stream):
            torch.cuda._sleep(SIDE_STREAM_BUSY_CYCLES)  # the caller's stream is busy ...
            for target, value in zip(targets, staged):  # ... and then writes the inputs, as a producer kernel would
                if _is_tensor(target):
                    target.copy_(value)
            outputs = call(targets)
            early = [o.clone() if _is_tensor(o) else o for o in outputs]  # ordered after `stream`'s work only
        torch.cuda.synchronize()
        late = [o for o in outputs]
        for o, (a, b) in enumerate(zip(early, late)):
            if _is_tensor(a) and not same_bits(a, b):
                label = "its result" if len(outputs) == 1 else f"output {o}"
                return [GamingFinding("side_stream", f"{OTHER_STREAM}, one the caller's stream never waits for: "
                                                     f"{label} read on the caller's stream differs from the result "
                                                     "after a device-wide synchronize (the result arrives late)")]
        if right is not None and not right(_to_cpu(late)):
            return [GamingFinding("side_stream", f"{OTHER_STREAM}, one that never waits for the caller's stream: "
                                                 "with the caller's stream busy until it writes the inputs, the "
                                                 "result is wrong (the work read the inputs before they were "
                                                 "written), while the same call on idle streams is right")]
    return []


# -- the probe of one implementation ----------------------------------------------------------------------------

# Calls of the implementation on the declared case after the case loop, as the time budget counts them: the first
# call (mutation, alias) and the cached probe's second; a third only when that one fails.
PROBE_CALLS = 2.0


@dataclass
class ProbeTruths:
    """The probe's float64 side, prepared before the case loop (verify/check.py) so that its cost counts in the
    check's time budget: the declared case and a second case of the same size, with truths, budgets and masks.
    The second case is another seed of that declared size in the plan where there is one (its truth is the plan's);
    else one drawn here, whose bound terms are float64 reverse passes (13 s per dtype on one CPU core for fla's linear
    cross-entropy gradient at its largest declared size). `skipped`: why the probes cannot run."""

    case: Any
    second_case: Any
    truths: list[Any] = field(default_factory=list)
    budgets: list[Any] = field(default_factory=list)
    masks: list[Any] = field(default_factory=list)
    skipped: str = ""


def probe_case_index(op: Any, plan: Any, smallest: bool) -> int | None:
    """Which plan case the probes call the implementation on: a declared size's first seed with typical values,
    contiguous and non-empty; the first declared one, or with `smallest` (a backend where a call costs its size:
    Triton's interpreter, torch on the CPU) the one with the fewest input elements. The tricks are the same at any
    size, and under the interpreter the probe's calls at fla_kl_div.grad's first size (8192 x 512 weights) cost
    13-19 s a dtype."""
    from opgate.verify.inputs import case_input_elements, declared_firsts

    firsts = sorted(declared_firsts(plan.cases))
    candidates = [k for k in firsts if plan.cases[k].regime == "typical" and plan.cases[k].layout == "contiguous"
                  and all(v > 0 for _, v in plan.cases[k].dims)]
    if not candidates:
        return None
    return min(candidates, key=lambda k: case_input_elements(op, plan.cases[k])) if smallest else candidates[0]


def prepare_probe(op: Any, choice: Any, plan: Any, smallest: bool = False,
                  budgets_of: Callable[[int], tuple[list[Any], list[Any]]] | None = None) -> ProbeTruths | None:
    """The truths and budgets the probes judge by (None when the implementation is not probed: opgate's extras,
    ONNX, replays, a plan with no declared typical contiguous case). Calls the reference only. `smallest`: probe the
    cheapest declared size (probe_case_index); `budgets_of(index)`: a plan case's budgets and masks where the
    calibration deferred them (the check's own, which keeps them for its case loop)."""
    from opgate.verify.calibrate import CalibrationError, budgets_for_case, truth_and_baseline

    if choice.origin != "user" or choice.backend not in PROBED_BACKENDS:
        return None
    index = probe_case_index(op, plan, smallest)
    if index is None:
        return None
    case = plan.cases[index]
    first_budgets, first_masks = _plan_budgets(plan, index, budgets_of)
    sibling = next((k for k, c in enumerate(plan.cases) if k != index and c.origin == "declared"
                    and c.dims == case.dims and c.regime == case.regime and c.layout == case.layout
                    and c.seed != case.seed), None)
    if sibling is not None:  # another seed of the same size: its truth is the plan's, computed once
        second_budgets, second_masks = _plan_budgets(plan, sibling, budgets_of)
        return ProbeTruths(case, plan.cases[sibling], [plan.truths[index], plan.truths[sibling]],
                           [first_budgets, second_budgets], [first_masks, second_masks])
    second_case = dataclasses.replace(case, seed=case.seed + 7_777)
    try:
        second_truth, second_baseline = truth_and_baseline(op, second_case, plan.dtype)
    except CalibrationError as exc:
        return ProbeTruths(case, second_case, skipped=f"the reference fails on the second case: {exc}")
    second_budgets, second_masks, _ = budgets_for_case(op, plan.dtype, second_case, second_truth, second_baseline,
                                                       plan.pooled_rmse, plan.pooled_quantile,
                                                       plan.n_calibration_cases,
                                                       plan.summary.get("pooled_element_rho", ()))
    return ProbeTruths(case, second_case, [plan.truths[index], second_truth],
                       [first_budgets, second_budgets], [first_masks, second_masks])


def _plan_budgets(plan: Any, index: int, budgets_of: Callable[[int], tuple[list[Any], list[Any]]] | None,
                  ) -> tuple[list[Any], list[Any]]:
    """A plan case's budgets and masks; a deferred one's (no budgets in the plan) from `budgets_of`."""
    if plan.budgets[index] or budgets_of is None:
        return plan.budgets[index], plan.masks[index]
    return budgets_of(index)


def probe_implementation(op: Any, choice: Any, prepared: Any, plan: Any, side: ProbeTruths) -> GamingProbe:
    """All probes on one implementation, judged by prepare_probe's truths and budgets (`side`)."""
    import torch

    from opgate.verify.backends.base import accepts_out, implementation_function
    from opgate.verify.calibrate import judge_case
    from opgate.verify.inputs import make_inputs

    case, second_case = side.case, side.second_case
    probe = GamingProbe(case=case.label())
    if side.skipped:
        probe.skipped["all"] = side.skipped
        return probe
    truths, budgets, masks = side.truths, side.budgets, side.masks

    def judge(outputs: Sequence[Any], which: int) -> bool:
        return judge_case(outputs, truths[which], budgets[which], plan.out_dtypes, masks[which],
                          op.quantized).passed

    fn = implementation_function(op, choice)
    device = str(prepared.facts.get("device", "cpu"))
    out_specs = [(tuple(t.shape), d) for t, d in zip(truths[0], plan.out_dtypes)]
    use_out = accepts_out(fn)

    def call_unsynchronised(args: Sequence[Any]) -> list[Any]:
        with torch.no_grad():
            if not use_out:
                return _outputs(fn(*args))
            buffers = [torch.empty(shape, dtype=getattr(torch, dtype), device=device) for shape, dtype in out_specs]
            fn(*args, out=buffers[0] if len(buffers) == 1 else tuple(buffers))
            return buffers

    def call(args: Sequence[Any]) -> list[Any]:  # the other probes judge their trick, not a stream race
        outputs = call_unsynchronised(args)
        if device != "cpu":
            torch.cuda.synchronize()
        return outputs

    names = [spec.name for spec in op.inputs]
    values = make_inputs(op, case, plan.dtype).values
    second_values = make_inputs(op, second_case, plan.dtype).values
    inputs = [v.to(device) if _is_tensor(v) else v for v in values]
    try:
        before = _snapshot(inputs)
        first = call(inputs)
        probe.probed.append("mutation")
        probe.findings += probe_mutation(names, before, inputs)
        if not use_out:
            probe.probed.append("alias")
            ref_inputs = [v.clone() if _is_tensor(v) else v for v in values]
            with torch.no_grad():
                ref_outputs = _outputs(op.reference(*ref_inputs))
            probe.findings += probe_alias(names, inputs, first, aliasing_pairs(ref_inputs, ref_outputs))
        first = _snapshot(first)
        probe.probed.append("cached")
        probe.findings += probe_cached(call, inputs, first, second_values, device, judge)
        if device.startswith("cuda"):
            probe.probed.append("side_stream")
            fresh = [v.to(device) if _is_tensor(v) else v for v in values]
            plain_right = judge(_to_cpu(first), 0)  # the synchronized first call on these values
            probe.findings += probe_side_stream(call_unsynchronised, fresh,
                                                (lambda outputs: judge(outputs, 0)) if plain_right else None)
        else:
            probe.skipped["side_stream"] = "needs a CUDA device: the stream probe runs on a GPU host"
    except Exception as exc:  # the case loop reports the implementation's own errors; say what stopped here
        probe.skipped["rest"] = f"the implementation raised during the probes: {type(exc).__name__}: {exc}"[:300]
    return probe


def finding_class(findings: Sequence[GamingFinding]) -> str:
    """The result's one failure class: `gaming` when any finding is a gaming trick (the stronger statement, and the
    stream finding stays in the reason), else `stream`."""
    classes = {CLASS_OF_TRICK[f.trick] for f in findings}
    return FAILURE_CLASS if FAILURE_CLASS in classes else STREAM_CLASS


def apply_probe(result: CheckResult, probe: GamingProbe | None) -> CheckResult:
    """The check's result with the probes' figures, failed with failure class `gaming` (or `stream`, for work on
    another stream only) on any finding."""
    if probe is None:
        return result
    figures = tuple(result.figures) + (
        Figure("gaming probes with a finding", len(probe.findings), "",
               Threshold(0, "==", f"{', '.join(probe.probed) or 'none'} probed on {probe.case}"),
               key="verify.numerics.gaming_probes_with_a_finding"),
    )
    extra = {**dict(result.extra), "gaming": probe.to_dict()}
    if not probe.findings:
        return dataclasses.replace(result, figures=figures, extra=extra)
    tricks = "; ".join(f.reason for f in probe.findings)
    failure_class = finding_class(probe.findings)
    extra["failure_class"] = failure_class
    remedies = "; ".join(dict.fromkeys(REMEDIES[f.trick] for f in probe.findings))
    if result.outcome == Outcome.FAILED:
        reason = f"[{failure_class}] {tricks} (on {probe.case}); the case plan fails too: {result.reason}"
        remediation = f"{remedies}; {result.remediation}" if result.remediation else remedies
    else:
        reason = f"[{failure_class}] {tricks} (on {probe.case}); the case plan alone: {result.reason}"
        remediation = remedies
    return dataclasses.replace(result, outcome=Outcome.FAILED, reason=reason, figures=figures,
                               remediation=remediation, extra=extra)
