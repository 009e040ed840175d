"""The calibration's bound terms (verify/error_bounds.py), two ways in one run: each sampled Jacobian row reduced to
its non-zero terms by masking first (the way before 2026-12-02: `g != 0`, then two gathers and a concatenation)
and by a dense product (now). Same references, cases and samples; the bounds must agree exactly.

    PYTHONPATH=src python benchmarks/bound_terms.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import time
from typing import Any, Callable

import torch
import torch.nn.functional as F

from opgate.verify import error_bounds


def _masked_terms(out: Any, leaves: Any, values: Any, samples: Any, intermediates: Any = (),
                  magnitudes: Any = None) -> Any:
    """error_bounds._sampled_terms as it was: mask each gradient first, then multiply the survivors."""
    flat = out.reshape(-1)
    wrt = list(leaves) + list(intermediates)
    flat_values = [v.reshape(-1) for v in values]
    found, used = [], False
    try:
        for index in samples:
            grads = torch.autograd.grad(flat[index], wrt, retain_graph=True, allow_unused=True)
            parts = []
            for g, value in zip(grads[:len(leaves)], flat_values):
                if g is None:
                    continue
                used = True
                g = g.detach().reshape(-1)
                moved = g != 0
                parts.append(g[moved] * value[moved])
            raw = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)
            finite = bool(torch.isfinite(raw).all())
            terms = raw.nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)
            terms = terms[terms != 0]
            carried = 0.0
            for value, g in zip(magnitudes if magnitudes is not None else intermediates, grads[len(leaves):]):
                if g is not None:
                    carried += float((value.detach() * g).abs().nan_to_num(nan=0.0, posinf=0.0).sum())
            found.append((terms, finite, carried))
    except RuntimeError:
        return None
    return found if used else None


def _layer_norm_grad(x: Any, w: Any, b: Any) -> Any:
    with torch.enable_grad():
        x, w, b = (t.detach().requires_grad_(True) for t in (x, w, b))
        y = F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)
        upstream = torch.linspace(-1, 1, y.numel(), dtype=y.dtype).reshape(y.shape)
        return torch.autograd.grad(y, (x, w, b), upstream, create_graph=True)


def _cases() -> list[tuple[str, Callable[..., Any], list[Any]]]:
    gen = torch.Generator().manual_seed(0)

    def rand(*shape: int) -> Any:
        return torch.randn(*shape, dtype=torch.float64, generator=gen)

    labels = torch.randint(0, 4096, (16,), generator=gen)
    return [
        ("softmax 64x1024", lambda x: torch.softmax(x, -1), [rand(64, 1024)]),
        ("layer_norm 16x4096", lambda x, w, b: F.layer_norm(x, (4096,), w, b, 1e-5),
         [rand(16, 4096), rand(4096), rand(4096)]),
        ("layer_norm grad 16x4096", _layer_norm_grad, [rand(16, 4096), rand(4096), rand(4096)]),
        ("cross_entropy 16x4096", lambda x, y: F.cross_entropy(x, y, reduction="none"), [rand(16, 4096), labels]),
        ("layer_norm grad 256x4096", _layer_norm_grad, [rand(256, 4096), rand(4096), rand(4096)]),
        ("layer_norm grad 2x65537", _layer_norm_grad, [rand(2, 65537), rand(65537), rand(65537)]),
    ]


def _timed(name: str, reference: Any, inputs: Any, repeats: int) -> tuple[float, list[Any]]:
    truth = reference(*inputs)
    truths = list(truth) if isinstance(truth, (tuple, list)) else [truth]
    truths = [t.detach() for t in truths]
    best, bounds = float("inf"), []
    for _ in range(repeats):
        started = time.perf_counter()
        bounds = error_bounds.accumulation_bounds(reference, inputs, truths, "float32", seed=0)
        best = min(best, time.perf_counter() - started)
    return best, bounds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    dense = error_bounds._sampled_terms
    print(f"{'reference':26s} {'masked s':>9s} {'dense s':>9s} {'speed-up':>9s}  same bounds")
    for name, reference, inputs in _cases():
        error_bounds._sampled_terms = _masked_terms
        masked_s, masked = _timed(name, reference, inputs, args.repeats)
        error_bounds._sampled_terms = dense
        dense_s, now = _timed(name, reference, inputs, args.repeats)
        same = all(a.rmse == b.rmse and a.quantile == b.quantile for a, b in zip(masked, now))
        print(f"{name:26s} {masked_s:9.3f} {dense_s:9.3f} {masked_s / dense_s:8.2f}x  {same}")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, best of {args.repeats}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
