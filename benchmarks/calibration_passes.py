"""The calibration's passes over large tensors, old and new side by side in one run:

- the bound terms' sampled elements (verify/error_bounds._sampled_terms): each reverse pass seeded by a select of
  out.flat[s] (autograd fills a fresh zero tensor of the output's shape for it), the products gathered to their
  non-zeros, and row_bound's three passes plus one more for the magnitude over the gathered copy (before
  2026-12-02), against one reused one-hot and the products reduced where they lie (RowTerms.of; now);
- the eager baseline's statistics (compare.compare_output and calibrate.baseline_lost_mask): every tensor gathered
  through the mask of comparable elements (before), against read in place when every element is comparable (now).

References shaped like the cases that cost the most: the gradient of fla's linear cross-entropy at its declared
M=16, H=512, V=8192 (dW has 4.2 M elements, each depending on 4.2 M terms), a layer-norm gradient, a softmax. Same
inputs and samples both ways; the table gives the largest relative difference of the per-element bounds (the sums
run in another order) and whether the statistics are identical.

    PYTHONPATH=src python benchmarks/calibration_passes.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time
from typing import Any, Callable

import torch
import torch.nn.functional as F

from opgate.verify import calibrate, compare, error_bounds


def _old_row_bound(terms: Any, roundoff: float) -> float:
    """error_bounds.row_bound as it was: three passes over the gathered non-zero terms."""
    count = int(terms.numel())
    if count == 0:
        return 0.0
    magnitude = float(terms.abs().sum())
    mean = float(terms.sum()) / count
    spread = math.sqrt(max(float(terms.pow(2).sum()) / count - mean * mean, 0.0))
    quantum_sample = error_bounds.QUANTUM_SAMPLE

    def first_at(quantum: float) -> int:
        return (error_bounds.first_inexact_step(count, abs(mean), spread, quantum / roundoff)
                if math.isfinite(quantum) else 1)

    first = 0
    if count > quantum_sample:
        first = 1 if first_at(float(error_bounds._quantum(terms[:quantum_sample]).min())) == 1 else 0
    if not first:
        first = first_at(float(error_bounds._quantum(terms).min()))
    before = first - 1
    modelled = roundoff * ((count * (count + 1) - before * (before + 1)) / 2 * abs(mean)
                           + error_bounds.SPREAD_SIGMAS * (2.0 / 3.0) * (count**1.5 - before**1.5) * spread
                           + error_bounds.EXTRA_OPERATIONS * magnitude)
    rigorous = error_bounds.gamma(count - before + error_bounds.EXTRA_OPERATIONS, roundoff) * magnitude
    return min(modelled, rigorous)


def _old_sampled_terms(out: Any, leaves: Any, values: Any, samples: Any, roundoff: float,
                       intermediates: Any = (), magnitudes: Any = None) -> Any:
    """error_bounds._sampled_terms as it was, with the per-element reduction accumulation_bounds then made."""
    flat = out.reshape(-1)
    wrt = list(leaves) + list(intermediates)
    flat_values = [v.reshape(-1) for v in values]
    found, used = [], False
    try:
        for index in samples:
            grads = torch.autograd.grad(flat[index], wrt, retain_graph=True, allow_unused=True)
            parts, finite = [], True
            for g, value in zip(grads[:len(leaves)], flat_values):
                if g is None:
                    continue
                used = True
                product = g.detach().reshape(-1) * value
                if not compare.finite_everywhere(product):
                    finite = False
                    product = product.nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)
                parts.append(product[product != 0])
            terms = torch.cat(parts) if len(parts) > 1 else parts[0] if parts else torch.zeros(0, dtype=torch.float64)
            carried = 0.0
            for value, g in zip(magnitudes if magnitudes is not None else intermediates, grads[len(leaves):]):
                if g is not None:
                    carried += float((value.detach() * g).abs().nan_to_num(nan=0.0, posinf=0.0).sum())
            row = error_bounds.RowTerms(int(terms.numel()), float(terms.abs().sum()), _old_row_bound(terms, roundoff))
            found.append((row, finite, carried))
    except RuntimeError:
        return None
    return found if used else None


def _linear_ce_grad(x: Any, labels: Any, w: Any, b: Any) -> Any:
    with torch.enable_grad():
        leaves = [t if t.requires_grad else t.detach().requires_grad_(True) for t in (x, w, b)]
        loss = F.cross_entropy(F.linear(leaves[0], leaves[1], leaves[2]), labels, ignore_index=-100)
        return torch.autograd.grad(loss, leaves, create_graph=any(t.requires_grad for t in (x, w, b)))


def _layer_norm_grad(x: Any, w: Any, b: Any) -> Any:
    with torch.enable_grad():
        leaves = [t if t.requires_grad else t.detach().requires_grad_(True) for t in (x, w, b)]
        y = F.layer_norm(leaves[0], (x.shape[-1],), leaves[1], leaves[2], 1e-5)
        upstream = torch.linspace(-1, 1, y.numel(), dtype=y.dtype).reshape(y.shape)
        return torch.autograd.grad(y, leaves, upstream, create_graph=any(t.requires_grad for t in (x, w, b)))


def _cases() -> list[tuple[str, Callable[..., Any], list[Any]]]:
    gen = torch.Generator().manual_seed(0)

    def rand(*shape: int, scale: float = 1.0) -> Any:
        return torch.randn(*shape, dtype=torch.float64, generator=gen) * scale

    labels = torch.randint(0, 8192, (16,), generator=gen)
    labels[1::3] = -100
    return [
        ("linear cross-entropy grad 16x512x8192", _linear_ce_grad,
         [rand(16, 512), labels, rand(8192, 512, scale=0.03), rand(8192, scale=0.03)]),
        ("layer_norm grad 16x4096", _layer_norm_grad, [rand(16, 4096), rand(4096), rand(4096)]),
        ("softmax 64x1024", lambda x: torch.softmax(x, -1), [rand(64, 1024)]),
    ]


def _timed(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    best, result = math.inf, None
    for _ in range(repeats):
        began = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - began)
    return best, result


def _bounds(reference: Any, inputs: Any, truths: Any) -> Any:
    return error_bounds.accumulation_bounds(reference, inputs, truths, "float32", seed=0)


def _relative_difference(old: Any, new: Any) -> float:
    worst = 0.0
    for a, b in zip(old, new):
        pairs = [(a.rmse, b.rmse), (a.quantile, b.quantile)]
        pairs += [(x.bound, y.bound) for x, y in zip(a.elements, b.elements)]
        pairs += [(x.magnitude, y.magnitude) for x, y in zip(a.elements, b.elements)]
        if a.fan_in != b.fan_in or len(a.elements) != len(b.elements):
            return math.inf
        worst = max([worst] + [abs(x - y) / max(abs(x), abs(y)) for x, y in pairs if x != y])
    return worst


def _statistics(truth: Any, baseline: Any) -> Any:
    mask = calibrate.baseline_lost_mask(truth, baseline)
    return compare.compare_output(baseline, truth, str(baseline.dtype).removeprefix("torch."), baseline_lost=mask)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    new_terms, new_selected = error_bounds._sampled_terms, compare.selected
    calibrate_selected = calibrate.selected

    def gathered(values: Any, mask: Any, everywhere: bool) -> Any:
        return values[mask]

    print(f"{'what':52s} {'old s':>8s} {'new s':>8s} {'speed-up':>9s}  same result")
    for name, reference, inputs in _cases():
        truths = [t.detach() for t in error_bounds._outputs_or_none(reference, inputs) or []]
        error_bounds._sampled_terms = _old_sampled_terms
        old_s, old = _timed(lambda: _bounds(reference, inputs, truths), args.repeats)
        error_bounds._sampled_terms = new_terms
        new_s, new = _timed(lambda: _bounds(reference, inputs, truths), args.repeats)
        difference = _relative_difference(old, new)
        print(f"{'bound terms, ' + name:52s} {old_s:8.3f} {new_s:8.3f} {old_s / new_s:8.2f}x  "
              f"bounds within {difference:.1e} relative")
        baselines = [t.float() for t in truths]
        compare.selected = calibrate.selected = gathered
        old_s, old_stats = _timed(lambda: [_statistics(t, b) for t, b in zip(truths, baselines)], args.repeats)
        compare.selected, calibrate.selected = new_selected, calibrate_selected
        new_s, new_stats = _timed(lambda: [_statistics(t, b) for t, b in zip(truths, baselines)], args.repeats)
        same = all(dataclasses.astuple(a) == dataclasses.astuple(b) for a, b in zip(old_stats, new_stats))
        print(f"{'eager statistics, ' + name:52s} {old_s:8.3f} {new_s:8.3f} {old_s / new_s:8.2f}x  "
              f"{'identical' if same else 'DIFFERENT'}")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, best of {args.repeats}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
