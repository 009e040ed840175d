"""unsloth fast_rms_layernorm: the weight gradient dW in float16 / bfloat16, outside opgate.

opgate FAILed unsloth_rms_layernorm.grad in float16 (1/58 cases, dW element 1.37x its bound, M=3, N=3) and
bfloat16 (9/58 cases, up to 12.9x, smallest M=2, N=8) with class [precision]; float32 and dX passed.
Here, on random typical inputs (x ~ N(0,1), w ~ U(0.5, 1.5), upstream dY ~ N(0,1)), the library's dW and dX are
compared with the float64 truth (autograd of F.rms_norm on the same rounded inputs) and with PyTorch eager in the
same dtype (autograd of F.rms_norm, and transformers' LlamaRMSNorm formula: float32 compute, w * xhat.to(dtype)).
The error of each dW element is scaled by its condition sum_rows |dY x_hat| times the dtype's unit roundoff, so the
figure is "units of the dtype's rounding of the terms": a float32 accumulation of dtype-rounded terms stays ~1.

Run: TRITON_INTERPRET=1 python repro/rms_layernorm_half_dw.py   (no opgate import)
"""

import os
import sys
import types
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import _unsloth_env  # noqa: E402,F401
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from unsloth.kernels.rms_layernorm import fast_rms_layernorm  # noqa: E402

EPS = 1e-6
UNIT = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8, torch.float32: 2.0 ** -24}


def grads(fn, x, w, dy):
    x = x.detach().clone().requires_grad_(True)
    w = w.detach().clone().requires_grad_(True)
    fn(x, w).backward(dy)
    return x.grad, w.grad


def lib(x, w):
    return fast_rms_layernorm(types.SimpleNamespace(weight=w, variance_epsilon=EPS), x)


def eager(x, w):
    return F.rms_norm(x, (x.shape[-1],), w, EPS)


def llama(x, w):  # transformers' LlamaRMSNorm.forward
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)
    return w * h.to(x.dtype)


def scaled_dw_error(dw, dw64, x64, w64, dy64, unit):
    xhat = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + EPS)
    cond = (dy64 * xhat).abs().sum(0)
    return ((dw.double() - dw64).abs() / (cond * unit)).max().item()


def main():
    shapes = [(2, 8), (3, 3), (2, 64), (8, 1000), (16, 2048), (64, 512)]
    seeds = range(20)
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        unit = UNIT[dtype]
        print(f"== {dtype}: worst dW error over {len(seeds)} seeds, in units of sum|dY x_hat| x {unit:.3g}")
        print(f"{'M x N':>10} {'unsloth':>10} {'eager':>10} {'llama':>10} {'unsloth dX/eager dX (max abs err)':>36}")
        for m, n in shapes:
            worst = {"unsloth": 0.0, "eager": 0.0, "llama": 0.0}
            dx_ratio = 0.0
            for seed in seeds:
                g = torch.Generator().manual_seed(seed)
                x = torch.randn(m, n, generator=g).to(dtype)
                w = (torch.rand(n, generator=g) + 0.5).to(dtype)
                dy = torch.randn(m, n, generator=g).to(dtype)
                dx64, dw64 = grads(eager, x.double(), w.double(), dy.double())
                for name, fn in (("unsloth", lib), ("eager", eager), ("llama", llama)):
                    dx, dw = grads(fn, x, w, dy)
                    worst[name] = max(worst[name], scaled_dw_error(dw, dw64, x.double(), w.double(), dy.double(),
                                                                   unit))
                    if name == "unsloth":
                        lib_dx = (dx.double() - dx64).abs().max().item()
                    if name == "eager":
                        eager_dx = (dx.double() - dx64).abs().max().item()
                dx_ratio = max(dx_ratio, lib_dx / max(eager_dx, 1e-30))
            print(f"{m:>4} x {n:<5} {worst['unsloth']:10.3f} {worst['eager']:10.3f} {worst['llama']:10.3f} "
                  f"{dx_ratio:36.3f}")


if __name__ == "__main__":
    main()
