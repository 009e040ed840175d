"""Does what ran earlier in a process change the launch probe's figures?

`opgate doctor` runs the launch probe in a fresh child process and has measured 0.74-0.87 us per kernel replayed
from a CUDA graph on the H200; `benchmarks/probes_vs_torch.py` runs the same function after PyTorch and the
bandwidth probes in one process and has measured 0.99-1.02 us. This runs `measure_launch_latency` in fresh
processes after different preludes, each several times, and prints a table.

    PYTHONPATH=src python3 benchmarks/launch_after_other_work.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

PRELUDES = {
    "nothing (as the doctor runs it)": "",
    "torch initialised on the GPU": "import torch; torch.ones(1, device='cuda'); torch.cuda.synchronize()",
    "opgate HBM probe": "from opgate.gpu.probes.bandwidth import measure_hbm; measure_hbm(0, include_torch=False)",
    "PyTorch x.add_(1) launch loop": (
        "from opgate.gpu.probes import torch_equivalents as te; te.launch_overhead(0)"),
    "HBM probe, then PyTorch x.sum()": (
        "from opgate.gpu.probes.bandwidth import measure_hbm; measure_hbm(0, include_torch=True)\n"
        "from opgate.gpu.probes import torch_equivalents as te; te.hbm_read(0, 1 << 30)"),
}

MEASURE = ("\nfrom opgate.gpu.probes.launch import measure_launch_latency\n"
           "m = measure_launch_latency(0)\nprint(m.eager_us.median, m.graph_us.median)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print("| before the launch probe, in the same process | eager us/kernel (each run) | graph us/kernel (each run) |")
    print("|---|---|---|")
    failed = False
    for name, prelude in PRELUDES.items():
        eager, graph = [], []
        for _ in range(args.repeats):
            done = subprocess.run([sys.executable, "-c", prelude + MEASURE], capture_output=True, text=True,
                                  timeout=300)
            if done.returncode != 0:
                print(f"| {name} | failed: {done.stderr.strip().splitlines()[-1:]} | |")
                failed = True
                break
            e, g = (float(v) for v in done.stdout.split()[-2:])
            eager.append(e)
            graph.append(g)
        if eager:
            print(f"| {name} | {statistics.median(eager):.2f} ({', '.join(f'{v:.2f}' for v in eager)}) | "
                  f"{statistics.median(graph):.3f} ({', '.join(f'{v:.3f}' for v in graph)}) |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
