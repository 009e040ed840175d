"""The recovery check's fill of the GPU (gpu/probes/oom.py fill_until_oom), two ways in one run, GPU only.

A library run's 58 recovery checks fill the card three times each, one after another at the run's serial end (50 s
of checks on the forty-eighth session's H100). Each refusal of the fill is an out-of-memory error, and PyTorch's
message for each lists the processes on the card from NVML (about 50 in a library run). The way before
(`halving_from_a_64th`) halved its chunk from 1/64 of the card down to 2 MiB, about ten errors a fill; the fill now
allocates what cudaMemGetInfo says is free, less a margin, in one tensor first and halves only from that margin:
fewer errors, the same end (even 2 MiB more fails). Each trial here is the fill, then the filler freed and the cache
given back, as a recovery trial does.

    PYTHONPATH=src python3 benchmarks/oom_fill.py [--trials 5] [--contexts 48]

--contexts starts that many idle processes holding a CUDA context each, as a library run's warm workers do, so that
the out-of-memory messages list as many processes.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Iterator

MiB = 1 << 20


def halving_from_a_64th(torch: Any) -> tuple[list[Any], bool]:
    """The fill before the forty-ninth session: chunks halving from 1/64 of the card (at least 256 MiB) to 2 MiB."""
    from opgate.gpu.probes.oom import fill_halving

    _free, total = torch.cuda.mem_get_info()
    held: list[Any] = []
    return held, fill_halving(torch, max(256 * MiB, (total // 64) // (2 * MiB) * (2 * MiB)), held)


def _counting_errors(torch: Any) -> Callable[[], int]:
    """torch.empty wrapped to count the out-of-memory errors it raises; returns a reader of the count."""
    count = [0]
    original = torch.empty

    def empty(*args: Any, **kwargs: Any) -> Any:
        try:
            return original(*args, **kwargs)
        except torch.cuda.OutOfMemoryError:
            count[0] += 1
            raise

    torch.empty = empty
    return lambda: count[0]


def _trial(torch: Any, fill: Callable[[Any], tuple[list[Any], bool]]) -> tuple[float, float, float, bool]:
    """(seconds to fill, seconds to free and give the cache back, GiB held, whether it reached out of memory)."""
    torch.cuda.synchronize()
    began = time.perf_counter()
    held, hit = fill(torch)
    filled = time.perf_counter()
    gib = sum(t.numel() for t in held) / 2**30
    del held
    torch.cuda.empty_cache()
    return filled - began, time.perf_counter() - filled, gib, hit


@contextlib.contextmanager
def idle_contexts(count: int) -> Iterator[None]:
    """`count` idle processes holding a CUDA context each while the block runs (benchmarks/oom_trials.py uses it
    too)."""
    code = ("import sys, torch; torch.cuda.init(); torch.empty(1, device='cuda'); print('up', flush=True); "
            "sys.stdin.read()")
    procs = [subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for _ in range(count)]
    try:
        for proc in procs:
            proc.stdout.readline()
        yield
    finally:
        for proc in procs:
            proc.kill()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--contexts", type=int, default=0, help="idle processes holding a CUDA context each")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("oom_fill.py: no CUDA GPU here: this benchmark fills a GPU's memory", file=sys.stderr)
        return 2
    from opgate.gpu.probes.oom import fill_until_oom

    with idle_contexts(args.contexts):
        errors = _counting_errors(torch)
        ways = {"halving from 1/64 of the card (before)": halving_from_a_64th,
                "free first, halving from 64 MiB (now)": fill_until_oom}
        print(f"{torch.cuda.get_device_name()}, {args.contexts} idle CUDA contexts beside, {args.trials} trials a way "
              "(alternating)")
        rows: dict[str, list[tuple[float, float, float, bool, int]]] = {name: [] for name in ways}
        for _ in range(args.trials):
            for name, fill in ways.items():
                before = errors()
                fill_s, free_s, gib, hit = _trial(torch, fill)
                rows[name].append((fill_s, free_s, gib, hit, errors() - before))
        print(f"{'way':<38} {'fill s':>8} {'free s':>8} {'GiB':>6} {'errors':>7} {'reached':>8}")
        for name, trials in rows.items():
            print(f"{name:<38} {statistics.median(t[0] for t in trials):>8.3f} "
                  f"{statistics.median(t[1] for t in trials):>8.3f} {statistics.median(t[2] for t in trials):>6.1f} "
                  f"{statistics.median(t[4] for t in trials):>7.0f} {sum(t[3] for t in trials):>5}/{len(trials)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
