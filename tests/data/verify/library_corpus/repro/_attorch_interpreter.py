"""Shared set-up of the attorch repros: on a machine without a GPU, attorch's kernels run in Triton's interpreter.

attorch 67c2772 asks for the GPU's compute capability at import (its conv kernels) and autotunes every kernel;
without a GPU this module answers (9, 0) (an H100/H200) and keeps one config per autotuned kernel (the
interpreter has no benchmarker; the config changes no value here). With a GPU it changes nothing."""

import os
import sys

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
    torch.cuda.get_device_capability = lambda *args, **kwargs: (9, 0)

import attorch  # noqa: E402
import triton  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu":
    for name, module in list(sys.modules.items()):
        if name.startswith("attorch."):
            for value in vars(module).values():
                if isinstance(value, triton.runtime.autotuner.Autotuner):
                    value.configs = value.configs[:1]
