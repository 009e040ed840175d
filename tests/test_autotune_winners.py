"""scripts/gpu/autotune_winners.py: which config Triton's autotuner kept at each key, from the *.autotune.json files
of a run's Triton cache (the format Triton writes: the key and each config's __dict__ with its timings), and whether
it holds over 64 elements a thread; a folder with none is one line and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu" / "autotune_winners.py"


def _config(block: int | None, warps: int) -> dict:
    return {"kwargs": {"B": block} if block else {}, "num_warps": warps, "num_stages": 3, "num_ctas": 1,
            "maxnreg": None, "pre_hook": None}


def _store(folder: Path, kernel: str, key: list, timings: list) -> None:
    folder.mkdir(parents=True)
    (folder / f"{kernel}.autotune.json").write_text(json.dumps({"key": key, "configs_timings": timings}))


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def test_a_kept_config_over_the_limit_is_named_with_how_much_slower_the_best_within_is(tmp_path: Path) -> None:
    cache = tmp_path / "triton"
    # 8192 in one warp (256 a thread) the fastest: within the limit, 1024 in 4 warps is 10% slower
    _store(cache / "aa", "swish_fwd_kernel", [11008, "torch.float32"],
           [[_config(8192, 1), [1.0, 0.9, 1.1]], [_config(1024, 4), [1.1, 1.0, 1.2]],
            [_config(512, 2), [float("inf"), float("inf"), float("inf")]]])
    _store(cache / "bb", "swish_bwd_kernel", [11008, "torch.float16"],
           [[_config(8192, 1), [2.0, 1.9, 2.1]], [_config(2048, 8), [1.5, 1.4, 1.6]]])
    _store(cache / "cc", "l2norm_fwd_kernel_row", [128, "torch.float32"],  # the block comes from the call
           [[_config(None, 4), [0.3, 0.3, 0.3]], [_config(None, 8), [0.2, 0.2, 0.2]]])
    out = tmp_path / "rows.json"
    proc = _run(str(cache), "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = {row["kernel"]: row for row in json.loads(out.read_text())}
    assert rows["swish_fwd_kernel"]["kept"] == "B=8192, num_warps=1" and rows["swish_fwd_kernel"]["kept_over_limit"]
    assert rows["swish_fwd_kernel"]["within_slower_by"] == 0.1
    assert rows["swish_bwd_kernel"]["kept_over_limit"] is False
    assert "kept_over_limit" not in rows["l2norm_fwd_kernel_row"]
    assert proc.stdout.splitlines()[-1] == ("3 autotunings, 2 judged: 1 kept a config over 64 elements a thread "
                                            "(the best within the limit slower by +10.0% to +10.0%)")


def test_a_folder_without_stored_autotuning_is_one_line_and_exit_2(tmp_path: Path) -> None:
    proc = _run(str(tmp_path))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "TRITON_CACHE_AUTOTUNING" in proc.stderr
    proc = _run(str(tmp_path / "missing"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
