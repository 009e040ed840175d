"""What a process pays while it waits for the GPU, with CUDA's default (spin), yield and blocking sync
(opgate/gpu/cuda_wait.py), side by side in one run:

1. CPU seconds burned over one long wait (a kernel that sleeps on the GPU for SECONDS): what a library run's compiles
   lose to each waiting child.
2. Wall time of a sync-heavy loop (small kernels, each waited for: bound terms on the GPU look like this), on an idle
   machine and with every core busy: what a sleeping waiter pays to be woken.

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
torch.ones(1, device="cuda").sum().item()
seconds = float(sys.argv[1])
cycles = int(seconds * torch.cuda.get_device_properties(0).clock_rate * 1e3)  # clock_rate is in kHz
before, began = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
torch.cuda._sleep(cycles)
torch.cuda.synchronize()
after, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - began
cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
x = torch.ones(1024, device="cuda")
began = time.perf_counter()
for _ in range(SYNCS):
    x.add_(1)
    torch.cuda.synchronize()
loop = time.perf_counter() - began
print(f"{wall:.2f} {cpu:.2f} {loop:.3f} {reason or 'set'}")
"""
SYNCS = 2000
BURN = "while True: pass"


def run_child(wanted: str, seconds: str) -> list[str] | str:
    done = subprocess.run([sys.executable, "-c", CHILD.replace("SYNCS", str(SYNCS)), seconds], capture_output=True,
                          text=True, env={**os.environ, "OPGATE_CUDA_WAIT": wanted}, timeout=120)
    if done.returncode:
        return f"failed: {done.stderr.strip().splitlines()[-1:]}"
    return done.stdout.split(maxsplit=3)


def main() -> None:
    seconds = sys.argv[1] if len(sys.argv) > 1 else "2"
    cores = os.cpu_count() or 1
    print(f"{'OPGATE_CUDA_WAIT':16} {'machine':>14} {'wait s':>7} {'CPU s':>6} {'CPU/wait':>8} "
          f"{f'{SYNCS} syncs s':>12}  flag")
    for busy in (False, True):
        burners = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(cores if busy else 0)]
        try:
            for wanted in ("spin", "yield", "block"):
                got = run_child(wanted, seconds)
                machine = f"{cores} cores busy" if busy else "idle"
                if isinstance(got, str):
                    print(f"{wanted:16} {machine:>14} {got}")
                    continue
                wall, cpu, loop, reason = got
                print(f"{wanted:16} {machine:>14} {float(wall):7.2f} {float(cpu):6.2f} "
                      f"{float(cpu) / float(wall):8.2f} {float(loop):12.3f}  {reason.strip()}")
        finally:
            for burner in burners:
                burner.kill()
                burner.wait()


if __name__ == "__main__":
    main()
