"""The float32-accumulation bound holds for real float32 computations in any order, and stays below real bugs."""

from __future__ import annotations

import torch

from opgate.verify.error_bounds import accumulation_bounds, gamma


def _bound(reference, inputs):
    truth = reference(*inputs)
    return accumulation_bounds(reference, inputs, [truth], "float32", seed=1)[0], truth


def _sequential_cumsum(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    acc = torch.zeros(x.shape[0], dtype=x.dtype)
    for j in range(x.shape[1]):
        acc = acc + x[:, j]
        out[:, j] = acc
    return out


def test_a_sequential_float32_sum_of_equal_values_stays_inside_the_bound():
    x = torch.full((2, 4096), 0.1, dtype=torch.float64)
    bound, truth = _bound(lambda t: torch.cumsum(t, -1), [x])
    err = (_sequential_cumsum(x.float()).double() - truth).abs()
    assert bound.fan_in == 4096
    assert float(err.max()) < bound.quantile  # systematic error of same-sign data is covered
    assert float(err.pow(2).mean().sqrt()) < bound.rmse * 2


def test_a_dropped_k_element_exceeds_the_matmul_bound():
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(32, 1025, generator=gen, dtype=torch.float64)
    b = torch.randn(1025, 16, generator=gen, dtype=torch.float64)
    bound, truth = _bound(lambda p, q: p @ q, [a, b])
    correct = (a.float() @ b.float()).double()
    assert float((correct - truth).abs().max()) < bound.quantile
    dropped = (a[:, :-1].float() @ b[:-1].float()).double()  # the K tail forgotten
    assert float((dropped - truth).pow(2).mean().sqrt()) > bound.rmse


def test_elementwise_ops_get_a_bound_of_a_few_ulp():
    x = torch.randn(64, 64, dtype=torch.float64)
    bound, truth = _bound(lambda t: 2 * t, [x])
    assert bound.fan_in == 1
    assert bound.quantile <= gamma(17, 2.0**-24) * float((2 * x).abs().max()) * 1.0001


def test_a_reference_without_gradient_has_no_bound():
    x = torch.randn(8, 8, dtype=torch.float64)
    bound, _ = _bound(lambda t: t.argmax(-1), [x])
    assert not bound.present
