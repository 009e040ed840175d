"""Which config Triton's autotuner kept at each key of a run, read from the run's Triton cache: does it ever keep one
that holds more than the per-thread limit (verify/backends/autotune_choice.py), which the runtime stage leaves out
unless OPGATE_RUNTIME_AUTOTUNE=all, and how much slower is the best config within the limit there?

Triton stores each autotuning it benchmarked (with TRITON_CACHE_AUTOTUNING=1, as opgate's runtime stage sets it, or a
kernel's cache_results) as `<kernel>.autotune.json` in its cache folder: the key and every config's timings. Run it
on a library arm's TRITON_CACHE_DIR after the run (no GPU needed):

    python3 scripts/gpu/autotune_winners.py /tmp/opgate-ab-default-*/triton [--json F]

Elements a thread are counted from the config's own meta-parameters (the largest power of two among them, over
num_warps x 32): a block the call passes as a constexpr (fla's BD = next_power_of_2(D)) is not in the file, so a
kernel whose configs carry no power-of-two block is listed as not judged here.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

LIMIT = 64  # autotune_choice.ELEMENTS_PER_THREAD_LIMIT, repeated so the script runs without opgate on the path


def _median(timing: Any) -> float | None:
    """A config's time as Triton stored it: a number, or [median, low, high] (a failed config: inf)."""
    value = timing[0] if isinstance(timing, (list, tuple)) and timing else timing
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _power_of_two(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 1 and value & (value - 1) == 0


def elements_a_thread(config: dict[str, Any]) -> float | None:
    """The config's largest power-of-two meta-parameter over its threads; None where it has none."""
    blocks = [v for v in (config.get("kwargs") or {}).values() if _power_of_two(v)]
    if not blocks:
        return None
    return max(blocks) / ((config.get("num_warps") or 4) * 32)


def describe(config: dict[str, Any]) -> str:
    parts = [f"{k}={v}" for k, v in (config.get("kwargs") or {}).items()]
    return ", ".join(parts + [f"num_warps={config.get('num_warps')}"])


def read_autotuning(path: Path) -> dict[str, Any] | None:
    """One stored autotuning: kernel, key, the kept config, whether it is over the limit, and the best within."""
    try:
        data = json.loads(path.read_text())
        pairs = [(config, _median(timing)) for config, timing in data["configs_timings"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    timed = [(config, t) for config, t in pairs if t is not None and t == t and t != float("inf")]
    if not timed:
        return None
    kept, kept_t = min(timed, key=lambda pair: pair[1])
    loads = [(config, t, elements_a_thread(config)) for config, t in timed]
    judged = all(held is not None for _, _, held in loads)
    within = [(config, t) for config, t, held in loads if held is not None and held <= LIMIT]
    row: dict[str, Any] = {"kernel": path.name.removesuffix(".autotune.json"), "key": data.get("key"),
                           "configs": len(pairs), "kept": describe(kept), "kept_us": round(kept_t * 1e3, 3),
                           "kept_elements_a_thread": elements_a_thread(kept), "judged": judged}
    if judged and within:
        best, best_t = min(within, key=lambda pair: pair[1])
        row["kept_over_limit"] = (elements_a_thread(kept) or 0) > LIMIT
        row["best_within"] = describe(best)
        row["within_slower_by"] = round(best_t / kept_t - 1.0, 4) if kept_t > 0 else None
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cache_dir", type=Path, help="a Triton cache folder (TRITON_CACHE_DIR of the run)")
    parser.add_argument("--json", type=Path, help="write the rows here too")
    args = parser.parse_args(argv)
    if not args.cache_dir.is_dir():
        print(f"autotune_winners.py: {args.cache_dir}: not a folder; pass the run's TRITON_CACHE_DIR", file=sys.stderr)
        return 2
    rows = [row for path in sorted(args.cache_dir.rglob("*.autotune.json")) if (row := read_autotuning(path))]
    if not rows:
        print(f"autotune_winners.py: {args.cache_dir}: no stored autotuning (*.autotune.json); was "
              "TRITON_CACHE_AUTOTUNING=1 set for the run?", file=sys.stderr)
        return 2
    judged = [row for row in rows if "kept_over_limit" in row]
    over = [row for row in judged if row["kept_over_limit"]]
    for row in rows:
        verdict = ("not judged (no power-of-two block in its configs)" if "kept_over_limit" not in row else
                   f"OVER the limit; the best within it {row['within_slower_by']:+.1%}" if row["kept_over_limit"]
                   else "within the limit")
        print(f"{row['kernel']} {row['key']}: kept {row['kept']} of {row['configs']} ({row['kept_us']} us): {verdict}")
    print(f"{len(rows)} autotunings, {len(judged)} judged: {len(over)} kept a config over {LIMIT} elements a thread"
          + (f" (the best within the limit slower by {min(r['within_slower_by'] for r in over):+.1%} to "
             f"{max(r['within_slower_by'] for r in over):+.1%})" if over else ""))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
