"""Op-aware fuzzing: which cases to run, and the exact input tensors of each case.

A `Case` is plain data (dims, seed, value regime, memory layout) so it fits in a replay token and
crosses process boundaries; `make_inputs` turns it into tensors deterministically, so the parent
(truth, calibration) and the child (the implementation under test) see bit-identical inputs.

Case counts per budget (see `BUDGETS`, documented in docs/verify-method.md):
  declared  = min(product of declared sizes, declared_combos) x seeds
  edge      = edge_sizes_per_dim per fuzzed dim (one dim varied at a time)
  regimes   = regime_repeats per applicable regime (large, huge, tiny, constant_rows, ties, nonfinite)
  layouts   = layout_repeats per non-contiguous layout (transposed, strided) when an input allows it; at a
              declared size, that size's first values in other strides
  random    = random_combos mixed cases
For a two-dim op (softmax: M, N) that is 18 cases (quick), 44 (standard), about 100 (thorough).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import random
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

from opgate.core import dtypes as dt
from opgate.core.spec import Operator, Scalar, SpecError, TensorSpec

LARGE_CAP = 4096.0  # magnitude of the `large` regime in float32/bfloat16 (see _draw_float)
REGIMES = ("typical", "large", "huge", "tiny", "constant_rows", "ties", "nonfinite", "peaked", "mixed", "magnitude",
           "masked")
# `peaked`: one confident entry per row (+PEAK over the rest: softmax of it is ~1 - 1e-13), the case where a
# low-precision `1 - p` or `log(p)` intermediate loses everything. `mixed`: MIXED_HIGH next to O(1) values in a
# row, where `total - prefix` cancellation shows. `magnitude`: typical values scaled by Case.scale (the range
# bisection's probe; never planned by itself). `masked`: logits with whole runs of -inf as attention and padding
# masks make them (see _mask_rows), at a size past the block caps too.
PEAK = 30.0
MODERATE_MARGIN = 7.0  # the peaked regime's odd rows: exp(-7) ~ 1e-3 of the probability mass off the peak
MIXED_HIGH = 1e8
MASKED_ROWS = 4  # rows of the masked regime's large case: left padding, right padding, both, and a fully masked row
ROW_REGIMES = ("masked", "constant_rows")
# Row sizes above this get a masked case each (_add_masked_at_tile_sizes): row kernels tile columns in blocks of
# min(next_pow2(N), cap), caps of 1024 and more, so only larger rows span several tiles.
MASKED_TILE_SIZE = 1024  # regimes whose large case gets up to MASKED_ROWS rows (plan_cases)
# `mixed`: every second tensor input strided, the others contiguous: a kernel that reads one input through
# another's strides (vLLM's silu_and_mul, vllm-project/vllm#3324) is right whenever all inputs share a layout
LAYOUTS = ("contiguous", "transposed", "strided", "mixed")

# Which value regimes make sense for which kind. Bounded kinds (uniform with low/high, probability,
# index, integer, constant) keep their domain: scaling them would test inputs the op never sees.
_REGIMES_BY_KIND: dict[str, tuple[str, ...]] = {
    "normal": ("typical", "large", "huge", "tiny", "constant_rows", "ties", "nonfinite", "mixed", "magnitude"),
    "logits": ("typical", "large", "huge", "tiny", "constant_rows", "ties", "nonfinite", "peaked", "mixed",
               "magnitude", "masked"),
    "positive": ("typical", "large", "huge", "tiny", "constant_rows", "ties", "nonfinite", "mixed", "magnitude"),
    "uniform": ("typical", "constant_rows", "nonfinite"),
    "probability": ("typical", "constant_rows"),
    "index": ("typical",),
    "integer": ("typical",),
    "constant": ("typical",),
}

# Edge sizes in priority order: 1, small primes, just below/above powers of two, and sizes that are
# not multiples of common block sizes (1000: not a multiple of 16; 48: of 32; 96: of 64; 192: of 128;
# 1536: of 1024). `{p-1}`/`{p+1}` are filled in from the power of two at or above the largest declared size.
_EDGE_PRIORITY: tuple[int | str, ...] = (
    1, 3, "p-1", "p+1", 17, 1000, 48, 31, 33, 7, 96, 63, 65, 127, 129, 192, 2, 5, 13, 255, 257,
    97, 511, 513, 1023, 1025, 1536, 2047, 2049,
)


# Sizes past the block caps where row kernels switch paths (a looped store above 4096/16384/65536 columns, a
# second tile above a power of two): tried largest first, with the other dims at their smallest sizes, as far as
# the budget's max_elements allows. The plan's info says which ones it reached.
_BIG_SIZES: tuple[int, ...] = (65537, 65535, 16385, 16383, 8193, 4097, 4095)


@dataclass(frozen=True)
class BudgetPlan:
    """How many cases a budget buys. `max_elements` caps opgate-added cases (declared sizes always run)."""

    name: str
    declared_combos: int
    seeds: int
    edge_sizes_per_dim: int
    regime_repeats: int
    layout_repeats: int
    random_combos: int
    max_elements: int
    big_sizes_per_dim: int = 1  # sizes from _BIG_SIZES per fuzzed dim (each regime also meets the largest)
    big_size_cap: int = 65537  # the largest of _BIG_SIZES this budget tries


BUDGETS: dict[str, BudgetPlan] = {
    "quick": BudgetPlan("quick", declared_combos=4, seeds=1, edge_sizes_per_dim=3, regime_repeats=1,
                        layout_repeats=1, random_combos=0, max_elements=1 << 16, big_sizes_per_dim=1,
                        big_size_cap=16385),  # past the 16K cap; quick stays cheap under Triton's interpreter
    "standard": BudgetPlan("standard", declared_combos=8, seeds=2, edge_sizes_per_dim=8, regime_repeats=2,
                           layout_repeats=2, random_combos=4, max_elements=1 << 18, big_sizes_per_dim=2),
    "thorough": BudgetPlan("thorough", declared_combos=16, seeds=3, edge_sizes_per_dim=len(_EDGE_PRIORITY),
                           regime_repeats=4, layout_repeats=4, random_combos=24, max_elements=1 << 21,
                           big_sizes_per_dim=4),
}


@dataclass(frozen=True)
class Case:
    """One input configuration: sizes of every dim, a seed, a value regime and a memory layout."""

    dims: tuple[tuple[str, int], ...]
    seed: int
    regime: str = "typical"
    layout: str = "contiguous"
    origin: str = "declared"  # declared | edge | regime | layout | random | shrunk | replay | bisect
    scale: float = 0.0  # regime "magnitude" only: typical values multiplied by this

    @classmethod
    def make(cls, dims: Mapping[str, int], seed: int, regime: str = "typical", layout: str = "contiguous",
             origin: str = "declared", scale: float = 0.0) -> "Case":
        return cls(tuple(dims.items()), int(seed), regime, layout, origin, float(scale))

    @property
    def dims_dict(self) -> dict[str, int]:
        return dict(self.dims)

    @property
    def is_empty(self) -> bool:
        """A dimension of size 0: an empty input."""
        return any(size == 0 for _, size in self.dims)

    def label(self) -> str:
        sizes = ",".join(f"{k}={v}" for k, v in self.dims) or "scalar"
        regime = f"magnitude x{self.scale:.3g}" if self.regime == "magnitude" else self.regime
        return f"{sizes} seed={self.seed} {regime} {self.layout}"

    def values_key(self) -> tuple[Any, ...]:
        """What the case's input values are drawn from (_draw_inputs): not its layout or origin. Two cases with the
        same key hold the same values, so the same float64 truth, eager baseline and bound terms."""
        return (self.dims, self.seed, self.regime, self.scale)

    def with_dims(self, dims: Mapping[str, int], origin: str | None = None) -> "Case":
        return Case(tuple(dims.items()), self.seed, self.regime, self.layout, origin or self.origin, self.scale)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"dims": dict(self.dims), "seed": self.seed, "regime": self.regime,
                                "layout": self.layout, "origin": self.origin}
        if self.regime == "magnitude":
            data["scale"] = self.scale
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Case":
        regime = data.get("regime", "typical")
        layout = data.get("layout", "contiguous")
        if regime not in REGIMES or layout not in LAYOUTS:
            raise ValueError(f"unknown regime {regime!r} or layout {layout!r}")
        return cls.make({str(k): int(v) for k, v in dict(data["dims"]).items()}, int(data["seed"]),
                        regime, layout, data.get("origin", "declared"), float(data.get("scale", 0.0)))


# -- planning ---------------------------------------------------------------------------------------

def budget_plan(name: str) -> BudgetPlan:
    try:
        return BUDGETS[name]
    except KeyError:
        raise SpecError(f"--budget {name!r} is not one of {', '.join(BUDGETS)}") from None


def edge_sizes(declared: Sequence[int], cap: int) -> list[int]:
    """opgate's own sizes for one dim, most telling first, none above `cap` or already declared."""
    top = max(max(declared), 1)
    pow2 = 1 << max(0, math.ceil(math.log2(top)))
    sizes: list[int] = []
    for entry in _EDGE_PRIORITY:
        size = pow2 - 1 if entry == "p-1" else pow2 + 1 if entry == "p+1" else int(entry)
        if 1 <= size <= cap and size not in declared and size not in sizes:
            sizes.append(size)
    return sizes


def _edge_cap(declared: Sequence[int]) -> int:
    """Edge sizes near the declared ones; sizes past the common block caps come from _BIG_SIZES."""
    return max(2 * max(declared), 64)


def _spread(items: list[Any], n: int) -> list[Any]:
    """At most n items, first and last included, evenly spaced."""
    if len(items) <= n:
        return items
    if n == 1:
        return items[:1]
    return [items[round(i * (len(items) - 1) / (n - 1))] for i in range(n)]


def _largest_input(op: Operator, dims: Mapping[str, int]) -> int:
    full = op.with_derived(dims)
    sizes = [math.prod(t.concrete_shape(full)) for t in op.tensor_inputs]
    return max(sizes, default=1)


def innermost_dims(op: Operator) -> list[str]:
    """Fuzzed dims that are the last dim of some tensor input, the first input's first. A dim that is last only in
    index inputs (cross-entropy's labels (M,) beside logits (M, V); an embedding's token ids) counts tokens or rows,
    not the columns a row kernel loops over: 16385 of them are 16385 programs, no new code path, and minutes
    under Triton's interpreter."""
    found: list[str] = []
    for spec in op.tensor_inputs:
        if spec.shape and isinstance(spec.shape[-1], str):
            dim = spec.shape[-1]
            if all(s.kind in ("index", "integer") for s in op.tensor_inputs if s.shape and s.shape[-1] == dim):
                continue
            if dim in op.dims and dim not in op.exact_dims and dim not in found:
                found.append(dim)
    return found


def applicable_regimes(op: Operator) -> list[str]:
    """Regimes (besides typical) some input of the op can take."""
    found = []
    for regime in REGIMES[1:]:
        if regime == "magnitude":
            continue
        if regime in ("nonfinite", "masked") and not op.propagates_nonfinite:
            continue
        if any(_regime_applies(t, regime) for t in op.tensor_inputs):
            found.append(regime)
    return found


def _with_more_rows(op: Operator, dims: Mapping[str, int], fuzzed: Sequence[str], max_elements: int) -> dict[str, int]:
    """`dims` with its first outer fuzzed dim (not the last dim of any input) at up to MASKED_ROWS, within the cap."""
    inner = set(innermost_dims(op))
    for dim in fuzzed:
        if dim in inner or dims.get(dim, 0) >= MASKED_ROWS:
            continue
        for rows in range(MASKED_ROWS, dims.get(dim, 0), -1):
            wider = {**dims, dim: rows}
            if _largest_input(op, wider) <= max_elements:
                return wider
        break
    return dict(dims)


def _add_masked_at_tile_sizes(op: Operator, cases: Sequence[Case], smallest: Mapping[str, int],
                              fuzzed: Sequence[str], max_elements: int, add: Any) -> None:
    """A masked case at every size of a row dim the plan reaches past MASKED_TILE_SIZE (declared, edge and big
    sizes), not only at the one size each regime gets: a kernel's tile depends on the size (BLOCK =
    min(next_pow2(N), cap)), and a row whose leading tile is wholly masked is where an online softmax's running max
    is still -inf (exp(-inf - -inf) = NaN: a cross-entropy NaN when a row's first 32768 logits are masked)."""
    for dim in innermost_dims(op):
        covered = {c.dims_dict.get(dim) for c in cases if c.regime == "masked"}
        sizes = sorted({c.dims_dict[dim] for c in cases if dim in c.dims_dict} - covered)
        for size in sizes:
            if size > MASKED_TILE_SIZE:
                add(_with_more_rows(op, {**smallest, dim: size}, fuzzed, max_elements), "masked", "contiguous",
                    "regime")


def applicable_layouts(op: Operator) -> list[str]:
    layouts = []
    for layout in LAYOUTS[1:]:
        takers = sum(_layout_applies(t, layout) for t in op.tensor_inputs)
        if takers >= (2 if layout == "mixed" else 1):
            layouts.append(layout)
    return layouts


def _regime_applies(spec: TensorSpec, regime: str) -> bool:
    if spec.dtype is not None and not dt.is_float(spec.dtype):
        return regime == "typical"
    return regime in _REGIMES_BY_KIND.get(spec.kind, ("typical",))


def _layout_applies(spec: TensorSpec, layout: str) -> bool:
    if spec.contiguous or layout == "contiguous":
        return layout == "contiguous"
    ndim = len(spec.shape)
    return ndim >= 2 if layout == "transposed" else ndim >= 1  # strided and mixed: any rank


def first_with_same_values(cases: Sequence[Case]) -> list[int]:
    """For each case, the index of the first case holding the same values (Case.values_key): itself, or the declared
    case whose values a layout case holds in other strides. Calibration computes a truth, baseline, statistics and
    bound terms once per such first case."""
    first: dict[tuple[Any, ...], int] = {}
    return [first.setdefault(case.values_key(), k) for k, case in enumerate(cases)]


def case_input_elements(op: Operator, case: Case) -> int:
    """The elements of a case's tensor inputs together (what a float64 reference, and a call where the size sets
    the cost, scale with); a shape that cannot be worked out here counts as the product of the case's dims."""
    try:
        dims = op.with_derived({k: v for k, v in case.dims if k not in op.derived_dims})
        return sum(math.prod(spec.concrete_shape(dims)) for spec in op.tensor_inputs)
    except Exception:
        return math.prod(v for _, v in case.dims)


def declared_firsts(cases: Sequence[Case]) -> set[int]:
    """The index of each declared size's first case (its first seed): what a time budget always runs and a
    calibration never defers. A declared size's later seeds run the same code path on other values, so they rank by
    cost with opgate's own sizes: on a slow backend they are capped before the tails, regimes and layouts that reach
    other paths (fla_kl_div.grad on 2 cores: the second seed of its four 8192-row sizes cost 24 s of each 25 s check
    under Triton's interpreter, and as much again in bound terms)."""
    firsts: dict[tuple[tuple[str, int], ...], int] = {}
    for k, case in enumerate(cases):
        if case.origin == "declared":
            firsts.setdefault(case.dims, k)
    return set(firsts.values())


def plan_cases(op: Operator, budget: str = "standard", seed: int = 0) -> list[Case]:
    """The cases one budget runs for `op`, in a fixed order; the same inputs give the same plan."""
    plan = budget_plan(budget)
    dim_names = list(op.dims)
    declared = [dict(zip(dim_names, combo)) for combo in itertools.product(*(op.dims[d] for d in dim_names))]
    combos = _spread(declared, plan.declared_combos) or [{}]
    fuzzed = [d for d in dim_names if d not in op.exact_dims]
    edges = {d: edge_sizes(op.dims[d], _edge_cap(op.dims[d])) for d in fuzzed}
    cases: list[Case] = []
    seen: set[tuple[Any, ...]] = set()
    next_seed = itertools.count(seed)
    declared_seed: dict[tuple[tuple[str, int], ...], int] = {}  # the first seed of each declared size

    def add(dims: Mapping[str, int], regime: str, layout: str, origin: str, capped: bool = True) -> bool:
        if capped and _largest_input(op, dims) > plan.max_elements:
            return False
        if origin != "declared" and not _indices_drawable(op, dims):
            return False  # opgate's own size left an index input no value (V = 0 under high="V")
        key = (tuple(dims.items()), regime, layout, origin if origin == "declared" else "")
        if key in seen and origin != "declared":
            return False
        seen.add(key)
        drawn = next(next_seed)  # drawn even when unused: the cases after keep their seeds
        if origin == "declared":
            declared_seed.setdefault(tuple(dims.items()), drawn)
        # a layout case at a declared size holds that size's first values in its own strides: the comparison with
        # the contiguous case is then about the layout alone, and its truth and bound terms (the largest size's,
        # most of a large gradient twin's calibration) are computed once (calibrate.py)
        if origin == "layout" and regime == "typical":
            drawn = declared_seed.get(tuple(dims.items()), drawn)
        cases.append(Case.make(dims, drawn, regime, layout, origin))
        return True

    for _ in range(plan.seeds):
        for combo in combos:
            add(combo, "typical", "contiguous", "declared", capped=False)

    for dim in fuzzed:
        added = 0
        for i, size in enumerate(edges[dim]):
            if added >= plan.edge_sizes_per_dim:
                break
            for shift in range(len(combos)):
                base = dict(combos[(i + shift) % len(combos)])
                base[dim] = size
                if add(base, "typical", "contiguous", "edge"):
                    added += 1
                    break

    # Empty tensors (an empty batch reaches every serving kernel): one case per fuzzed outer dim at size 0,
    # dropped at calibration when the reference refuses it. Innermost dims are left out: a reduction over zero
    # elements is degenerate, and PyTorch's own amax raises there.
    inner = innermost_dims(op)
    for dim in fuzzed:
        if 0 not in op.dims[dim] and dim not in inner:
            base = dict(combos[0])
            base[dim] = 0
            add(base, "typical", "contiguous", "edge")

    # Past the common block caps: the innermost dims (the last dim of some input, what a row kernel loops or
    # tiles over), each alone, the other fuzzed dims at 1 (exact dims at their smallest). Outer dims are left
    # out: 65537 rows are 65537 programs, slow under Triton's interpreter and no new code path.
    smallest = {d: (1 if d in fuzzed else min((s for s in op.dims[d] if s > 0), default=0)) for d in dim_names}
    big_cases: list[dict[str, int]] = []
    for dim in innermost_dims(op):
        taken = 0
        for size in _BIG_SIZES:
            if taken >= plan.big_sizes_per_dim:
                break
            if size <= max(op.dims[dim]) or size in op.dims[dim] or size > plan.big_size_cap:
                continue
            base = {**smallest, dim: size}
            if add(base, "typical", "contiguous", "edge"):
                big_cases.append(base)
                taken += 1

    def varied(i: int) -> dict[str, int]:
        """Alternate declared sizes and a tail size (2^k - 1) on the innermost fuzzed dim."""
        base = dict(combos[(i // 2) % len(combos)])
        if i % 2 == 1 and fuzzed:
            last = fuzzed[-1]
            tails = [s for s in edges[last] if s > 1] or edges[last]
            tail = next((s for s in tails if s % 2 == 1 and s > 3), tails[0] if tails else base[last])
            base[last] = tail
        return base

    # Each regime also meets the multi-tile path: at the largest size past a block cap that fits, else the
    # largest declared combination.
    largest = big_cases[0] if big_cases else max(combos, key=lambda d: _largest_input(op, d))
    for regime in applicable_regimes(op):
        for i in range(plan.regime_repeats):
            if not add(varied(i), regime, "contiguous", "regime"):
                add(combos[0], regime, "contiguous", "regime", capped=False)
        # Regimes whose rows differ in kind run the large size with as many rows as fit: masks differ row by row
        # (left padding, right padding, a fully masked row), and a constant row's rounding error is systematic
        # and depends on its one value (per-lane float16 partial sums of 16385 equal values err 10-50x float16's
        # own rounding of the total for most values, not for all), so one row is one coin toss.
        add(_with_more_rows(op, largest, fuzzed, plan.max_elements) if regime in ROW_REGIMES else largest, regime,
            "contiguous", "regime")

    for layout in applicable_layouts(op):
        for i in range(plan.layout_repeats):
            if not add(varied(i), "typical", layout, "layout"):
                add(combos[0], "typical", layout, "layout", capped=False)

    rng = random.Random(seed * 7919 + 17)
    regimes = ["typical"] + applicable_regimes(op)
    layouts = ["contiguous"] + applicable_layouts(op)
    for _ in range(plan.random_combos * 4):  # tries: some draws exceed max_elements
        if sum(c.origin == "random" for c in cases) >= plan.random_combos:
            break
        dims = {d: rng.choice(list(op.dims[d]) + (edges.get(d) or [])) for d in dim_names}
        add(dims, rng.choice(regimes), rng.choice(layouts), "random")
    if "masked" in applicable_regimes(op):
        _add_masked_at_tile_sizes(op, cases, smallest, fuzzed, plan.max_elements, add)
    return cases


# -- generation -------------------------------------------------------------------------------------

@dataclass
class GeneratedInputs:
    """One case's arguments, in declaration order (tensors and scalars).

    values: tensors in their dtype, contiguous (what the baseline sees).
    laid_out: the same values in the case's memory layout (what implementations receive).
    truth: float tensors upcast to float64 (what the truth is computed from).
    """

    values: list[Any]
    laid_out: list[Any]
    truth: list[Any]
    layout_applied: list[str] = field(default_factory=list)


def resolve_dtype(spec: TensorSpec, dtype_under_test: str) -> str:
    return spec.dtype or dtype_under_test


def _bound(value: float | str | None, dims: Mapping[str, int], default: float) -> float:
    if value is None:
        return default
    if isinstance(value, str):
        return float(dims[value])
    return float(value)


_DEVICE = "cpu"  # where make_inputs draws (inputs_on): the CPU everywhere but the GPU runtime stage


@contextlib.contextmanager
def inputs_on(device: str) -> Iterator[None]:
    """Inside: make_inputs draws on `device` with a generator of that device. The values differ from the CPU's
    (another random stream), so only for checks that need realistic inputs, not the plan's exact ones: the
    runtime stage times production sizes (16384 x 4099 floats took seconds per dtype to draw on the host)."""
    global _DEVICE
    previous, _DEVICE = _DEVICE, device
    try:
        yield
    finally:
        _DEVICE = previous


def _generator(seed: int, index: int) -> Any:
    import torch

    return torch.Generator(device=_DEVICE).manual_seed((seed * 1_000_003 + index * 7_919) % (2**63 - 1))


def _draw_float(spec: TensorSpec, shape: tuple[int, ...], dims: Mapping[str, int], regime: str, dtype: str,
                gen: Any, scale: float = 0.0) -> Any:
    """A float64 tensor of the kind's distribution, shaped by the regime, before rounding to dtype."""
    import torch

    kind = spec.kind
    f64 = torch.float64
    if kind == "uniform" or (kind == "positive" and (spec.low is not None or spec.high is not None)):
        low = _bound(spec.low, dims, -1.0 if kind == "uniform" else 0.5)
        high = _bound(spec.high, dims, 1.0 if kind == "uniform" else 2.0)
        base = torch.rand(shape, generator=gen, dtype=f64) * (high - low) + low
    elif kind == "positive":
        base = torch.exp(0.5 * torch.randn(shape, generator=gen, dtype=f64))
    elif kind == "logits":
        base = 3.0 * torch.randn(shape, generator=gen, dtype=f64)
    elif kind == "probability":
        logits = torch.randn(shape, generator=gen, dtype=f64)
        base = torch.softmax(logits, dim=-1) if len(shape) else torch.sigmoid(logits)
    elif kind in ("index", "integer"):
        low, high = _int_bounds(spec, dims, dtype)
        base = torch.randint(int(low), int(high), shape, generator=gen).to(f64)
    elif kind == "constant":
        base = torch.full(shape, _bound(spec.low if spec.low is not None else spec.high, dims, 1.0), dtype=f64)
    else:
        base = torch.randn(shape, generator=gen, dtype=f64)

    if regime == "typical" or not _regime_applies(spec, regime) or not dt.is_float(dtype):
        return base
    positive = kind == "positive"
    if regime in ("large", "huge", "tiny"):
        scale = {
            # exp() overflows above 88.7 (float32 math) and squares/sums overflow float16 above 256: the
            # regime reaches both (sqrt(max)/4 = 64 in float16, 4096 in wider types) but stays far from the
            # float32 range, where any reduction overflows in an order-dependent way (that is `huge`).
            "large": min(math.sqrt(dt.max_finite(dtype)) / 4, LARGE_CAP),
            # near the range: max/64 keeps a margin for the op's own growth (sums of a few terms)
            "huge": dt.max_finite(dtype) / 64,
            # straddles the smallest normal: about 40% of the values are subnormal in `dtype`
            "tiny": dt.smallest_normal(dtype) * 2,
        }[regime]
        draw = torch.randn(shape, generator=gen, dtype=f64)
        values = (draw.abs() if positive else draw) * scale
        limit = dt.max_finite(dtype) / 2
        return values.clamp(-limit, limit)
    if regime == "constant_rows":
        if len(shape) == 0:
            return base
        return base[..., :1].expand(shape).clone()
    if regime == "ties":
        steps = torch.randint(1 if positive else -2, 3, shape, generator=gen).to(f64)
        return steps * 0.5
    if regime in ("nonfinite", "masked"):
        return base  # injection and masking happen in make_inputs
    if regime == "magnitude":
        limit = dt.max_finite(dtype) / 2
        return (base * scale).clamp(-limit, limit)
    if regime == "peaked":
        if len(shape) == 0 or shape[-1] == 0:
            return base
        peak = torch.randint(0, shape[-1], shape[:-1] + (1,), generator=gen)
        # even rows saturated (+PEAK), odd rows moderately confident: the peak set MODERATE_MARGIN above the
        # logsumexp of the rest of its row, so 1 - p = exp(-MODERATE_MARGIN) ~ 1e-3, a loss a float16/bfloat16
        # intermediate rounds away but no absolute budget does
        others = base.scatter(-1, peak, torch.full(peak.shape, -math.inf, dtype=f64))
        moderate = (others.logsumexp(dim=-1, keepdim=True) + MODERATE_MARGIN - base.gather(-1, peak)
                    if shape[-1] > 1 else torch.zeros(peak.shape, dtype=f64))
        odd = (torch.arange(moderate.numel()) % 2 == 1).reshape(moderate.shape)
        return base.scatter_add(-1, peak, torch.where(odd, moderate, torch.full_like(moderate, PEAK)))
    if regime == "mixed":
        if len(shape) == 0 or shape[-1] == 0:
            return base
        # about one element in eight per row at MIXED_HIGH (sign kept), the rest O(1); dtypes whose range is
        # smaller (float16) saturate through _to_dtype's clamp
        high = torch.rand(shape, generator=gen) < 0.125
        high[..., 0] = True  # every row meets the cancellation, short rows included
        high_value = min(MIXED_HIGH, dt.max_finite(dtype) / 64)
        if spec.max_magnitude is None or spec.max_magnitude >= high_value:
            return torch.where(high, torch.sign(base) * high_value + base, base)
        # A declared max_magnitude is the caller's contract: the high values sit at it, not at 1e8. The kind's
        # default promise does not cap them (the regime exceeds it on purpose: total - prefix cancellation shows
        # there). cut-cross-entropy's bfloat16 gradient, |x| <= 16 declared, failed a componentwise bound by
        # 1.2-3.5x only with 1e8 next to O(1), where eager was as far from the truth (sixtieth session).
        promise = float(spec.max_magnitude)
        return torch.where(high, torch.sign(base) * promise, base).clamp(-promise, promise)
    return base


def _indices_drawable(op: Operator, dims: Mapping[str, int]) -> bool:
    """Every non-empty index/integer input has a value to draw at these sizes: an empty table (V = 0) cannot be
    indexed, so a size-0 case of a bound's dim is only a case where the indices are empty too."""
    sizes = op.with_derived({k: v for k, v in dims.items() if k not in op.derived_dims})
    for spec in op.tensor_inputs:
        if spec.kind not in ("index", "integer") or math.prod(spec.concrete_shape(sizes)) == 0:
            continue
        try:
            _int_bounds(spec, sizes, resolve_dtype(spec, "int64"))
        except SpecError:
            return False
    return True


def _int_bounds(spec: TensorSpec, dims: Mapping[str, int], dtype: str) -> tuple[float, float]:
    """[low, high) for integer draws; defaults: index from 0, integer over the int8-sized range."""
    if dtype == "bool":
        return 0.0, 2.0
    lo_default = 0.0 if spec.kind == "index" else max(dt.min_finite(dtype), -128.0)
    hi_default = min(dt.max_finite(dtype), 127.0) + 1.0
    low = _bound(spec.low, dims, lo_default)
    high = _bound(spec.high, dims, hi_default)
    if high <= low:
        bound = ", ".join(f"{d}={dims[d]}" for d in (spec.low, spec.high) if isinstance(d, str) and d in dims)
        raise SpecError(f"input {spec.name!r}: low={spec.low!r} must be below high={spec.high!r}, but its range "
                        f"[{low:g}, {high:g}) is empty{f' at {bound}' if bound else ''}; declare sizes where it "
                        "holds (an empty table cannot be indexed)")
    return low, high


def _to_dtype(values: Any, dtype: str) -> Any:
    import torch

    target = dt.torch_dtype(dtype)
    if dt.is_float(dtype):
        limit = dt.max_finite(dtype)
        if values.is_floating_point() and values.numel():
            low, high = torch.aminmax(values)  # one pass; NaN anywhere makes both NaN and takes the full path
            if -limit <= float(low) and float(high) <= limit:
                return values.to(target)  # nothing to saturate (isfinite, clamp and where were 8 s of a 99 s plan)
        finite = torch.isfinite(values)
        # keep the injected NaN/Inf, saturate the rest: a draw must never overflow by itself
        clamped = torch.where(finite, values.clamp(-limit, limit), values)
        return clamped.to(target)
    if dtype == "bool":
        return (values != 0)
    lo, hi = dt.min_finite(dtype), dt.max_finite(dtype)
    return torch.nan_to_num(values).round().clamp(lo, hi).to(target)


def _inject_nonfinite(tensor: Any, gen: Any, positive: bool) -> Any:
    """A NaN, a +Inf and (unless the kind is positive) a -Inf at seeded positions."""
    import torch

    flat = tensor.reshape(-1).clone()
    specials = [math.nan, math.inf] if positive else [math.nan, math.inf, -math.inf]
    count = min(len(specials), flat.numel())
    if count == 0:
        return tensor
    positions = torch.randperm(flat.numel(), generator=gen)[:count]
    for pos, value in zip(positions.tolist(), specials):
        flat[pos] = value
    return flat.reshape(tensor.shape)


def _mask_rows(tensor: Any, gen: Any, full_row: bool) -> Any:
    """Runs of -inf along the last dim, as attention and padding masks make them, row by row (leading dims
    flattened): even rows a left padding of P columns (P the largest power of two <= N/2, so the first tile of
    any kernel with tiles up to P is wholly masked), odd rows a right padding of P (a causal or padding mask);
    every partial row also gets aligned runs of a power-of-two length T (a random tile size) over about a third
    of its T-blocks (never the block at the unpadded end), and keeps at least one finite value. With `full_row`
    and more than one row, the last row is all -inf (a fully masked query)."""
    import torch

    if tensor.dim() == 0 or tensor.shape[-1] == 0 or tensor.numel() == 0:
        return tensor
    n = int(tensor.shape[-1])
    rows = tensor.reshape(-1, n).clone()
    count = int(rows.shape[0])
    pad = 1 << ((n // 2).bit_length() - 1) if n >= 2 else 0
    tiles = [1 << k for k in range(4, 14) if (1 << k) <= n // 2] or ([1] if n >= 2 else [])
    cols = torch.arange(n)
    for r in range(count):
        if full_row and count > 1 and r == count - 1:
            rows[r] = -math.inf
            continue
        masked = torch.zeros(n, dtype=torch.bool)
        if pad:
            masked |= (cols < pad) if r % 2 == 0 else (cols >= n - pad)
        if tiles:
            tile = tiles[int(torch.randint(0, len(tiles), (1,), generator=gen))]
            blocks = (n + tile - 1) // tile
            chosen = torch.rand(blocks, generator=gen) < 1 / 3
            chosen[blocks - 1 if r % 2 == 0 else 0] = False  # the block at the unpadded end stays unmasked
            masked |= chosen[cols // tile]
        if bool(masked.all()):
            masked[n - 1 if r % 2 == 0 else 0] = False
        rows[r] = torch.where(masked, torch.full_like(rows[r], -math.inf), rows[r])
    return rows.reshape(tensor.shape)


def apply_layout(tensor: Any, layout: str) -> Any:
    """Same values, different strides. Strided copies interleave poison, so a kernel that ignores
    strides reads NaN (floats) or the dtype's maximum (ints) instead of a plausible neighbour."""
    import torch

    if layout == "transposed" and tensor.dim() >= 2:
        return tensor.transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout == "strided" and tensor.dim() >= 1:
        shape = tuple(tensor.shape)
        wide = shape[:-1] + (2 * shape[-1],)
        device = tensor.device  # build the wide buffer where the tensor lives (a GPU run passes CUDA tensors)
        if tensor.dtype.is_floating_point:
            buffer = torch.full(wide, math.nan, dtype=tensor.dtype, device=device)
        elif tensor.dtype == torch.bool:
            buffer = torch.ones(wide, dtype=tensor.dtype, device=device)
        else:
            buffer = torch.full(wide, torch.iinfo(tensor.dtype).max, dtype=tensor.dtype, device=device)
        buffer[..., ::2] = tensor
        return buffer[..., ::2]
    return tensor


_SHARED: dict[tuple[str, str, str], GeneratedInputs] | None = None


@contextlib.contextmanager
def inputs_generated_once() -> Iterator[None]:
    """Inside: make_inputs returns the same GeneratedInputs for the same (op, case, dtype) instead of drawing
    them again. For the parent's calibration, where the truth, the eager baseline, the perturbation and the
    accumulation bound all read one case's inputs and none writes to them (the implementations, which may,
    run in their own processes)."""
    global _SHARED
    previous, _SHARED = _SHARED, {}
    try:
        yield
    finally:
        _SHARED = previous


# (operator, spec file, id of the reference, case, dtype) -> (the reference, whether the masked regime's fully masked
# rows have a defined truth). The reference is held so its id cannot be reused by another function while the entry
# lives: a freed logsumexp lambda's id, taken by a softmax lambda of an operator of the same name in one process,
# gave the softmax fully masked rows (found as an order-dependent test failure under pytest-xdist).
_FULL_ROWS_DEFINED: dict[tuple[Any, ...], tuple[Any, bool]] = {}


def make_inputs(op: Operator, case: Case, dtype: str) -> GeneratedInputs:
    """The arguments of `case` for the dtype under test; identical in every process for the same case."""
    if _SHARED is None:
        return _regime_inputs(op, case, dtype)
    key = (op.name, case.label() + repr(sorted(case.to_dict().items())), dtype)
    if key not in _SHARED:
        _SHARED[key] = _regime_inputs(op, case, dtype)
    return _SHARED[key]


def _regime_inputs(op: Operator, case: Case, dtype: str) -> GeneratedInputs:
    if case.regime != "masked":
        return _make_inputs(op, case, dtype, full_rows=False)
    return _make_inputs(op, case, dtype, full_rows=_full_rows_defined(op, case, dtype))


def _full_rows_defined(op: Operator, case: Case, dtype: str) -> bool:
    """Whether the float64 reference gives a defined value (no NaN) with fully masked rows in the inputs.

    Softmax of an all -inf row is 0/0: PyTorch says NaN, FlashAttention 0, the limit of a constant row 1/N; none is
    the truth, so such rows are left out there. A logsumexp or a row max gives -inf: defined, and judged."""
    import torch

    key = (op.name, str(op.spec_file), id(op.reference), case, dtype)
    cached = _FULL_ROWS_DEFINED.get(key)
    if cached is None or cached[0] is not op.reference:
        generated = _make_inputs(op, case, dtype, full_rows=True)
        try:
            with torch.no_grad():
                result = op.reference(*generated.truth)
            outputs = list(result) if isinstance(result, (tuple, list)) else [result]
            defined = not any(isinstance(o, torch.Tensor) and o.dtype.is_floating_point and bool(o.isnan().any())
                              for o in outputs)
        except Exception:  # the reference refuses them: no fully masked rows
            defined = False
        if len(_FULL_ROWS_DEFINED) > 256:
            _FULL_ROWS_DEFINED.clear()
        _FULL_ROWS_DEFINED[key] = (op.reference, defined)
    return _FULL_ROWS_DEFINED[key][1]


def _make_inputs(op: Operator, case: Case, dtype: str, full_rows: bool) -> GeneratedInputs:
    import torch

    if _DEVICE != "cpu":
        with torch.device(_DEVICE):  # factory calls (rand, randn, full ...) default to the generator's device
            return _draw_inputs(op, case, dtype, full_rows)
    return _draw_inputs(op, case, dtype, full_rows)


def _draw_inputs(op: Operator, case: Case, dtype: str, full_rows: bool) -> GeneratedInputs:
    import torch

    dims = op.with_derived({k: v for k, v in case.dims if k not in op.derived_dims})
    values: list[Any] = []
    laid_out: list[Any] = []
    truth: list[Any] = []
    applied: list[str] = []
    injected = False
    mixed_takers = 0
    tensors: dict[str, Any] = {}
    for index, inp in enumerate(op.inputs):
        if isinstance(inp, Scalar):
            values.append(inp.value)
            laid_out.append(inp.value)
            truth.append(inp.value)
            applied.append("scalar")
            continue
        in_dtype = resolve_dtype(inp, dtype)
        shape = inp.concrete_shape(dims)
        gen = _generator(case.seed, index)
        raw = _draw_float(inp, shape, dims, case.regime, in_dtype, gen, case.scale)
        if (case.regime == "nonfinite" and not injected and dt.is_float(in_dtype)
                and _regime_applies(inp, "nonfinite")):
            raw = _inject_nonfinite(raw, gen, positive=inp.kind == "positive")
            injected = True
        if case.regime == "masked" and dt.is_float(in_dtype) and _regime_applies(inp, "masked"):
            raw = _mask_rows(raw, _generator(case.seed, index + 101), full_rows)
        tensor = _to_dtype(raw, in_dtype)
        target = op.hits_target(inp)
        if target is not None:
            tensor = _hit_argmax(tensor, tensors.get(target), gen, case.regime == "peaked")
        tensors[inp.name] = tensor
        values.append(tensor)
        layout = case.layout if _layout_applies(inp, case.layout) else "contiguous"
        if layout == "mixed":  # the first taker contiguous, the second strided, ...
            layout = "strided" if mixed_takers % 2 == 1 else "contiguous"
            mixed_takers += 1
        laid_out.append(apply_layout(tensor, layout))
        applied.append(layout)
        truth.append(tensor.to(torch.float64) if tensor.dtype.is_floating_point else tensor.clone())
    return GeneratedInputs(values, laid_out, truth, applied)


def _hit_argmax(indices: Any, target: Any, gen: Any, peaked: bool = False) -> Any:
    """Set about half of `indices` to the argmax (last dim) of `target` at the same leading position.

    peaked: rows 0, 1 of every 4 hit, rows 2, 3 miss, so each of the regime's saturated (even) and moderate (odd)
    rows is met both ways. The target must be generated first (declare it before the index input)."""
    import torch

    if target is None or indices.numel() == 0 or target.shape[-1] == 0:
        return indices
    if tuple(target.shape[:-1]) != tuple(indices.shape):
        raise SpecError(f"hits=: index shape {list(indices.shape)} is not the target's {list(target.shape)} "
                        "without its last dim")
    argmax = torch.nan_to_num(target.to(torch.float64), nan=-math.inf).argmax(dim=-1).to(indices.dtype)
    if peaked:
        chosen = (torch.arange(indices.numel()) % 4 < 2).reshape(indices.shape)
    else:
        chosen = torch.rand(indices.shape, generator=gen) < 0.5
    return torch.where(chosen, argmax, indices)


def case_counts(op: Operator) -> dict[str, int]:
    """How many cases each budget runs for this op (what the docs table shows)."""
    return {name: len(plan_cases(op, name)) for name in BUDGETS}
