"""A recovery check's out-of-memory trials (gpu/probes/oom.py run_trial), two ways in one run, GPU only.

A library run's recovery checks run one after another at the run's serial end, three trials each. In the
fifty-third session's H200 library run the trials' fills took 57 s of the checks' 68 s: 0.35-0.42 s a fill, where the
run's very first fill took 0.07 s. The way before freed the whole filler after each trial and filled the card again;
the way now keeps all but a room (twice the call's first peak and a slack) from the first fill to the last retry, so a
refill allocates only the room. Each "check" here is the three trials of one way on one call (an elementwise
operation on 256 MiB, a retry that fits in its room), the ways alternating which goes first.

    PYTHONPATH=src python3 benchmarks/oom_trials.py [--checks 5] [--contexts 48]

--contexts starts that many idle processes holding a CUDA context each, as a library run's warm workers do.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

from oom_fill import idle_contexts  # this script's folder is first on sys.path

TRIALS = 3


def _check(torch: Any, keep: bool) -> tuple[list[Any], float]:
    """One check's trials on x * 2 + 1 over 256 MiB of float32, as verify/oom_recovery.py runs them; (the trials,
    the seconds of the whole check after its first call)."""
    from opgate.gpu.probes.oom import Filler, first_call, run_trial

    x = torch.rand(64 << 20, device="cuda")

    def fn(t: Any) -> Any:
        return t * 2 + 1

    before, filler = first_call(torch, fn, (x,))
    filler = filler if keep else Filler(room_bytes=0)  # the way before: nothing kept, everything freed each trial
    began = time.perf_counter()
    try:
        trials = [run_trial(torch, fn, (x,), before, index, filler) for index in range(TRIALS)]
    finally:
        filler.release(torch)
    seconds = time.perf_counter() - began
    del x, before
    torch.cuda.empty_cache()
    return trials, seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checks", type=int, default=5)
    parser.add_argument("--contexts", type=int, default=0, help="idle processes holding a CUDA context each")
    args = parser.parse_args()
    if args.checks < 1 or args.contexts < 0:
        print("oom_trials.py: --checks must be at least 1 and --contexts at least 0", file=sys.stderr)
        return 2
    import torch

    if not torch.cuda.is_available():
        print("oom_trials.py: no CUDA GPU here: this benchmark fills a GPU's memory", file=sys.stderr)
        return 2
    with idle_contexts(args.contexts):
        ways = {"whole filler freed each trial (before)": False, "all but a room kept across trials (now)": True}
        rows: dict[str, list[tuple[list[Any], float]]] = {name: [] for name in ways}
        print(f"{torch.cuda.get_device_name()}, {args.contexts} idle CUDA contexts beside, {args.checks} checks of "
              f"{TRIALS} trials a way (alternating which goes first)")
        for k in range(args.checks):
            order = list(ways.items()) if k % 2 == 0 else list(reversed(ways.items()))
            for name, keep in order:
                rows[name].append(_check(torch, keep))
        head = " ".join(f"{f'fill {i} s':>9}" for i in range(TRIALS))
        print(f"{'way':<42} {head} {'recover s':>10} {'check s':>8} {'GiB':>6} {'reached':>8} {'recovered':>10} "
              f"{'freed all':>10}")
        for name, checks in rows.items():
            trials = [t for c in checks for t in c[0]]
            fills = " ".join(f"{statistics.median(c[0][i].fill_s for c in checks):>9.3f}" for i in range(TRIALS))
            recover_s = statistics.median(t.recover_s for t in trials)
            check_s = statistics.median(c[1] for c in checks)
            gib = statistics.median(t.filled_gib for t in trials)
            print(f"{name:<42} {fills} {recover_s:>10.3f} {check_s:>8.3f} {gib:>6.1f} "
                  f"{sum(t.oom_hit for t in trials):>4}/{len(trials)} "
                  f"{sum(t.recovered for t in trials):>7}/{len(trials)} {sum(t.freed_all for t in trials):>10}")
            bad = [t for t in trials if not t.recovered]
            if bad:
                print(f"  not recovered: {bad[0].mismatch}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
