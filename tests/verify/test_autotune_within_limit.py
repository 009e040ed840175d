"""verify/backends/autotune_choice.configs_within_limit() on Triton's real Autotuner under its CPU interpreter (in a
child: the interpreter is chosen when triton is imported). Triton's benchmark needs a GPU driver, so the child stands in
for `Autotuner._bench` alone, with timings fixed per config: which configs reach the benchmark, which one is kept and
that it stays cached are Triton's code and the scope's."""

from __future__ import annotations

import textwrap

import pytest
from opgate_testing import interpreted_child_json

pytest.importorskip("triton")


CHILD = textwrap.dedent("""
    import json
    import torch, triton, triton.language as tl
    from triton.runtime.autotuner import Autotuner
    from opgate.verify.backends import autotune_choice

    benched = []

    def timed_by_config(self, *args, config, **meta):  # B / warps: the most elements a thread is the fastest here
        benched.append(autotune_choice.describe(config))
        return [1.0 / (config.kwargs.get("B", 1024) / config.num_warps)] * 3

    Autotuner._bench = timed_by_config  # before the scope patches Triton's methods (install)

    @triton.autotune(configs=[triton.Config({"B": b}, num_warps=w) for b, w in
                              ((8192, 1), (8192, 2), (1024, 4), (2048, 8), (8192, 4))], key=["n"])
    @triton.jit
    def write_wide(out_ptr, n, B: tl.constexpr):
        tl.store(out_ptr + tl.program_id(0), B // 1024)

    @triton.autotune(configs=[triton.Config({}, num_warps=w) for w in (1, 2, 8, 4)], key=["n"])
    @triton.jit
    def write_row(out_ptr, n, B: tl.constexpr):
        tl.store(out_ptr + tl.program_id(0), B // 1024)

    out = torch.zeros(1, dtype=torch.int32)
    runs = {}
    with autotune_choice.configs_within_limit() as summary:
        for n in (1, 2, 3):
            write_wide[(1,)](out, n)
        runs["wide_kept"] = int(out[0])
        runs["wide_benched"] = list(benched)
        benched.clear()
        write_row[(1,)](out, 1, B=65536)  # every config over the limit: the ones nearest it
        runs["row_benched"] = list(benched)
        runs["row_kept"] = int(out[0])
        benched.clear()
        with autotune_choice.rotating_configs() as nested:  # nested: changes nothing
            runs["nested"] = nested
    runs["summary"] = summary
    runs["wide_keys_after"] = len(write_wide.cache)
    write_wide[(1,)](out, 1)  # cached: no benchmark
    runs["benched_after"] = list(benched)
    write_wide[(1,)](out, 4)  # outside the scope: Triton's autotuning over every config
    runs["outside_benched"] = len(benched)
    print(json.dumps(runs))
""")


@pytest.fixture(scope="module")
def runs() -> dict:
    return interpreted_child_json(CHILD)


def test_only_the_configs_within_the_limit_are_benchmarked_and_the_fastest_of_them_kept(runs: dict) -> None:
    """8192 elements over 32 or 64 threads (256 and 128 a thread) are left out; the three within it are benchmarked
    at each key, and the autotuner keeps the fastest of those (here the most elements a thread: 8192 at 4 warps)."""
    within = ["B=1024, num_warps=4, num_stages=3", "B=2048, num_warps=8, num_stages=3",
              "B=8192, num_warps=4, num_stages=3"]
    assert runs["wide_benched"] == within * 3
    assert runs["wide_kept"] == 8
    entry = runs["summary"]["write_wide"]
    assert entry["configs"] == 5 and set(entry["benchmarked"].values()) == {3} and len(entry["benchmarked"]) == 3
    assert entry["over_thread_limit"] == {"B=8192, num_warps=1, num_stages=3": 3,
                                          "B=8192, num_warps=2, num_stages=3": 3}


def test_a_block_over_the_limit_in_every_config_keeps_the_configs_nearest_it(runs: dict) -> None:
    """B=65536 from the call: 256 elements a thread at 8 warps, the fewest there are; one config left, which Triton
    then runs without a benchmark."""
    assert runs["row_benched"] == []
    assert runs["row_kept"] == 64
    assert runs["summary"]["write_row"]["benchmarked"] == {"(1, 'torch.int32')": 1}  # the key: n, then dtypes
    assert set(runs["summary"]["write_row"]["over_thread_limit"]) == {
        "num_warps=1, num_stages=3", "num_warps=2, num_stages=3", "num_warps=4, num_stages=3"}


def test_the_choices_stay_cached_and_triton_autotunes_every_config_outside(runs: dict) -> None:
    """The warm-up's choice is what the timing in the same process runs (and Triton's disk cache keys it by the
    configs benchmarked, which the timing's scope prunes alike); a key first met outside the scope is Triton's."""
    assert runs["wide_keys_after"] == 3
    assert runs["benched_after"] == []
    assert runs["outside_benched"] == 5
    assert runs["nested"] == {}


def test_another_value_is_one_line_and_exit_2_before_any_work(tmp_path) -> None:
    import os
    from pathlib import Path

    from opgate_testing import run_opgate

    spec = Path(__file__).resolve().parents[1] / "data" / "verify" / "truth_corpus" / "softmax.py"
    env = {**os.environ, "OPGATE_RUNTIME_AUTOTUNE": "fastest"}
    proc = run_opgate(["verify", str(spec), "--stages", "numerics,runtime", "--out", str(tmp_path / "out")], env=env)
    assert proc.returncode == 2, proc.stdout[-1000:] + proc.stderr[-1000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "OPGATE_RUNTIME_AUTOTUNE='fastest'" in lines[0] and "within-limit" in lines[0]


def test_it_is_the_default_and_all_asks_for_every_config(monkeypatch: pytest.MonkeyPatch) -> None:
    from opgate.verify.backends import autotune_choice
    from opgate.verify.runtime import runtime_autotuning

    monkeypatch.setenv(autotune_choice.RUNTIME_AUTOTUNE_ENV, "all")
    assert not autotune_choice.within_limit_wanted()
    with runtime_autotuning() as summary:  # Triton's own autotuning: no scope
        assert summary is None
    from opgate.model.results import CheckResult, Outcome
    from opgate.verify.runtime import with_autotuning

    timed = CheckResult("verify.x.x.float32.runtime", "x", Outcome.PASSED, "9.0 us median", extra={"op": "x"})
    assert with_autotuning(timed, None) is timed
    monkeypatch.delenv(autotune_choice.RUNTIME_AUTOTUNE_ENV)
    assert autotune_choice.within_limit_wanted()
    monkeypatch.setenv(autotune_choice.RUNTIME_AUTOTUNE_ENV, "within-limit")
    assert autotune_choice.within_limit_wanted()
    with runtime_autotuning() as summary:  # the scope's summary, empty until a key is autotuned in it
        assert summary == {}
    # the report says the timing's config was chosen within the limit, even where its warm-up had chosen it
    assert with_autotuning(timed, {}).extra == {"op": "x", "autotune_within_limit": {},
                                                "autotune_scope": autotune_choice.RUNTIME_SCOPE}
