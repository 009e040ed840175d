"""A neighbour that is not opgate: fill GPU 0 with PyTorch allocations until only --leave-gib GiB are free, print
"filled", hold them for --hold-s seconds (or until killed). scripts/gpu/failure_classes.sh runs opgate verify beside it."""

from __future__ import annotations

import argparse
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--leave-gib", type=float, default=3.0)
    parser.add_argument("--hold-s", type=float, default=180.0)
    args = parser.parse_args()
    held = []
    chunk = 1 << 30
    while chunk >= 2 << 20:
        free, _ = torch.cuda.mem_get_info()
        if free - chunk < args.leave_gib * 2**30:
            chunk //= 2
            continue
        held.append(torch.empty(chunk, dtype=torch.uint8, device="cuda"))
    free, total = torch.cuda.mem_get_info()
    print(f"filled: holding {sum(t.numel() for t in held) / 2**30:.1f} GiB, {free / 2**30:.1f} of "
          f"{total / 2**30:.1f} GiB free", flush=True)
    time.sleep(args.hold_s)


if __name__ == "__main__":
    main()
