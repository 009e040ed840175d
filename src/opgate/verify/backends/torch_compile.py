"""`torch.compile`: opgate compiles the reference itself (a real compiler of the same meaning), or a user
function registered with backend="torch.compile". Graph breaks are reported from torch._dynamo.explain
on the first case; recompilations from dynamo's counters after the last.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from opgate.model.results import Figure, Threshold
from opgate.verify.backends.base import (
    Backend,
    ImplementationChoice, PreparedImplementation, accepts_out, enable_empty_poisoning, function_runner,
    implementation_function, torch_device,
)

# Dynamo falls back to eager after this many recompilations of one frame; the fuzzer's shapes, dtypes
# and strides need more than the default (8) or later cases would silently run uncompiled.
RECOMPILE_LIMIT = 256


def _raise_recompile_limit() -> None:
    import torch._dynamo

    config = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(config, name):
            setattr(config, name, max(getattr(config, name), RECOMPILE_LIMIT))


def prepare(choice: ImplementationChoice, op: Any, dtype: str, workdir: Path) -> PreparedImplementation:
    import torch
    import torch._dynamo

    enable_empty_poisoning()
    _raise_recompile_limit()
    device = torch_device()
    fn = implementation_function(op, choice)
    compiled = torch.compile(fn, dynamic=True)
    inner = function_runner(compiled, device, accepts_out(fn))
    prepared = PreparedImplementation(
        choice=choice,
        device=device,
        run=inner,
        facts={"torch": torch.__version__, "device": device, "mode": "default", "dynamic": True},
        figures=[Figure("device", device, key="verify.numerics.device")],
        poisoned_out=accepts_out(fn),
    )
    explained = {"done": False}

    def run(values: Any, layouts: Any, out_specs: Any) -> Any:
        if not explained["done"]:
            explained["done"] = True
            _explain(fn, values, layouts, device, prepared)
        return inner(values, layouts, out_specs)

    def finish() -> None:
        from torch._dynamo.utils import counters

        stats = counters.get("stats", {})
        prepared.facts["unique_graphs"] = int(stats.get("unique_graphs", 0))
        prepared.facts["frames_compiled"] = int(stats.get("calls_captured", 0))
        recompiles = sum(counters.get("recompiles", {}).values()) if "recompiles" in counters else None
        if recompiles is not None:
            prepared.facts["recompiles"] = int(recompiles)
        prepared.figures.append(Figure("graphs compiled", prepared.facts["unique_graphs"],
                                       key="verify.numerics.graphs_compiled"))

    prepared.run = run
    prepared.finish = finish
    return prepared


def _explain(fn: Any, values: Any, layouts: Any, device: str, prepared: PreparedImplementation) -> None:
    """Graph count and breaks of the first case, from torch._dynamo.explain (it runs its own trace)."""
    import torch
    import torch._dynamo

    from opgate.verify.inputs import apply_layout

    args = [apply_layout(v.to(device), layout) if isinstance(v, torch.Tensor) else v
            for v, layout in zip(values, layouts)]
    try:
        explanation = torch._dynamo.explain(fn)(*args)
    except Exception as exc:  # explain is a diagnostic: its failure must not fail the numerics
        prepared.notes.append(f"torch._dynamo.explain failed: {type(exc).__name__}: {exc}")
        return
    finally:
        from torch._dynamo.utils import counters

        torch._dynamo.reset()
        counters.clear()  # the run's own compilations are counted from here
    reasons = [str(getattr(r, "reason", r)) for r in explanation.break_reasons]
    prepared.facts.update(graph_count=explanation.graph_count, graph_break_count=explanation.graph_break_count,
                          break_reasons=reasons[:10])
    prepared.figures.append(Figure(
        "graph breaks", explanation.graph_break_count, "",
        Threshold(0, "==", "torch._dynamo.explain on the first case; a break splits the compiled graph "
                           "(a speed concern, not a numerics failure)"),
        key="verify.numerics.graph_breaks",
    ))
    if explanation.graph_break_count:
        prepared.notes.append(f"{explanation.graph_break_count} graph break(s): " + "; ".join(reasons[:3]))


def warm_up_compiler() -> None:
    """Compile and run one tiny function on the checks' device, then forget it: the first torch.compile in a
    process imports dynamo, inductor and their code generators and starts inductor's machinery (~10 s on the H200
    host beside other workers, in the history of docs/benchmarks.md); afterwards a check's own compiles cost only
    their graphs."""
    import torch
    import torch._dynamo
    from torch._dynamo.utils import counters

    device = torch_device()
    probe = torch.compile(lambda x: torch.softmax(x * 2.0, dim=-1).sum(dim=-1), dynamic=True)
    with torch.no_grad():
        probe(torch.ones(4, 8, device=device))
    if device == "cuda":
        torch.cuda.synchronize()
    torch._dynamo.reset()
    counters.clear()  # the checks count their own graphs and recompiles from zero


class TorchCompileBackend(Backend):
    name = "torch.compile"
    startup_s = 20.0
    extra = True
    extra_rank = 1

    def case_cost_weight(self, gpu: bool) -> float:
        return 1.0  # a new shape is a new compile (recompiles), seconds each

    def warm_up(self) -> None:
        warm_up_compiler()

    def prepare(self, choice: ImplementationChoice, op: Any, dtype: str, workdir: Path) -> PreparedImplementation:
        return prepare(choice, op, dtype, workdir)
