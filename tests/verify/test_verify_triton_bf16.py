"""bfloat16 on Triton's CPU interpreter: opgate's arithmetic fixes, on real kernels and through `opgate verify`.

The interpreter stores bfloat16 as uint16 and, unpatched, computes on the bit patterns. After opgate's
fixes the same kernel must give, on bfloat16 inputs, what it gives on the same values in float32 rounded
to bfloat16 (within the roundings the kernel's own bfloat16 operations add), and what PyTorch's CPU
bfloat16 operators give (they, like compiled Triton, compute each op in float32 and round to nearest even).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests_verify_support import DATA, ROOT, SRC

SPEC = DATA / "bf16_triton_spec.py"


def nearest_bfloat16_bits(value: Fraction) -> int:
    """Oracle: the bfloat16 nearest to an exact rational (ties to even), normal range, by integer arithmetic."""
    if value == 0:
        return 0
    sign = 0x8000 if value < 0 else 0
    magnitude = abs(value)
    exponent = magnitude.numerator.bit_length() - magnitude.denominator.bit_length()
    if Fraction(2) ** exponent > magnitude:
        exponent -= 1
    scaled = magnitude / Fraction(2) ** (exponent - 7)  # in [128, 256)
    whole = scaled.numerator // scaled.denominator
    rest = scaled - whole
    whole += 1 if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and whole % 2) else 0
    if whole == 256:
        whole, exponent = 128, exponent + 1
    return sign | ((exponent + 127) << 7) | (whole - 128)


def bf16_value(bits: int) -> float:
    return float(np.array([bits << 16], dtype=np.uint32).view(np.float32)[0])


normal_bf16_bits = st.integers(0x0080, 0x7F00).flatmap(lambda b: st.sampled_from([b, b | 0x8000]))


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=1e-30, max_value=1e30), st.booleans())
def test_float64_to_bfloat16_rounds_once_to_nearest_even(value, negative):
    from opgate.verify.backends.triton_interpreter_bf16 import float64_to_bfloat16_bits

    value = -value if negative else value
    assert int(float64_to_bfloat16_bits(np.array([value]))[0]) == nearest_bfloat16_bits(Fraction(value))


def test_float64_just_above_a_bfloat16_midpoint_rounds_up_where_float32_would_tie():
    from opgate.verify.backends.triton_interpreter_bf16 import float64_to_bfloat16_bits

    values = np.array([1 + 2.0**-8 + 2.0**-30, 1 + 2.0**-8, 1 + 2.0**-8 - 2.0**-30, -(3 + 2.0**-7 + 2.0**-40)])
    expected = [nearest_bfloat16_bits(Fraction(float(v))) for v in values]
    assert expected == [0x3F81, 0x3F80, 0x3F80, 0xC041]
    assert float64_to_bfloat16_bits(values).tolist() == expected
    via_float32 = values.astype(np.float32)  # the double rounding opgate avoids
    assert float(via_float32[0]) == 1 + 2.0**-8


@settings(max_examples=300, deadline=None)
@given(normal_bf16_bits, normal_bf16_bits, normal_bf16_bits)
def test_bfloat16_fma_rounds_the_exact_result_once(a, b, c):
    """The interpreter's bfloat16 tl.fma after opgate's fix, against exact rational arithmetic."""
    from opgate.verify.backends.triton_interpreter_bf16 import float64_to_bfloat16_bits

    x, y, z = bf16_value(a), bf16_value(b), bf16_value(c)
    exact = Fraction(x) * Fraction(y) + Fraction(z)
    if exact == 0 or not (2.0**-126 <= abs(exact) < 2.0**127):
        return  # the oracle covers the normal range
    product = x * y
    total = product + z
    carried = total - product
    error = (product - (total - carried)) + (z - carried)
    assert int(float64_to_bfloat16_bits(np.array([total]), np.array([error]))[0]) == nearest_bfloat16_bits(exact)


def test_float32_to_bfloat16_matches_torch_including_nan():
    import torch

    from opgate.verify.backends.triton_interpreter_bf16 import rtne_float32_to_bfloat16_bits

    values = torch.randn(4096, generator=torch.Generator().manual_seed(3)) * 1e3
    values[:4] = torch.tensor([float("nan"), float("inf"), -0.0, 1.0 + 2.0**-8])
    ours = rtne_float32_to_bfloat16_bits(values.numpy())
    theirs = values.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    assert np.array_equal(ours[1:], theirs[1:]) and (ours[0] & 0x7FC0) == 0x7FC0


KERNELS_SCRIPT = r"""
import importlib.util, json, sys
import torch
from opgate.verify.backends import triton_interpreter_bf16 as bf16
from opgate.verify.backends.triton_backend import mend_interpreter_bf16

spec = importlib.util.spec_from_file_location("bf16_spec", sys.argv[1])
kernels = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kernels)
g = torch.Generator().manual_seed(0)

def rand(*shape, positive=False):
    t = torch.randn(*shape, generator=g)
    return (t.abs() if positive else t).to(torch.bfloat16)

x, y = rand(16, 33), rand(16, 33)
xr, cos, sin = rand(7, 64), rand(7, 64), rand(7, 64)
xs = rand(5, 33, positive=True)
xa, w, b = rand(5, 33), rand(33), rand(33)
a, bm = rand(17, 40), rand(40, 9)
cases = {
    "maximum": (kernels.maximum_triton, (x, y), lambda: torch.stack([torch.maximum(x, y), torch.relu(x)]), None),
    "rotary": (kernels.rotary_triton, (xr, cos, sin), lambda: xr * cos + kernels._rotate_half(xr) * sin,
               lambda: (xr.double() * cos.double()).abs() + (kernels._rotate_half(xr).double() * sin.double()).abs()),
    "row_sum": (kernels.row_sum_triton, (xs,), lambda: xs.sum(-1), None),
    "affine": (kernels.affine_triton, (xa, w, b), lambda: xa * w + b, lambda: (xa.double() * w.double()).abs()),
    "dot": (kernels.dot_triton, (a, bm), lambda: a @ bm, None),
}

def measure():
    out = {}
    for name, (fn, args, torch_bf16, terms) in cases.items():
        got = fn(*args).double()
        wide = fn(*[t.float() for t in args])
        yardstick = wide.to(torch.bfloat16).double()
        # the kernel's own bfloat16 roundings: half an ulp (2^-8 relative) of each intermediate and of the result
        slack = 2.0**-8 * ((terms().double() if terms else 0) + 2 * wide.double().abs()) * (1 + 2.0**-6)
        out[name] = {"bits_equal_f32": int((got == yardstick).sum()), "n": got.numel(),
                     "within_roundings": bool(((got - yardstick).abs() <= slack).all()),
                     "bits_equal_torch": int((got == torch_bf16().double()).sum())}
    return out

before = measure()
facts = mend_interpreter_bf16()
after = measure()
print(json.dumps({"before": before, "after": after, "facts": facts,
                  "fixed": facts.get("interpreter_bf16_arithmetic_fixed", []),
                  "limitations": bf16.interpreter_bf16_limitations()}))
"""

LEFT_ALONE_SCRIPT = r"""
import json
from triton.runtime import interpreter
from opgate.verify.backends import triton_interpreter_bf16 as bf16

builder = interpreter.InterpreterBuilder
untouched = builder.create_fmul
limitations = bf16.interpreter_bf16_limitations()  # must not patch anything
asked_only = builder.create_fmul is untouched
# a future Triton with a correct bfloat16 add: opgate's own replacement, installed as if it were Triton's
fix = next(f for f in bf16._fixes(*bf16._modules()) if f.name == "fadd")
correct_add = fix.make(builder.create_fadd)
builder.create_fadd = correct_add
patched = bf16.make_interpreter_bf16_arithmetic_exact()
print(json.dumps({"asked_only": asked_only, "limitations": limitations, "patched": patched,
                  "fadd_left_alone": builder.create_fadd is correct_add,
                  "fmul_patched": builder.create_fmul is not untouched,
                  "again": bf16.make_interpreter_bf16_arithmetic_exact() == patched}))
"""


def run_interpreted(script: str, *args: str) -> dict:
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(SRC)}
    out = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def kernel_runs() -> dict:
    return run_interpreted(KERNELS_SCRIPT, str(SPEC))


def test_bf16_kernels_match_their_float32_run_and_torch_after_the_fix(kernel_runs):
    after = kernel_runs["after"]
    for name in ("maximum", "row_sum", "dot"):  # one rounding of a float32 result: bit for bit
        assert after[name]["bits_equal_f32"] == after[name]["n"], (name, after[name])
    for name, run in after.items():
        assert run["within_roundings"], (name, run)
        assert run["bits_equal_torch"] == run["n"], (name, run)  # torch's CPU bfloat16 ops round each op too


def test_unpatched_interpreter_gets_bf16_wrong_and_the_facts_say_what_was_patched(kernel_runs):
    fixed = kernel_runs["fixed"]
    if not fixed:
        pytest.skip("this Triton's interpreter already computes bfloat16 arithmetic right")
    assert {"fadd", "fmul", "maximumf", "sum", "dot"} <= set(fixed)
    before = kernel_runs["before"]
    assert all(before[name]["bits_equal_f32"] < before[name]["n"] for name in ("maximum", "rotary", "row_sum", "dot"))
    assert kernel_runs["limitations"] == []
    assert "interpreter_bf16_limitations" not in kernel_runs["facts"]
    assert "float64->bfloat16" in kernel_runs["facts"]["interpreter_bf16_casts_fixed"]


def test_a_triton_that_is_already_right_is_left_alone_and_asking_for_limitations_patches_nothing():
    result = run_interpreted(LEFT_ALONE_SCRIPT)
    assert result["asked_only"] and result["limitations"] == []
    if not result["patched"]:
        pytest.skip("this Triton's interpreter already computes bfloat16 arithmetic right")
    assert "fadd" not in result["patched"] and result["fadd_left_alone"]
    assert "fmul" in result["patched"] and result["fmul_patched"] and result["again"]


@pytest.mark.slow
def test_opgate_verify_passes_the_bf16_kernels_on_the_interpreter(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    env.pop("TRITON_INTERPRET", None)
    proc = subprocess.run([sys.executable, "-m", "opgate", "verify", str(SPEC), "--budget", "quick", "--no-extras",
                           "--dtype", "bfloat16", "--stages", "numerics", "--json", str(tmp_path / "r.json")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    report = json.loads((tmp_path / "r.json").read_text())
    results = {r["check_id"]: r for r in report["results"] if r["check_id"].endswith(".triton.bfloat16")}
    assert len(results) == 5, proc.stdout[-3000:]
    for check_id, result in results.items():
        assert result["outcome"] == "passed", (check_id, result["reason"])
        facts = result["extra"]["backend_facts"]
        assert facts["interpreter"] is True
        if "interpreter_bf16_arithmetic_fixed" in facts:
            assert "fadd" in facts["interpreter_bf16_arithmetic_fixed"]
    assert proc.returncode == 0, proc.stdout[-3000:]
