"""CPU seconds a process burns while it waits for the GPU: CUDA's default (spin) beside blocking sync
(opgate/gpu/cuda_wait.py), in one run. Each child launches a kernel that sleeps on the GPU for SECONDS and waits for
it; its CPU time over that wait is what a library run's compiles lose to each waiting child.

    PYTHONPATH=src python3 benchmarks/cuda_wait.py [SECONDS]
"""

from __future__ import annotations

import os
import subprocess
import sys

CHILD = """
import resource, sys, time
from opgate.gpu import cuda_wait
reason = cuda_wait.apply_from_environment()
import torch
torch.cuda.init(); torch.ones(1, device="cuda").sum().item()
seconds = float(sys.argv[1])
cycles = int(seconds * torch.cuda.get_device_properties(0).clock_rate * 1e3)  # clock_rate is in kHz
before, began = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
torch.cuda._sleep(cycles)
torch.cuda.synchronize()
after, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - began
cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
print(f"{wall:.2f} {cpu:.2f} {reason or 'set'}")
"""


def main() -> None:
    seconds = sys.argv[1] if len(sys.argv) > 1 else "2"
    print(f"{'OPGATE_CUDA_WAIT':18} {'wait s':>7} {'CPU s':>6} {'CPU / wait':>10}  flag")
    for wanted in ("spin", "block"):
        done = subprocess.run([sys.executable, "-c", CHILD, seconds], capture_output=True, text=True,
                              env={**os.environ, "OPGATE_CUDA_WAIT": wanted}, timeout=120)
        if done.returncode:
            print(f"{wanted:18} failed: {done.stderr.strip().splitlines()[-1:]}")
            continue
        wall, cpu, reason = done.stdout.split(maxsplit=2)
        print(f"{wanted:18} {float(wall):7.2f} {float(cpu):6.2f} {float(cpu) / float(wall):10.2f}  {reason.strip()}")


if __name__ == "__main__":
    main()
