"""`torch`: an eager PyTorch implementation, on the GPU when torch sees one, else on the CPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from opgate.model.results import Figure
from opgate.verify.backends.base import (
    Backend,
    ImplementationChoice, PreparedImplementation, accepts_out, enable_empty_poisoning, function_runner,
    implementation_function, torch_device,
)


def prepare(choice: ImplementationChoice, op: Any, dtype: str, workdir: Path) -> PreparedImplementation:
    import torch

    enable_empty_poisoning()
    device = torch_device()
    fn = implementation_function(op, choice)
    use_out = accepts_out(fn)
    return PreparedImplementation(
        choice=choice,
        device=device,
        run=function_runner(fn, device, use_out),
        facts={"torch": torch.__version__, "device": device},
        figures=[Figure("device", device, key="verify.numerics.device")],
        poisoned_out=use_out,
    )


class TorchEagerBackend(Backend):
    name = "torch"
    gpu_stages = True

    def prepare(self, choice: ImplementationChoice, op: Any, dtype: str, workdir: Path) -> PreparedImplementation:
        return prepare(choice, op, dtype, workdir)
