"""Run under TRITON_INTERPRET=1 (tests/verify/test_verify_interpreter_gaps.py starts it): each kernel raises in Triton's
CPU interpreter; prints, per kernel, what opgate.verify.backends.triton_interpreter_gaps.interpreter_gap makes of the
exception (JSON: name -> the limitation's text, or null for the implementation's own error).

Valid Triton the interpreter cannot run: a float argument's .to, a constexpr expression's .to, inline asm, libdevice,
an alias of a tl builtin.
The kernel's own errors: a shape error, a typo on a tl.tensor, and the wrapper's own
AttributeError (no kernel involved)."""

from __future__ import annotations

import json
import os
import sys

assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.language.extra import libdevice  # noqa: E402

from opgate.verify.backends.triton_interpreter_gaps import interpreter_gap  # noqa: E402


@triton.jit
def float_argument_to(x_ptr, y_ptr, cap, N, B: tl.constexpr):
    o = tl.arange(0, B)
    x = tl.load(x_ptr + o, mask=o < N)
    tl.store(y_ptr + o, x * cap.to(tl.float32), mask=o < N)


@triton.jit
def constexpr_expression_to(x_ptr, y_ptr, N, B: tl.constexpr, CAP: tl.constexpr):
    o = tl.arange(0, B)
    x = tl.load(x_ptr + o, mask=o < N)
    tl.store(y_ptr + o, x * (1.0 / CAP).to(tl.float32), mask=o < N)


@triton.jit
def inline_asm(x_ptr, y_ptr, N, B: tl.constexpr):
    o = tl.arange(0, B)
    x = tl.load(x_ptr + o, mask=o < N)
    y = tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1)
    tl.store(y_ptr + o, y, mask=o < N)


@triton.jit
def _libdevice_tanh(x):
    return libdevice.tanh(x)


@triton.jit
def libdevice_in_a_helper(x_ptr, y_ptr, N, B: tl.constexpr):
    o = tl.arange(0, B)
    x = tl.load(x_ptr + o, mask=o < N)
    tl.store(y_ptr + o, _libdevice_tanh(x) + 1.0, mask=o < N)


cast_alias = tl.cast  # unsloth's kernels/utils.py: triton_cast = tl.cast


@triton.jit
def builtin_alias(x_ptr, y_ptr, N, B: tl.constexpr):
    o = tl.arange(0, B)
    x = tl.load(x_ptr + o, mask=o < N)
    tl.store(y_ptr + o, cast_alias(x, tl.float32) + 1.0, mask=o < N)


@triton.jit
def shape_error(x_ptr, y_ptr, N, B: tl.constexpr):
    o = tl.arange(0, B)
    x = tl.load(x_ptr + o, mask=o < N)
    tl.store(y_ptr + o, x + tl.zeros((2 * B,), tl.float32), mask=o < N)


@triton.jit
def typo_on_a_tensor(x_ptr, y_ptr, N, B: tl.constexpr):
    o = tl.arange(0, B)
    x = tl.load(x_ptr + o, mask=o < N)
    tl.store(y_ptr + o, x.too(tl.float32), mask=o < N)


def wrapper_attribute_error(x, y):
    cap = 2.0
    float_argument_to[(1,)](x, y, cap.to(torch.float32), 8, B=8)


def main() -> None:
    x, y = torch.randn(8), torch.empty(8)
    calls = {
        "float_argument_to": lambda: float_argument_to[(1,)](x, y, 2.0, 8, B=8),
        "constexpr_expression_to": lambda: constexpr_expression_to[(1,)](x, y, 8, B=8, CAP=3.0),
        "inline_asm": lambda: inline_asm[(1,)](x, y, 8, B=8),
        "libdevice_in_a_helper": lambda: libdevice_in_a_helper[(1,)](x, y, 8, B=8),
        "builtin_alias": lambda: builtin_alias[(1,)](x, y, 8, B=8),
        "shape_error": lambda: shape_error[(1,)](x, y, 8, B=8),
        "typo_on_a_tensor": lambda: typo_on_a_tensor[(1,)](x, y, 8, B=8),
        "wrapper_attribute_error": lambda: wrapper_attribute_error(x, y),
    }
    found: dict[str, str | None] = {}
    for name, call in calls.items():
        try:
            call()
        except Exception as exc:  # noqa: BLE001 - each kernel is meant to raise
            gap = interpreter_gap(exc)
            found[name] = gap.reason() if gap is not None else None
        else:
            found[name] = "did not raise"
    json.dump(found, sys.stdout)


if __name__ == "__main__":
    main()
