"""Make Triton's CPU interpreter compute bfloat16 the way compiled Triton does.

Triton's interpreter (`triton/runtime/interpreter.py`, TRITON_INTERPRET=1) stores bfloat16 as 16-bit
patterns in NumPy uint16 arrays, and its builder applies NumPy's integer operations to them: `x + y`
adds bit patterns, `tl.maximum` orders negative numbers backwards, `tl.sum` sums integers, `tl.dot`
multiplies integers. Compiled Triton lowers bfloat16 arithmetic to the GPU's bfloat16 instructions or,
where there are none, widens to float32, computes and rounds back to nearest even: the same answer,
since float32 carries more than 2p+2 = 18 bits for bfloat16's p = 8 and double rounding is then
innocuous for + - * / sqrt (Figueroa, "When is double rounding innocuous?", SIGNUM 1995).

opgate wraps each affected builder operation: bfloat16 operands are widened to float32 exactly (a 16-bit
shift), the interpreter's own float32 operation runs, and a bfloat16 result is rounded to nearest even.
A fused multiply-add rounds once, so it is computed in float64 with an exact error term and rounded to
odd into float32 before the final rounding (Boldo & Melquiond, "Emulation of FMA and correctly rounded
sums: proved algorithms using rounding to odd", IEEE Trans. Computers 57(4), 2008).

Every fix is probed first on small vectors with known answers; an operation this Triton already gets
right is left alone, and an operation whose replacement still fails its probe is not installed but
reported by `interpreter_bf16_limitations()`, so a bfloat16 failure there can be reported as the
interpreter's limitation (the GPU run decides) rather than as the kernel's bug.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

# How reductions and scans differ from a GPU after the fix (they are not wrong, only more accurate).
REDUCTION_NOTE = ("bfloat16 tl.sum/tl.cumsum/tl.cumprod run in float32 over the whole block and round once; "
                  "compiled Triton combines in bfloat16 (each tree step rounded; it upcasts only for "
                  "tl.sum(x, dtype=tl.float32), triton-lang/triton PRs 5763, 6974), so the interpreter is at least "
                  "as accurate as the GPU here: the GPU run judges a bfloat16 accumulator")

_BINARY_OPS = ("create_fadd", "create_fsub", "create_fmul", "create_fdiv", "create_frem", "create_precise_divf",
               "create_approx_divf", "create_minimumf", "create_minnumf", "create_maximumf", "create_maxnumf",
               "create_fcmpOLT", "create_fcmpOGT", "create_fcmpOLE", "create_fcmpOGE", "create_fcmpOEQ",
               "create_fcmpONE", "create_fcmpULT", "create_fcmpUGT", "create_fcmpULE", "create_fcmpUGE",
               "create_fcmpUEQ", "create_fcmpUNE")
_UNARY_OPS = ("create_fneg", "create_exp", "create_exp2", "create_log", "create_log2", "create_sin", "create_cos",
              "create_sqrt", "create_precise_sqrt", "create_rsqrt", "create_floor", "create_ceil", "create_erf")

# Probe operands: exact in float32, one rounding case (1 + 0.75 ulp of bfloat16 at 1), -0 against +0.
_PROBE_A = (1.5, -2.25, 1.0, 0.0, -0.0, 3.0, -0.75, 2.0)
_PROBE_B = (-0.5, 1.25, 2.0**-8 + 2.0**-9, -1.0, 0.0, 3.0, 0.375, -4.0)
_PROBE_C = (0.25, 1.0, -1.0, 2.0**-9, 0.0, -2.0, 1.0, 0.5)


# ---------------------------------------------------------------- bit-level conversions

def rtne_float32_to_bfloat16_bits(data: Any) -> Any:
    """Round float32 values to bfloat16 bit patterns, to nearest even, NaN kept quiet (as hardware does)."""
    import numpy as np

    bits = np.ascontiguousarray(data, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    is_nan = (bits & 0x7FFFFFFF) > 0x7F800000
    quiet = ((bits >> 16) | 0x0040).astype(np.uint16)
    return np.where(is_nan, quiet, rounded).reshape(np.shape(data))


def bfloat16_bits_to_float32(data: Any) -> Any:
    """Widen bfloat16 bit patterns to float32 exactly (subnormals included): shift the bits by 16."""
    import numpy as np

    bits = np.ascontiguousarray(data).view(np.uint16).astype(np.uint32) << 16
    return bits.view(np.float32).reshape(np.shape(data))


def float64_to_bfloat16_bits(value: Any, error: Any = None) -> Any:
    """Round float64 values (plus an optional exact error term: the true value is value + error) to
    bfloat16 bit patterns with a single rounding to nearest even: round to odd into float32 first
    (exact when float32 has >= 2p+2 bits, Boldo & Melquiond 2008), then to nearest even into bfloat16."""
    import numpy as np

    wide = np.asarray(value, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        narrow = wide.astype(np.float32)
        residue = wide - narrow.astype(np.float64)  # exact: both are within one float32 ulp
        if error is not None:
            residue = residue + np.asarray(error, dtype=np.float64)  # the sign survives rounding
    bits = np.ascontiguousarray(narrow).view(np.uint32).copy()
    inexact = (residue != 0) & np.isfinite(narrow)
    even = (bits & 1) == 0
    outward = (residue > 0) == (wide > 0)  # the true magnitude is above the float32 result
    step = np.where(outward, 1, -1).astype(np.int64)
    bits = np.where(inexact & even, (bits.astype(np.int64) + step).astype(np.uint32), bits)
    return rtne_float32_to_bfloat16_bits(bits.view(np.float32)).reshape(np.shape(wide))


# ---------------------------------------------------------------- the fixes

@dataclass
class _Fix:
    """One interpreter member opgate may replace: where it lives, how to build the replacement from the
    original, and a probe that says whether a candidate computes bfloat16 right."""

    name: str
    owner: Any
    attribute: str
    make: Callable[[Any], Any]
    probe: Callable[[Any], bool]


def _modules() -> tuple[Any, Any] | None:
    try:
        import triton.language as tl
        from triton.runtime import interpreter
    except ImportError:
        return None
    if not hasattr(interpreter, "InterpreterBuilder") or not hasattr(interpreter, "TensorHandle"):
        return None
    return tl, interpreter


def _is_bf16(handle: Any, tl: Any) -> bool:
    return getattr(handle.dtype, "scalar", None) == tl.bfloat16


def _fixes(tl: Any, interpreter: Any) -> list[_Fix]:
    import numpy as np

    handle_cls = interpreter.TensorHandle
    builder_cls = interpreter.InterpreterBuilder

    def widened(handle: Any) -> Any:
        return handle_cls(bfloat16_bits_to_float32(handle.data), tl.float32) if _is_bf16(handle, tl) else handle

    def narrowed(result: Any) -> Any:
        data = np.asarray(result.data)
        if data.dtype == np.float32:
            return handle_cls(rtne_float32_to_bfloat16_bits(data), tl.bfloat16)
        if data.dtype == np.bool_:
            return handle_cls(data, tl.int1)
        return result

    def bf16_handle(values: tuple[float, ...]) -> Any:
        return handle_cls(rtne_float32_to_bfloat16_bits(np.array(values, dtype=np.float32)), tl.bfloat16)

    def expect_bits(values: Any) -> Any:
        return float64_to_bfloat16_bits(np.asarray(values, dtype=np.float64))

    def same(result: Any, expected: Any) -> bool:
        data = np.asarray(result.data)
        expected = np.asarray(expected)
        if expected.dtype == np.bool_:
            return data.dtype == np.bool_ and bool(np.array_equal(data, expected))
        return data.dtype == np.uint16 and bool(np.array_equal(data.view(np.uint16), expected))

    safely = _safely

    builder = builder_cls.__new__(builder_cls)  # the ops used here read no builder state
    a64, b64, c64 = (np.array(v, dtype=np.float64) for v in (_PROBE_A, _PROBE_B, _PROBE_C))
    fixes: list[_Fix] = []

    # Binary and comparison ops: widen, run the interpreter's float32 op, round a float result.
    binary_truth: dict[str, Callable[[Any, Any], Any]] = {
        "create_fadd": np.add, "create_fsub": np.subtract, "create_fmul": np.multiply, "create_fdiv": np.divide,
        "create_precise_divf": np.divide, "create_approx_divf": np.divide, "create_frem": np.fmod,
        "create_minimumf": np.minimum, "create_minnumf": np.fmin, "create_maximumf": np.maximum,
        "create_maxnumf": np.fmax, "create_fcmpOLT": np.less, "create_fcmpOGT": np.greater,
        "create_fcmpOLE": np.less_equal, "create_fcmpOGE": np.greater_equal, "create_fcmpOEQ": np.equal,
        "create_fcmpONE": np.not_equal, "create_fcmpULT": np.less, "create_fcmpUGT": np.greater,
        "create_fcmpULE": np.less_equal, "create_fcmpUGE": np.greater_equal, "create_fcmpUEQ": np.equal,
        "create_fcmpUNE": np.not_equal,
    }
    for name in _BINARY_OPS:
        if not hasattr(builder_cls, name):
            continue

        def make_binary(original: Any) -> Any:
            def op(self: Any, lhs: Any, rhs: Any) -> Any:
                if not (_is_bf16(lhs, tl) and _is_bf16(rhs, tl)):
                    return original(self, lhs, rhs)
                return narrowed(original(self, widened(lhs), widened(rhs)))
            return op

        def probe_binary(candidate: Any, truth: Callable[[Any, Any], Any] = binary_truth[name]) -> bool:
            def check() -> bool:
                rhs = np.where(b64 == 0, 1.0, b64)  # no division by zero in the probe
                with np.errstate(all="ignore"):
                    expected = truth(a64, rhs)
                expected = expected if expected.dtype == np.bool_ else expect_bits(expected)
                return same(candidate(builder, bf16_handle(_PROBE_A), bf16_handle(tuple(rhs))), expected)
            return safely(check)

        fixes.append(_Fix(name.removeprefix("create_"), builder_cls, name, make_binary, probe_binary))

    unary_truth: dict[str, Callable[[Any], Any]] = {
        "create_fneg": np.negative, "create_exp": np.exp, "create_exp2": np.exp2, "create_log": np.log,
        "create_log2": np.log2, "create_sin": np.sin, "create_cos": np.cos, "create_sqrt": np.sqrt,
        "create_precise_sqrt": np.sqrt, "create_rsqrt": lambda x: 1 / np.sqrt(x), "create_floor": np.floor,
        "create_ceil": np.ceil, "create_erf": None,  # type: ignore[dict-item]
    }
    for name in _UNARY_OPS:
        if not hasattr(builder_cls, name):
            continue

        def make_unary(original: Any) -> Any:
            def op(self: Any, arg: Any) -> Any:
                if not _is_bf16(arg, tl):
                    return original(self, arg)
                return narrowed(original(self, widened(arg)))
            return op

        def probe_unary(candidate: Any, truth: Any = unary_truth[name]) -> bool:
            def check() -> bool:
                positive = np.abs(a64) + 0.5  # inside every function's domain
                operand = bf16_handle(tuple(positive))
                result = candidate(builder, operand)
                if truth is None:  # erf: compare against float32 erf of the same operand, rounded
                    reference = candidate(builder, handle_cls(positive.astype(np.float32), tl.float32))
                    return same(result, rtne_float32_to_bfloat16_bits(reference.data))
                # transcendental functions: the float32 result may differ from float64 by an ulp of float32;
                # judge against both neighbours of the float64 truth rounded through float32
                with np.errstate(all="ignore"):
                    exact = truth(positive)
                wanted = rtne_float32_to_bfloat16_bits(exact.astype(np.float32))
                data = np.asarray(result.data)
                if data.dtype != np.uint16:
                    return False
                return bool(np.all(np.abs(data.astype(np.int64) - wanted.astype(np.int64)) <= 1))
            return safely(check)

        fixes.append(_Fix(name.removeprefix("create_"), builder_cls, name, make_unary, probe_unary))

    # Fused multiply-add: one rounding of the exact a*b + c.
    def make_fma(original: Any) -> Any:
        def fma(self: Any, x: Any, y: Any, z: Any) -> Any:
            if not (_is_bf16(x, tl) and _is_bf16(y, tl) and _is_bf16(z, tl)):
                return original(self, x, y, z)
            xs, ys, zs = np.broadcast_arrays(*(bfloat16_bits_to_float32(h.data).astype(np.float64)
                                               for h in (x, y, z)))
            with np.errstate(all="ignore"):
                product = xs * ys  # exact: 8-bit significands
                total = product + zs
                carried = total - product
                error = (product - (total - carried)) + (zs - carried)  # TwoSum: total + error == product + zs
            return handle_cls(float64_to_bfloat16_bits(total, error), tl.bfloat16)
        return fma

    def probe_fma(candidate: Any) -> bool:
        def check() -> bool:
            # 1 + 2^-8 is a bfloat16 midpoint; + 2^-30 must round it up (float32 alone would tie to even)
            x = bf16_handle((1.0 + 2.0**-7, 1.5, -2.25))
            y = bf16_handle((1.0 + 2.0**-7, -2.25, 1.0))
            z = bf16_handle((-(2.0**-6) - 2.0**-14 + 2.0**-22, 1.0, 0.5))
            xs, ys, zs = (bfloat16_bits_to_float32(h.data).astype(np.float64) for h in (x, y, z))
            from fractions import Fraction
            exact = [Fraction(float(p)) * Fraction(float(q)) + Fraction(float(r)) for p, q, r in zip(xs, ys, zs)]
            expected = [_fraction_to_bfloat16_bits(v) for v in exact]
            return same(candidate(builder, x, y, z), np.array(expected, dtype=np.uint16))
        return safely(check)

    if hasattr(builder_cls, "create_fma"):
        fixes.append(_Fix("fma", builder_cls, "create_fma", make_fma, probe_fma))

    def make_clamp(original: Any) -> Any:
        def clampf(self: Any, arg: Any, lo: Any, hi: Any, propagate_nans: Any) -> Any:
            if not (_is_bf16(arg, tl) and _is_bf16(lo, tl) and _is_bf16(hi, tl)):
                return original(self, arg, lo, hi, propagate_nans)
            return narrowed(original(self, widened(arg), widened(lo), widened(hi), propagate_nans))
        return clampf

    def probe_clamp(candidate: Any) -> bool:
        def check() -> bool:
            from triton._C.libtriton import ir

            lo = bf16_handle(tuple([-1.0] * len(_PROBE_A)))
            hi = bf16_handle(tuple([1.25] * len(_PROBE_A)))
            result = candidate(builder, bf16_handle(_PROBE_A), lo, hi, ir.PROPAGATE_NAN.ALL)
            return same(result, expect_bits(np.clip(a64, -1.0, 1.25)))
        return safely(check)

    if hasattr(builder_cls, "create_clampf"):
        fixes.append(_Fix("clampf", builder_cls, "create_clampf", make_clamp, probe_clamp))

    # tl.dot: bfloat16 tiles multiplied as numbers (products exact in float32), float32 accumulator.
    def make_dot(original: Any) -> Any:
        def dot(self: Any, a: Any, b: Any, d: Any, input_precision: Any, max_num_imprecise_acc: Any) -> Any:
            if not (_is_bf16(a, tl) or _is_bf16(b, tl) or _is_bf16(d, tl)):
                return original(self, a, b, d, input_precision, max_num_imprecise_acc)
            result = original(self, widened(a), widened(b), widened(d), input_precision, max_num_imprecise_acc)
            return narrowed(result) if _is_bf16(d, tl) else result
        return dot

    def probe_dot(candidate: Any) -> bool:
        def check() -> bool:
            a = np.array(_PROBE_A, dtype=np.float64).reshape(2, 4)
            b = np.array(_PROBE_B, dtype=np.float64).reshape(4, 2)
            acc = handle_cls(np.zeros((2, 2), dtype=np.float32), tl.float32)
            result = candidate(builder, handle_cls(rtne_float32_to_bfloat16_bits(a.astype(np.float32)), tl.bfloat16),
                               handle_cls(rtne_float32_to_bfloat16_bits(b.astype(np.float32)), tl.bfloat16), acc,
                               None, 0)
            return np.asarray(result.data).dtype == np.float32 and bool(
                np.array_equal(np.asarray(result.data), (a @ b).astype(np.float32)))
        return safely(check)

    if hasattr(builder_cls, "create_dot"):
        fixes.append(_Fix("dot", builder_cls, "create_dot", make_dot, probe_dot))

    fixes.extend(_reduction_fixes(tl, interpreter, same, safely, a64))
    fixes.extend(_atomic_fixes(tl, interpreter, safely))
    return fixes


def _safely(check: Callable[[], bool]) -> bool:
    """Run a probe: an exception or a wrong answer both mean "not right"; the raw-bit arithmetic of an
    unpatched op may overflow, so NumPy's warnings are silenced while probing."""
    import warnings

    import numpy as np

    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            return bool(check())
    except Exception:
        return False


def _fraction_to_bfloat16_bits(value: Any) -> int:
    """The bfloat16 nearest (ties to even) to an exact rational, for normal-range probe values."""
    import math
    from fractions import Fraction

    if value == 0:
        return 0
    sign = 0x8000 if value < 0 else 0
    magnitude = abs(value)
    exponent = math.floor(math.log2(magnitude))
    while Fraction(2) ** exponent > magnitude:
        exponent -= 1
    while Fraction(2) ** (exponent + 1) <= magnitude:
        exponent += 1
    scaled = magnitude / Fraction(2) ** (exponent - 7)  # in [128, 256)
    floor = math.floor(scaled)
    remainder = scaled - floor
    mantissa = floor + (1 if remainder > Fraction(1, 2) or (remainder == Fraction(1, 2) and floor % 2) else 0)
    if mantissa == 256:
        mantissa, exponent = 128, exponent + 1
    return sign | ((exponent + 127) << 7) | (mantissa - 128)


def _reduction_fixes(tl: Any, interpreter: Any, same: Callable[[Any, Any], bool],
                     safely: Callable[[Callable[[], bool]], bool], a64: Any) -> list[_Fix]:
    """tl.sum / tl.max / tl.min / argmax / cumsum / cumprod: the interpreter's NumPy fast paths."""
    import numpy as np

    handle_cls = interpreter.TensorHandle
    reduce_cls = getattr(interpreter, "ReduceOps", None)
    scan_cls = getattr(interpreter, "ScanOps", None)
    standard = getattr(tl, "standard", None)
    if reduce_cls is None or scan_cls is None or standard is None:
        return []

    def retyped(ty: Any, scalar: Any) -> Any:
        shape = getattr(ty, "shape", None)
        return tl.block_type(scalar, list(shape)) if getattr(ty, "is_block", lambda: False)() else scalar

    def widened_tensor(tensor: Any) -> Any:
        data = bfloat16_bits_to_float32(tensor.handle.data)
        return tl.core.tensor(handle_cls(data, tl.float32), retyped(tensor.type, tl.float32))

    def narrowed_tensor(tensor: Any) -> Any:
        if not isinstance(tensor, tl.core.tensor) or tensor.dtype != tl.float32:
            return tensor
        bits = rtne_float32_to_bfloat16_bits(tensor.handle.data)
        return tl.core.tensor(handle_cls(bits, tl.bfloat16), retyped(tensor.type, tl.bfloat16))

    def is_bf16_tensor(tensor: Any) -> bool:
        return isinstance(tensor, tl.core.tensor) and tensor.dtype == tl.bfloat16

    def make_sum(original: Any) -> Any:
        def reduce_sum(self: Any, input: Any) -> Any:
            if not is_bf16_tensor(input):
                return original(self, input)
            return narrowed_tensor(original(self, widened_tensor(input)))
        return reduce_sum

    def make_min_max(original: Any) -> Any:
        def min_max(self: Any, input: Any, val_reduce_op: Any, idx_reduce_op: Any = None) -> Any:
            value = input[0] if isinstance(input, tuple) else input
            if not is_bf16_tensor(value):
                return original(self, input, val_reduce_op, idx_reduce_op)
            result = original(self, widened_tensor(value), val_reduce_op, idx_reduce_op)
            if isinstance(result, tuple):
                return (narrowed_tensor(result[0]),) + tuple(result[1:])
            return narrowed_tensor(result) if val_reduce_op is not None else result
        return min_max

    def make_scan(original: Any) -> Any:
        def scan(self: Any, input: Any) -> Any:
            if not is_bf16_tensor(input):
                return original(self, input)
            return [narrowed_tensor(t) for t in original(self, widened_tensor(input))]
        return scan

    def bf16_tensor(values: Any) -> Any:
        bits = rtne_float32_to_bfloat16_bits(np.asarray(values, dtype=np.float32))
        return tl.core.tensor(handle_cls(bits, tl.bfloat16), tl.block_type(tl.bfloat16, [len(values)]))

    def expected(values: Any) -> Any:
        return float64_to_bfloat16_bits(np.asarray(values, dtype=np.float64))

    def probe_sum(candidate: Any) -> bool:
        return safely(lambda: same(candidate(reduce_cls(0, standard._sum_combine, False), bf16_tensor(a64)).handle,
                                   expected([a64.sum()]).reshape(-1)))

    def probe_max(candidate: Any) -> bool:
        def check() -> bool:
            ops = reduce_cls(0, standard._elementwise_max, False)
            value = candidate(ops, bf16_tensor(a64), np.nanmax, None)
            low = candidate(reduce_cls(0, standard._elementwise_min, False), bf16_tensor(a64), np.nanmin, None)
            pair = candidate(ops, bf16_tensor(a64), np.nanmax, np.nanargmax)
            return (same(value.handle, expected([a64.max()]).reshape(-1))
                    and same(low.handle, expected([a64.min()]).reshape(-1))
                    and int(np.asarray(pair[1].handle.data).ravel()[0]) == int(np.argmax(a64)))
        return safely(check)

    def probe_cumsum(candidate: Any) -> bool:
        return safely(lambda: same(candidate(scan_cls(0, standard._sum_combine, False), bf16_tensor(a64))[0].handle,
                                   expected(np.cumsum(a64))))

    def probe_cumprod(candidate: Any) -> bool:
        values = np.abs(a64[:4]) + 1.0
        return safely(lambda: same(candidate(scan_cls(0, standard._prod_combine, False), bf16_tensor(values))[0]
                                   .handle, expected(np.cumprod(values))))

    fixes = []
    for name, owner, attribute, make, probe in (
            ("sum", reduce_cls, "sum", make_sum, probe_sum),
            ("max/min/argmax", reduce_cls, "min_max", make_min_max, probe_max),
            ("cumsum", scan_cls, "cumsum", make_scan, probe_cumsum),
            ("cumprod", scan_cls, "cumprod", make_scan, probe_cumprod)):
        if hasattr(owner, attribute) and hasattr(standard, "_sum_combine"):
            fixes.append(_Fix(name, owner, attribute, make, probe))
    return fixes


def _atomic_fixes(tl: Any, interpreter: Any, safely: Callable[[Callable[[], bool]], bool]) -> list[_Fix]:
    """tl.atomic_add on bfloat16 memory: read, add in float32, round, write, one element at a time (the
    interpreter runs programs one after another, so nothing else writes in between)."""
    import numpy as np

    try:
        from triton._C.libtriton import interpreter as native
        from triton._C.libtriton import ir
    except ImportError:
        return []
    builder_cls = interpreter.InterpreterBuilder
    handle_cls = interpreter.TensorHandle
    if not hasattr(builder_cls, "create_atomic_rmw") or not hasattr(native, "load"):
        return []
    fadd = ir.ATOMIC_OP.FADD

    def make_rmw(original: Any) -> Any:
        def atomic_rmw(self: Any, rmw_op: Any, ptr: Any, val: Any, mask: Any, sem: Any, scope: Any) -> Any:
            if rmw_op != fadd or not _is_bf16(val, tl):
                return original(self, rmw_op, ptr, val, mask, sem, scope)
            addresses, values, active = np.broadcast_arrays(ptr.data, val.data, mask.data)
            old = np.zeros(addresses.shape, dtype=np.uint16)
            one = np.ones(1, dtype=bool)
            for index in np.ndindex(addresses.shape):
                if not active[index]:
                    continue
                where = np.array([addresses[index]], dtype=np.uint64)
                before = native.load(where, one, np.zeros(1, dtype=np.uint16), np.dtype(np.uint16))
                old[index] = before[0]
                total = bfloat16_bits_to_float32(before) + bfloat16_bits_to_float32(np.array([values[index]]))
                native.store(where, rtne_float32_to_bfloat16_bits(total), one)
            return handle_cls(old, tl.bfloat16)
        return atomic_rmw

    def probe_rmw(candidate: Any) -> bool:
        def check() -> bool:
            memory = rtne_float32_to_bfloat16_bits(np.array([1.5, -2.0], dtype=np.float32))
            address = np.uint64(memory.ctypes.data)
            ptrs = handle_cls(np.array([address, address, address + 2], dtype=np.uint64),
                              tl.pointer_type(tl.bfloat16))
            val = handle_cls(rtne_float32_to_bfloat16_bits(np.array([0.25, 0.25, 0.5], dtype=np.float32)),
                             tl.bfloat16)
            builder = builder_cls.__new__(builder_cls)
            candidate(builder, fadd, ptrs, val, handle_cls(np.ones(3, dtype=bool), tl.int1),
                      ir.MEM_SEMANTIC.ACQUIRE_RELEASE, None)
            return bool(np.array_equal(memory, rtne_float32_to_bfloat16_bits(np.array([2.0, -1.5], np.float32))))
        return safely(check)

    return [_Fix("atomic_add", builder_cls, "create_atomic_rmw", make_rmw, probe_rmw)]


# ---------------------------------------------------------------- public API

_MARK = "_opgate_bf16_fix"


def _original(fix: _Fix) -> Any:
    current = getattr(fix.owner, fix.attribute)
    return getattr(current, "_opgate_original", current)


def _survey() -> list[tuple[_Fix, bool, Any | None]]:
    """(fix, original is right, a working replacement or None) for every fix this Triton has."""
    found = _modules()
    if found is None:
        return []
    survey = []
    for fix in _fixes(*found):
        original = _original(fix)
        if fix.probe(original):
            survey.append((fix, True, None))
            continue
        replacement = fix.make(original)
        survey.append((fix, False, replacement if fix.probe(replacement) else None))
    return survey


def make_interpreter_bf16_arithmetic_exact() -> list[str]:
    """Install the bfloat16 arithmetic fixes this Triton's interpreter needs; return the ops patched
    (e.g. ["fadd", "fmul", ..., "sum", "dot"]). Idempotent; ops already right are left alone."""
    patched = []
    for fix, right, replacement in _survey():
        current = getattr(fix.owner, fix.attribute)
        if getattr(current, _MARK, False):
            patched.append(fix.name)
            continue
        if right or replacement is None:
            continue
        replacement._opgate_original = _original(fix)
        setattr(replacement, _MARK, True)
        setattr(fix.owner, fix.attribute, replacement)
        patched.append(fix.name)
    return patched


def interpreter_bf16_limitations() -> list[str]:
    """The bfloat16 operations and conversions Triton's interpreter gets wrong that opgate's fixes do not
    mend in this Triton (the replacement failed its probe). Empty when everything is mended. Does not
    modify the interpreter, so it can be asked from any process, e.g. to label a bfloat16 failure on the
    interpreter as a known interpreter limitation (the GPU run decides) instead of the kernel's bug."""
    left = [f"{fix.name}: the interpreter computes it wrongly on bfloat16 and opgate's float32 emulation "
            f"failed its probe" for fix, right, replacement in _survey() if not right and replacement is None]
    casts = _cast_survey()
    if casts is not None:
        left.extend(f"cast {direction}: the interpreter converts it wrongly and opgate's exact conversion "
                    f"failed its probe" for direction in casts[2])
    return left


# ---------------------------------------------------------------- casts

_CAST_MARK = "_opgate_exact_bf16"


def _cast_probes(tl: Any, interpreter: Any) -> dict[str, Callable[[Any], bool]]:
    """Each bfloat16 conversion direction and a probe of a cast_impl candidate on it."""
    import numpy as np

    handle_cls = interpreter.TensorHandle
    builder = interpreter.InterpreterBuilder.__new__(interpreter.InterpreterBuilder)

    def bits_of(candidate: Any, data: Any, source: Any, target: Any) -> Any:
        return np.asarray(candidate(builder, handle_cls(data, source), target).data)

    def narrow32(candidate: Any) -> bool:  # nearest bfloat16 of 1 + 2^-8 + 2^-12 is 1 + 2^-7
        narrow_in = np.array([1.0 + 2.0**-8 + 2.0**-12], dtype=np.float32)
        return int(bits_of(candidate, narrow_in, tl.float32, tl.bfloat16).view(np.uint16)[0]) == 0x3F81

    def widen32(candidate: Any) -> bool:  # a bfloat16 subnormal (~7.3e-39) widens by a 16-bit shift
        subnormal = np.array([0x0050], dtype=np.uint16)
        return int(bits_of(candidate, subnormal, tl.bfloat16, tl.float32).view(np.uint32)[0]) == 0x00500000

    def narrow64(candidate: Any) -> bool:  # 1 + 2^-8 + 2^-30: via float32 it would tie to even (1.0)
        wide = np.array([1.0 + 2.0**-8 + 2.0**-30, -3.0], dtype=np.float64)
        got = bits_of(candidate, wide, tl.float64, tl.bfloat16)
        return got.dtype == np.uint16 and got.tolist() == [0x3F81, 0xC040]

    def from_int(candidate: Any) -> bool:  # 257 ties to 256, 259 ties to 260 (even)
        ints = np.array([3, -2, 257, 259], dtype=np.int32)
        got = bits_of(candidate, ints, tl.int32, tl.bfloat16)
        return got.dtype == np.uint16 and got.tolist() == [0x4040, 0xC000, 0x4380, 0x4382]

    return {"float32->bfloat16": narrow32, "bfloat16->float32": widen32, "float64->bfloat16": narrow64,
            "int->bfloat16": from_int}


def _cast_replacement(tl: Any, interpreter: Any, original: Any, directions: list[str]) -> Any:
    """A cast_impl that converts the given bfloat16 directions exactly and leaves the rest to `original`."""
    import numpy as np

    handle_cls = interpreter.TensorHandle

    def cast_impl(self: Any, src: Any, dst_type: Any) -> Any:
        source, target = src.dtype.scalar, dst_type.scalar
        if target == tl.bfloat16:
            if "float32->bfloat16" in directions and source == tl.float32:
                return handle_cls(rtne_float32_to_bfloat16_bits(src.data), target)
            if "float64->bfloat16" in directions and source == tl.float64:
                return handle_cls(float64_to_bfloat16_bits(src.data), target)
            if "int->bfloat16" in directions and source.is_int():
                return handle_cls(float64_to_bfloat16_bits(np.asarray(src.data).astype(np.float64)), target)
        if "bfloat16->float32" in directions and source == tl.bfloat16 and target == tl.float32:
            return handle_cls(bfloat16_bits_to_float32(src.data), target)
        return original(self, src, dst_type)

    cast_impl._opgate_original = original  # type: ignore[attr-defined]
    return cast_impl


def _cast_survey() -> tuple[Any, list[str], list[str]] | None:
    """(replacement cast_impl or None, directions it mends, directions left wrong) for this Triton."""
    found = _modules()
    if found is None:
        return None
    tl, interpreter = found
    current = getattr(interpreter.InterpreterBuilder, "cast_impl", None)
    if current is None:
        return None
    original = getattr(current, "_opgate_original", current)
    probes = _cast_probes(tl, interpreter)
    wrong = [direction for direction, probe in probes.items() if not _safely(lambda: probe(original))]
    if not wrong:
        return None, [], []
    candidate = _cast_replacement(tl, interpreter, original, wrong)
    mended = [direction for direction in wrong if _safely(lambda: probes[direction](candidate))]
    left = [direction for direction in wrong if direction not in mended]
    return (_cast_replacement(tl, interpreter, original, mended) if mended else None), mended, left


def make_interpreter_bf16_casts_exact() -> list[str]:
    """Make the interpreter's conversions to and from bfloat16 match compiled Triton, only where they differ.

    Triton's interpreter converts float32<->bfloat16 bit by bit (`_convert_float`): float32->bfloat16
    truncates where compiled Triton rounds to nearest even, and bfloat16 subnormals widen wrongly; float64
    and integers reach bfloat16 through NumPy's `astype(uint16)`, i.e. as integers. Each direction is
    probed first, so a later Triton that converts correctly is left alone. Returns the directions patched,
    e.g. ["float32->bfloat16", "bfloat16->float32", "float64->bfloat16", "int->bfloat16"].
    """
    found = _modules()
    if found is None:
        return []
    current = getattr(found[1].InterpreterBuilder, "cast_impl", None)
    if getattr(current, _CAST_MARK, None) is not None:
        return list(getattr(current, _CAST_MARK))
    survey = _cast_survey()
    if survey is None or survey[0] is None:
        return []
    replacement, mended, _ = survey
    setattr(replacement, _CAST_MARK, tuple(mended))
    found[1].InterpreterBuilder.cast_impl = replacement
    return mended
