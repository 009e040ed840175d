"""torch's first unary op in a fresh process, with and without opgate's VML warm-up (engine/vml_dispatch.py), side by
side in one run: how often the first call of erf / sqrt / exp on 3000 values (two intra-op chunks) differs from the
second call of the same op on the same values, and by how much (pytorch/pytorch#188792: oneMKL 2024.2's first-call
kernel choice races across threads).

    PYTHONPATH=src python benchmarks/vml_first_call.py [--processes 20] [--json F]

"plain" imports torch alone; "opgate" imports opgate first, as every opgate process and spec file does.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import sys
if sys.argv[1] == "opgate":
    import opgate  # noqa: F401
import torch
fn, dtype = getattr(torch, sys.argv[2]), getattr(torch, sys.argv[3])
x = torch.rand(3000, generator=torch.Generator().manual_seed(0), dtype=dtype) * 0.98 + 0.01
first, second = fn(x), fn(x)
gap = ((first - second).abs() / second.abs()).max().item()
print(int((first != second).sum()), gap)
"""


def first_calls(mode: str, fn: str, dtype: str, processes: int) -> tuple[int, float]:
    """(processes whose first call differed from their second, the largest relative difference seen)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    differed, worst = 0, 0.0
    for _ in range(processes):
        out = subprocess.run([sys.executable, "-c", CHILD, mode, fn, dtype], env=env, capture_output=True,
                             text=True, check=True).stdout.split()
        if int(out[0]):
            differed += 1
            worst = max(worst, float(out[1]))
    return differed, worst


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--processes", type=int, default=20)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    import torch

    rows = []
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {args.processes} fresh processes a cell")
    print(f"{'op':<6}{'dtype':<9}{'plain: differed':>18}{'worst rel':>12}{'opgate: differed':>19}{'worst rel':>12}")
    for fn in ("erf", "sqrt", "exp"):
        for dtype in ("float32", "float64"):
            plain = first_calls("plain", fn, dtype, args.processes)
            guarded = first_calls("opgate", fn, dtype, args.processes)
            rows.append([fn, dtype, f"{plain[0]}/{args.processes}", f"{plain[1]:.2g}",
                         f"{guarded[0]}/{args.processes}", f"{guarded[1]:.2g}"])
            print(f"{fn:<6}{dtype:<9}{rows[-1][2]:>18}{rows[-1][3]:>12}{rows[-1][4]:>19}{rows[-1][5]:>12}",
                  flush=True)
    if args.json:
        args.json.write_text(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(),
                                         "processes": args.processes, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
