"""The calibration's bound terms (verify/error_bounds.py), two ways in one run: every sampled Jacobian row reduced
as a dense product over the whole input (the way before 2026-12-03) and the way now, where a leaf whose first
sampled gradient is sparse (an elementwise or row op) has its non-zero terms gathered before the reductions. Same
references, cases and samples; the bounds must agree (to float64 summation order: the reductions add the same
non-zero terms in another grouping).

    PYTHONPATH=src python benchmarks/bound_terms.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import time
from typing import Any, Callable

import torch
import torch.nn.functional as F

from opgate.verify import error_bounds
from opgate.verify.compare import finite_everywhere
from opgate.verify.error_bounds import RowTerms


def _dense_terms(out: Any, leaves: Any, values: Any, samples: Any, roundoff: float, intermediates: Any = (),
                 magnitudes: Any = None) -> Any:
    """error_bounds._sampled_terms as it was: every leaf's products formed densely in a reused buffer."""
    wrt = list(leaves) + list(intermediates)
    flat_values = [v.reshape(-1) for v in values]
    buffers: list[Any] = [None] * len(flat_values)
    found, used = [], False
    one_hot = torch.zeros(out.shape, dtype=out.dtype, device=out.device)
    flat_one_hot = one_hot.view(-1)
    try:
        for index in samples:
            flat_one_hot[index] = 1.0
            try:
                grads = torch.autograd.grad(out, wrt, grad_outputs=one_hot, retain_graph=True, allow_unused=True)
                parts, finite = [], True
                for k, (g, value) in enumerate(zip(grads[:len(leaves)], flat_values)):
                    if g is None:
                        continue
                    used = True
                    if buffers[k] is None:
                        buffers[k] = torch.empty_like(value)
                    product = torch.mul(g.detach().reshape(-1), value, out=buffers[k])
                    if not finite_everywhere(product):
                        finite = False
                        product.nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)
                    parts.append(product)
                terms = RowTerms.of(parts, roundoff)
                carried = 0.0
                for value, g in zip(magnitudes if magnitudes is not None else intermediates, grads[len(leaves):]):
                    if g is not None:
                        carried += float((value.detach() * g).abs().nan_to_num(nan=0.0, posinf=0.0).sum())
            finally:
                flat_one_hot[index] = 0.0
            found.append((terms, finite, carried))
    except RuntimeError:
        return None
    return found if used else None


def _grad_of(forward: Callable[..., Any]) -> Callable[..., Any]:
    """A gradient twin's reference: forward's input gradients under a fixed upstream gradient, differentiable."""
    def grads(*inputs: Any) -> Any:
        with torch.enable_grad():
            leaves = [t if t.requires_grad else t.detach().requires_grad_(True) for t in inputs]
            y = forward(*leaves)
            upstream = torch.linspace(-1, 1, y.numel(), dtype=y.dtype).reshape(y.shape)
            return torch.autograd.grad(y, leaves, upstream, create_graph=True)
    return grads


def _cases() -> list[tuple[str, Callable[..., Any], list[Any]]]:
    gen = torch.Generator().manual_seed(0)

    def rand(*shape: int) -> Any:
        return torch.randn(*shape, dtype=torch.float64, generator=gen)

    labels = torch.randint(0, 4096, (16,), generator=gen)
    layer_norm = lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)  # noqa: E731
    swiglu = lambda x, y: F.silu(x) * y  # noqa: E731
    return [
        ("softmax 64x1024", lambda x: torch.softmax(x, -1), [rand(64, 1024)]),
        ("cross_entropy 16x4096", lambda x, y: F.cross_entropy(x, y, reduction="none"), [rand(16, 4096), labels]),
        ("layer_norm grad 256x4096", _grad_of(layer_norm), [rand(256, 4096), rand(4096), rand(4096)]),
        ("silu 1024x2048", F.silu, [rand(1024, 2048)]),
        ("swiglu grad 1024x2048", _grad_of(swiglu), [rand(1024, 2048), rand(1024, 2048)]),
        ("linear + cross_entropy grad 16x512x8192", _grad_of(lambda x, w: F.cross_entropy(x @ w.t(), labels % 8192)),
         [rand(16, 512), rand(8192, 512)]),
    ]


def _timed(reference: Any, inputs: Any, repeats: int) -> dict[str, tuple[float, list[Any]]]:
    """Both ways, alternating (this shared machine's speed drifts by tens of percent within a minute): the fastest
    run of each and its bounds."""
    truth = reference(*inputs)
    truths = [t.detach() for t in (truth if isinstance(truth, (tuple, list)) else [truth])]
    ways = {"dense": _dense_terms, "now": error_bounds._sampled_terms}
    best: dict[str, tuple[float, list[Any]]] = {}
    try:
        for _ in range(repeats):
            for name, terms in ways.items():
                error_bounds._sampled_terms = terms
                started = time.perf_counter()
                bounds = error_bounds.accumulation_bounds(reference, inputs, truths, "float32", seed=0)
                seconds = time.perf_counter() - started
                if name not in best or seconds < best[name][0]:
                    best[name] = (seconds, bounds)
    finally:
        error_bounds._sampled_terms = ways["now"]
    return best


def _difference(before: list[Any], now: list[Any]) -> float:
    """The largest relative difference of the bounds' RMS and p99.9 figures and of the sampled elements' bounds."""
    worst = 0.0
    for a, b in zip(before, now):
        pairs = [(a.rmse, b.rmse), (a.quantile, b.quantile)]
        pairs += [(x.bound, y.bound) for x, y in zip(a.elements, b.elements)]
        if len(a.elements) != len(b.elements) or a.fan_in != b.fan_in:
            return float("inf")
        worst = max([worst] + [abs(x - y) / max(abs(x), 1e-300) for x, y in pairs if x != y])
    return worst


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"{'reference':40s} {'dense s':>9s} {'now s':>9s} {'speed-up':>9s}  largest relative difference")
    for name, reference, inputs in _cases():
        best = _timed(reference, inputs, args.repeats)
        (dense_s, dense), (now_s, now) = best["dense"], best["now"]
        print(f"{name:40s} {dense_s:9.3f} {now_s:9.3f} {dense_s / now_s:8.2f}x  {_difference(dense, now):.1e}")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, best of {args.repeats}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
