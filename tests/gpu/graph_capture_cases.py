"""Child-process driver for the graph-capture GPU tests: `python graph_capture_cases.py CASE` prints JSON.
Each case runs in a fresh process because a failed capture poisons PyTorch's CUDA generator for the process."""

from __future__ import annotations

import dataclasses
import json
import sys


def clean(x):
    return (x * 2.0 + 1.0).relu()


def reads_item(x):
    scale = x.abs().max().item()
    return x / scale


def synchronizes(x):
    import torch

    y = x * 2
    torch.cuda.synchronize()
    return y


def main(case: str) -> None:
    import torch

    from opgate.gpu.probes.graphs import check_graph_capture
    from opgate.gpu.probes.timing import time_cuda

    x = torch.randn(1 << 20, device="cuda")
    if case == "timing":
        sets = [(torch.randn(1 << 24, device="cuda"),) for _ in range(3)]
        print(json.dumps(time_cuda(clean, sets, repeats=20).to_dict()))
        return
    fn = {"clean": clean, "reads_item": reads_item, "synchronizes": synchronizes}[case]
    report = check_graph_capture(fn, (x,), (torch.randn_like(x),))
    print(json.dumps(dataclasses.asdict(report)))


if __name__ == "__main__":
    main(sys.argv[1])
