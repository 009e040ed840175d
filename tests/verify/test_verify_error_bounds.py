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


def test_an_output_whose_graph_reaches_no_input_has_no_bound_and_the_others_keep_theirs():
    # a bias gradient (the upstream summed over rows) or a module's own parameter: a grad_fn, but no input moves it
    weight = torch.nn.Parameter(torch.tensor(0.25, dtype=torch.float64))
    x = torch.randn(4, 8, dtype=torch.float64)

    def reference(t):
        return t.sum(-1) * weight, weight.expand(t.shape[0]) * 1.0

    truths = [y.detach() for y in reference(x)]
    depends, alone = accumulation_bounds(reference, [x], truths, "float32", seed=1)
    assert depends.present and depends.fan_in == 8
    assert not alone.present and alone.elements == ()


def _lanes_sum(x: torch.Tensor, lanes: int, dtype: torch.dtype) -> torch.Tensor:
    """Per-lane partial sums in `dtype` over tiles of `lanes` columns, the lanes combined in float64 at the end."""
    pad = (-x.shape[1]) % lanes
    tiles = torch.cat([x, x.new_zeros(x.shape[0], pad)], 1).to(dtype).reshape(x.shape[0], -1, lanes)
    acc = torch.zeros(x.shape[0], lanes, dtype=dtype)
    for k in range(tiles.shape[1]):
        acc = acc + tiles[:, k]
    return acc.double().sum(1)


def test_float32_sums_of_float16_values_are_exact_below_2_24_quanta_so_a_float16_accumulator_shows():
    """A float16 row of 16385 equal values: a float32 sum of it is exact while partial sums stay below 2^24 quanta
    of its 11-bit terms, so only the later additions are charged; per-lane float16 accumulation (512 lanes, 32
    terms each, the truth corpus' bad_rowsum_fp16_acc_triton) errs far beyond it, while float16's own rounding of
    the total is left to the floor. Float32 values (24-bit terms) keep the full bound."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(4, 1, generator=gen, dtype=torch.float64).expand(4, 16385).half().double()
    truth = x.sum(-1)
    bound = accumulation_bounds(lambda t: t.sum(-1), [x], [truth], "float16", seed=1)[0]
    sequential32 = _sequential_cumsum(x.float())[:, -1].double()  # exact until |partial sum| reaches 2^24 quanta
    assert float((sequential32 - truth).abs().max()) <= bound.quantile
    per_lane_fp16 = (_lanes_sum(x, 512, torch.float16) - truth).abs()
    assert float(per_lane_fp16.max()) > 4 * bound.quantile
    x32 = torch.randn(4, 1, generator=gen, dtype=torch.float64).expand(4, 16385).float().double()
    full = accumulation_bounds(lambda t: t.sum(-1), [x32], [x32.sum(-1)], "float32", seed=1)[0]
    sequential = _sequential_cumsum(x32.float())[:, -1].double()
    assert float((sequential - x32.sum(-1)).abs().max()) < full.quantile  # the systematic n^2 growth is still covered


def test_the_smallest_truth_samples_skip_values_that_underflow_the_dtype() -> None:
    """Softplus at x = -1e4 is 0 even in float64: such zeros have no componentwise bound, and sampling them as the
    smallest |truth| left the few elements at x in (-87, -17), where a naive log(1 + e^x) returns 0 for a positive
    truth, unjudged (truth corpus, blind_softplus at the standard budget)."""
    import torch

    from opgate.verify.error_bounds import _sample_elements

    truth = torch.zeros(256, dtype=torch.float64)
    truth[:200] = torch.rand(200, generator=torch.Generator().manual_seed(1), dtype=torch.float64) + 1.0
    truth[250] = 3e-20  # a representable float32 value among 56 underflowed zeros
    samples, n_smallest = _sample_elements(truth, seed=3, floor=float(torch.finfo(torch.float32).tiny))
    assert 250 in samples[len(samples) - n_smallest:]
    assert all(truth[i] != 0 for i in samples[len(samples) - n_smallest:])


def test_the_smallest_quantum_taken_from_a_sample_first_gives_the_same_bound() -> None:
    """row_bound looks at the first QUANTUM_SAMPLE terms' quanta before all of them (fla's linear cross-entropy
    gradient: 4.2 M terms per element, 16 s -> 9 s per case); the bound must not move."""
    import math

    from opgate.verify import error_bounds
    from opgate.verify.error_bounds import QUANTUM_SAMPLE, first_inexact_step, row_bound

    def full(terms: torch.Tensor, roundoff: float) -> float:
        count = int(terms.numel())
        mean = float(terms.sum()) / count
        spread = math.sqrt(max(float(terms.pow(2).sum()) / count - mean * mean, 0.0))
        quantum = float(error_bounds._quantum(terms).min())
        return first_inexact_step(count, abs(mean), spread, quantum / roundoff)

    generator = torch.Generator().manual_seed(0)
    n = 4 * QUANTUM_SAMPLE
    cases = {
        "float64 products": torch.randn(n, dtype=torch.float64, generator=generator) * 1e-3,
        "float16 values (exact additions)": torch.randn(n, generator=generator).half().double(),
        "equal float16 values": torch.full((n,), 0.5, dtype=torch.float64),
        # a small quantum only after the sample: the full minimum decides
        "fine tail": torch.cat([torch.full((QUANTUM_SAMPLE,), 0.5, dtype=torch.float64),
                                torch.full((n - QUANTUM_SAMPLE,), 0.5 + 2.0**-40, dtype=torch.float64)]),
    }
    for name, terms in cases.items():
        count = int(terms.numel())
        mean = float(terms.sum()) / count
        spread = math.sqrt(max(float(terms.pow(2).sum()) / count - mean * mean, 0.0))
        assert error_bounds._first_inexact_addition(terms, count, abs(mean), spread, 2.0**-24) == full(terms, 2.0**-24), name
        assert row_bound(terms, 2.0**-24) > 0, name


def test_few_non_zero_terms_the_sample_misses_give_the_quantum_of_those_terms() -> None:
    """An element of one row of a large input: its non-zero terms lie where neither the sample's head nor its stride
    looks (40 of fla_kl_div.grad's 2,000 sampled elements), and only they are read for the quantum."""
    import math

    from opgate.verify import error_bounds
    from opgate.verify.error_bounds import QUANTUM_SAMPLE, first_inexact_step

    n = 64 * QUANTUM_SAMPLE
    stride = n // QUANTUM_SAMPLE
    for name, values in {"float16 values (exact additions)": torch.randn(300).half().double(),
                         "float64 products": torch.randn(300, dtype=torch.float64) * 1e-3}.items():
        terms = torch.zeros(n, dtype=torch.float64)
        positions = torch.arange(300) * stride + stride // 2 + QUANTUM_SAMPLE  # off the head and the stride
        terms[positions] = values
        count = int(torch.count_nonzero(terms))
        mean = float(terms.sum()) / count
        spread = math.sqrt(max(float(terms.pow(2).sum()) / count - mean * mean, 0.0))
        quantum = float(error_bounds._quantum(values[values != 0]).min())
        expected = first_inexact_step(count, abs(mean), spread, quantum / 2.0**-24)
        assert error_bounds._first_inexact_in([terms], count, abs(mean), spread, 2.0**-24) == expected, name


def test_terms_reduced_where_they_lie_give_the_bound_of_the_gathered_non_zeros() -> None:
    """RowTerms.of reads the products as they lie, zeros and several vectors included (no gathered copy of the
    non-zeros: fla's linear cross-entropy gradient, 4.2 M terms per element); fan-in, magnitude and bound are those of
    the non-zero terms gathered, up to the order of the sums. The smallest-quantum sample must find an element of a
    later row, whose first terms are zeros."""
    import math

    from opgate.verify.error_bounds import RowTerms, row_bound

    generator = torch.Generator().manual_seed(5)
    first = torch.zeros(64 * 1024, dtype=torch.float64)
    first[40 * 1024:41 * 1024] = torch.randn(1024, generator=generator, dtype=torch.float64)  # row 40 alone
    second = torch.randn(8192, generator=generator).half().double()  # 11-bit terms: exact first additions
    second[::3] = 0.0
    for roundoff in (2.0**-24, 2.0**-53):
        reduced = RowTerms.of([first, second], roundoff)
        gathered = torch.cat([first[first != 0], second[second != 0]])
        assert reduced.count == int(gathered.numel())
        assert math.isclose(reduced.magnitude, float(gathered.abs().sum()), rel_tol=1e-12)
        assert math.isclose(reduced.bound, row_bound(gathered, roundoff), rel_tol=1e-12)
    assert RowTerms.of([torch.zeros(10, dtype=torch.float64)], 2.0**-24) == RowTerms(0, 0.0, 0.0)


def test_the_reused_one_hot_gives_each_sample_its_own_jacobian_row() -> None:
    """The reverse passes start from one one-hot buffer moved from sample to sample; a gradient that is a view of it
    (a sum's backward expands it) is used before the 1 moves on, and each sample's terms are its own."""
    from opgate.verify.error_bounds import _sampled_terms

    x = torch.arange(1.0, 13.0, dtype=torch.float64).reshape(3, 4).requires_grad_(True)
    out = x.sum(-1)
    found = _sampled_terms(out, [x], [x.detach()], [0, 1, 2, 1], 2.0**-24)
    assert found is not None
    assert [terms.magnitude for terms, _, _ in found] == [10.0, 26.0, 42.0, 26.0]
    assert all(terms.count == 4 and finite for terms, finite, _ in found)


def _swiglu_grad(x: torch.Tensor, y: torch.Tensor):
    with torch.enable_grad():
        leaves = [t if t.requires_grad else t.detach().requires_grad_(True) for t in (x, y)]
        out = torch.nn.functional.silu(leaves[0]) * leaves[1]
        upstream = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape)
        return torch.autograd.grad(out, leaves, upstream, create_graph=True)


def _bound_cases(seed: int, coarse_too: bool = False) -> list:
    """(reference, inputs) pairs the bound-terms paths are held to each other on: a row op, a gradient twin, dense rows
    (a matmul's), all with a NaN input; with `coarse_too`, bfloat16-valued inputs whose first inexact addition comes
    late."""
    gen = torch.Generator().manual_seed(seed)
    x, y = torch.randn(16, 40, generator=gen, dtype=torch.float64), torch.randn(16, 40, generator=gen, dtype=torch.float64)
    x[3, 5] = float("nan")
    cases = [(lambda t: torch.softmax(t, -1), [x]), (_swiglu_grad, [x, y]),
             (lambda p, q: torch.nn.functional.silu(p @ q.t()), [x, y])]
    if coarse_too:
        coarse = x.to(torch.bfloat16).to(torch.float64)
        cases += [(lambda t: t.sum(-1), [coarse.nan_to_num()]), (lambda t: torch.log_softmax(t, -1) * 3.0, [coarse])]
    return cases


def _bounds_both_ways(monkeypatch, reference, inputs, dtype: str, ways: dict) -> list:
    """accumulation_bounds of one reference under each way ({name: (module attribute, value)}), pairwise per output."""
    from opgate.verify import error_bounds

    truth = reference(*inputs)
    truths = [t.detach() for t in (truth if isinstance(truth, (tuple, list)) else [truth])]
    found = []
    for attribute, value in ways.values():
        monkeypatch.setattr(error_bounds, attribute, value)
        found.append(accumulation_bounds(reference, inputs, truths, dtype, seed=2))
    return list(zip(*found))


def _assert_same_bounds(first, second) -> None:
    assert first.fan_in == second.fan_in and len(first.elements) == len(second.elements)
    pairs = [(first.rmse, second.rmse), (first.quantile, second.quantile)]
    pairs += [(a.bound, b.bound) for a, b in zip(first.elements, second.elements)]
    assert all(abs(a - b) <= 1e-12 * abs(b) for a, b in pairs), pairs


def test_gathering_a_sparse_jacobian_row_first_gives_the_bounds_of_the_dense_one(monkeypatch):
    """_sampled_terms gathers a leaf's non-zero terms (and an intermediate's) before reducing them when its first
    sample's gradient is sparse: the same terms, so the same bounds, with non-finite inputs and intermediates too."""
    ways = {"every leaf gathered": ("SPARSE_FRACTION", 0), "none gathered": ("SPARSE_FRACTION", 10**18)}
    for reference, inputs in _bound_cases(3):
        for gathered, dense in _bounds_both_ways(monkeypatch, reference, inputs, "float32", ways):
            _assert_same_bounds(gathered, dense)


def test_the_gpu_path_of_the_sampled_terms_gives_the_bounds_of_the_cpu_path(monkeypatch):
    """On a GPU _sampled_terms reads all samples' figures back at once (_sampled_terms_on_device: dense products,
    non-finite ones zeroed unconditionally, the smallest quantum over every term). Run here on CPU tensors, it gives
    the CPU path's bounds, fan-in and finiteness, with non-finite inputs, intermediates and low-precision quanta."""
    from opgate.verify import error_bounds

    ways = {"cpu": ("_sampled_terms", error_bounds._sampled_terms),
            "device": ("_sampled_terms", error_bounds._sampled_terms_on_device)}
    for reference, inputs in _bound_cases(4, coarse_too=True):
        for cpu, device in _bounds_both_ways(monkeypatch, reference, inputs, "bfloat16", ways):
            _assert_same_bounds(cpu, device)


class _SlowBackward(torch.autograd.Function):
    """x * 2 whose backward sleeps: a reverse pass as slow as a depthwise convolution's double backward."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        import time

        time.sleep(0.05)
        return grad * 2


def test_an_output_whose_reverse_passes_are_slow_samples_fewer_elements(monkeypatch) -> None:
    from opgate.verify import error_bounds

    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    reference = lambda t: torch.cumsum(_SlowBackward.apply(t), -1)  # noqa: E731
    full, _ = _bound(reference, [x])
    assert full.thinned_from == 0 and len(full.elements) == 20  # 20 passes of 0.05 s: inside 8 s
    monkeypatch.setattr(error_bounds, "OUTPUT_PASSES_S", 0.2)  # under 4 passes fit: the fewest kept
    thin, _ = _bound(reference, [x])
    assert thin.thinned_from == 20 and len(thin.elements) == error_bounds.MIN_THINNED_SAMPLES
    by_index = {e.index: e for e in full.elements}
    assert all(by_index[e.index] == e for e in thin.elements)  # the same elements' bounds, fewer of them
    largest = max(full.elements, key=lambda e: abs(float(x.cumsum(-1).reshape(-1)[e.index])))
    assert largest.index in {e.index for e in thin.elements}
    assert thin.quantile <= full.quantile and thin.fan_in <= full.fan_in  # maxima over fewer elements


def test_thinning_keeps_a_largest_and_a_smallest_sample_and_fills_in_turn() -> None:
    from opgate.verify.error_bounds import _thinned

    assert _thinned(20, 12, 4, 0.01) == list(range(20))
    assert _thinned(20, 12, 4, 1.3) == [0, 1, 12, 13, 16, 17]  # 8 s / 1.3 s: 6 passes
    assert _thinned(20, 12, 4, 30.0) == [0, 1, 12, 16]  # never fewer than MIN_THINNED_SAMPLES
    assert _thinned(5, 5, 0, 5.0) == [0, 1, 2, 3]  # no largest or smallest apart from the random ones


class _SlowFirstBackward(torch.autograd.Function):
    """x * 2 whose first backward only is slow: a one-off cost (an allocator's first use, a preempted process)."""

    calls = 0

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        import time

        _SlowFirstBackward.calls += 1
        if _SlowFirstBackward.calls == 1:
            time.sleep(0.3)
        return grad * 2


def test_one_slow_first_pass_thins_nothing(monkeypatch) -> None:
    from opgate.verify import error_bounds

    monkeypatch.setattr(error_bounds, "OUTPUT_PASSES_S", 0.2)  # 20 passes of the first's 0.3 s would not fit
    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    bound, _ = _bound(lambda t: torch.cumsum(_SlowFirstBackward.apply(t), -1), [x])
    assert _SlowFirstBackward.calls >= 20 and bound.thinned_from == 0 and len(bound.elements) == 20
