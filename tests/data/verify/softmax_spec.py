"""Row softmax: a correct torch and Triton implementation, and buggy Triton twins opgate must flag.

Bugs, each a real kind seen in kernels:
- triton_tail_bug:   the column mask is dropped for the last block: N that is not a power of two reads
                     past the row into its neighbour (and stores garbage it computed from it).
- triton_fp16_acc:   the row sum is accumulated tile by tile in a float16 register: one rounding per
                     tile, so the error grows with N (harmless in bfloat16, whose own precision is coarser).
- triton_no_max:     no max-subtraction: exp overflows for logits above ~88 (float32 math).
- triton_grid_bug:   out= implementation whose grid is M // 4 programs of 4 rows: rows past the last
                     multiple of 4 are never written (opgate's poisoned out= buffer shows it).
- triton_stride_bug: ignores the input's strides (assumes row-major contiguous).
torch_out is a correct implementation that takes opgate's out= buffer.
"""

import torch
import triton
import triton.language as tl

import opgate

softmax = opgate.Operator(
    "softmax",
    reference=lambda x: torch.softmax(x, dim=-1),
    inputs=[opgate.TensorSpec("x", ("M", "N"), kind="normal")],
    dims={"M": [2, 8], "N": [128, 1024]},
    dtypes=["float32", "float16", "bfloat16"],
    flops=lambda M, N: 5 * M * N,
)


@softmax.implementation("torch")
def softmax_torch(x):
    shifted = x.float() - x.float().amax(dim=-1, keepdim=True)
    e = torch.exp(shifted)
    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)


@triton.jit
def _softmax_kernel(out_ptr, in_ptr, in_row_stride, in_col_stride, out_row_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_row_stride + cols * in_col_stride, mask=mask, other=-float("inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    den = tl.sum(num, axis=0)
    tl.store(out_ptr + row * out_row_stride + cols, (num / den).to(out_ptr.dtype.element_ty), mask=mask)


@softmax.implementation("triton")
def softmax_triton(x):
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    _softmax_kernel[(M,)](y, x, x.stride(0), x.stride(1), y.stride(0), N, BLOCK=triton.next_power_of_2(N))
    return y


@triton.jit
def _softmax_tail_bug_kernel(out_ptr, in_ptr, in_row_stride, in_col_stride, out_row_stride, n_cols,
                             BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    in_row = in_ptr + row * in_row_stride
    # BUG: no load mask: lanes past n_cols read the next row's values, which join the max and the sum.
    x = tl.load(in_row + cols * in_col_stride).to(tl.float32)
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    den = tl.sum(num, axis=0)
    tl.store(out_ptr + row * out_row_stride + cols, (num / den).to(out_ptr.dtype.element_ty), mask=cols < n_cols)


@softmax.implementation("triton_tail_bug", backend="triton")
def softmax_triton_tail_bug(x):
    M, N = x.shape
    # pad the input so the unmasked reads stay inside the allocation (the bug reads neighbours, not out of bounds)
    block = triton.next_power_of_2(N)
    padded = torch.zeros((M + 1) * block, dtype=x.dtype, device=x.device)
    padded[: M * N].copy_(x.reshape(-1))
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    _softmax_tail_bug_kernel[(M,)](y, padded, N, 1, y.stride(0), N, BLOCK=block)
    return y


@triton.jit
def _softmax_fp16_acc_kernel(out_ptr, in_ptr, in_row_stride, in_col_stride, out_row_stride, n_cols,
                             TILE: tl.constexpr):
    row = tl.program_id(0)
    in_row = in_ptr + row * in_row_stride
    row_max = tl.full((), -float("inf"), tl.float32)
    for start in range(0, n_cols, TILE):
        cols = start + tl.arange(0, TILE)
        x = tl.load(in_row + cols * in_col_stride, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
        row_max = tl.maximum(row_max, tl.max(x, axis=0))
    # BUG: the running sum over tiles is kept in float16: one rounding per tile, drifting with N.
    total = tl.full((), 0.0, tl.float16)
    for start in range(0, n_cols, TILE):
        cols = start + tl.arange(0, TILE)
        x = tl.load(in_row + cols * in_col_stride, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
        total = (total.to(tl.float32) + tl.sum(tl.exp(x - row_max), axis=0)).to(tl.float16)
    for start in range(0, n_cols, TILE):
        cols = start + tl.arange(0, TILE)
        x = tl.load(in_row + cols * in_col_stride, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
        y = tl.exp(x - row_max) / total.to(tl.float32)
        tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=cols < n_cols)


@softmax.implementation("triton_fp16_acc", backend="triton")
def softmax_triton_fp16_acc(x):
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    _softmax_fp16_acc_kernel[(M,)](y, x, x.stride(0), x.stride(1), y.stride(0), N, TILE=16)
    return y


@triton.jit
def _softmax_no_max_kernel(out_ptr, in_ptr, in_row_stride, in_col_stride, out_row_stride, n_cols,
                           BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_row_stride + cols * in_col_stride, mask=mask, other=-float("inf")).to(tl.float32)
    # BUG: no max-subtraction: exp(x) overflows to inf for x > ~88 and inf/inf is NaN.
    num = tl.exp(x)
    den = tl.sum(num, axis=0)
    tl.store(out_ptr + row * out_row_stride + cols, (num / den).to(out_ptr.dtype.element_ty), mask=mask)


@softmax.implementation("triton_no_max", backend="triton")
def softmax_triton_no_max(x):
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    _softmax_no_max_kernel[(M,)](y, x, x.stride(0), x.stride(1), y.stride(0), N, BLOCK=triton.next_power_of_2(N))
    return y


@softmax.implementation("torch_out", backend="torch")
def softmax_torch_out(x, *, out):
    """Correct, writes into opgate's poisoned out= buffer."""
    out.copy_(torch.softmax(x.float(), dim=-1).to(out.dtype))


@triton.jit
def _softmax_rows_kernel(out_ptr, in_ptr, in_row_stride, in_col_stride, out_row_stride, n_cols,
                         ROWS: tl.constexpr, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    for r in range(ROWS):
        row = tl.program_id(0) * ROWS + r
        x = tl.load(in_ptr + row * in_row_stride + cols * in_col_stride, mask=mask, other=-float("inf"))
        x = x.to(tl.float32)
        num = tl.exp(x - tl.max(x, axis=0))
        y = num / tl.sum(num, axis=0)
        tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


@softmax.implementation("triton_grid_bug", backend="triton")
def softmax_triton_grid_bug(x, *, out):
    M, N = x.shape
    # BUG: floor division: with M not a multiple of 4 the last rows are never written.
    _softmax_rows_kernel[(M // 4,)](out, x, x.stride(0), x.stride(1), out.stride(0), N, ROWS=4,
                                    BLOCK=triton.next_power_of_2(N))


@softmax.implementation("triton_stride_bug", backend="triton")
def softmax_triton_stride_bug(x):
    M, N = x.shape
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    # BUG: assumes a contiguous row-major input (row stride N, column stride 1).
    _softmax_kernel[(M,)](y, x, N, 1, y.stride(0), N, BLOCK=triton.next_power_of_2(N))
    return y
