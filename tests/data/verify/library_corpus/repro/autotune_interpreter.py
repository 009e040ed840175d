"""Repro: an autotuned fla kernel cannot run under Triton's CPU interpreter without a GPU driver.

    TRITON_INTERPRET=1 python autotune_interpreter.py          # on a machine with no GPU

fla.modules.activations.swish is decorated with @triton.autotune (several configs); Triton 3.9's Autotuner.run
benchmarks them through driver.active.get_benchmarker(), which raises before the kernel runs. Every size fails the
same way (declared 16 x 4096 and the 1 x 1 opgate shrank to), so it is no size limit and no bug in the kernel:
with the first config forced (what ../_corpus_env.py does) the same call matches torch to ~1 ulp.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from fla.modules.activations import swish  # noqa: E402

for shape in [(1, 1), (16, 4096), (17, 1000)]:
    x = torch.linspace(-8, 8, shape[0] * shape[1], dtype=torch.float32).reshape(shape)
    try:
        y = swish(x)
        print(shape, "ran, max |err| vs float64:", float((y.double() - F.silu(x.double())).abs().max()))
    except Exception as exc:  # noqa: BLE001
        print(shape, "raised", type(exc).__name__ + ":", exc)

from triton.runtime import autotuner  # noqa: E402

_orig = autotuner.Autotuner.prune_configs
autotuner.Autotuner.prune_configs = lambda self, kwargs, *a, **k: _orig(self, kwargs, *a, **k)[:1]
for shape in [(1, 1), (16, 4096), (17, 1000)]:
    x = torch.linspace(-8, 8, shape[0] * shape[1], dtype=torch.float32).reshape(shape)
    y = swish(x)
    print(shape, "first config forced, max |err| vs float64:", float((y.double() - F.silu(x.double())).abs().max()))
