"""verify/backends/autotune_choice.py on Triton's real Autotuner, under its CPU interpreter (in a child: the
interpreter is chosen when triton is imported): one config per key, stable, rotated, skipped when it cannot run,
and Triton's own autotuning back once the scope ends."""

from __future__ import annotations

import textwrap

import pytest
from opgate_testing import interpreted_child_json

pytest.importorskip("triton")


CHILD = textwrap.dedent("""
    import json, sys
    import torch, triton, triton.language as tl
    from triton.runtime.errors import OutOfResources
    from opgate.verify.backends import autotune_choice

    def refuse_big(nargs):
        if nargs["BLOCK"] == 64 and nargs["n"] == 40:  # as a GPU without the shared memory for this config would
            raise OutOfResources(1 << 20, 1 << 16, "shared memory")

    CONFIGS = [triton.Config({"BLOCK": b}, pre_hook=refuse_big) for b in (8, 16, 32, 64)]

    @triton.autotune(configs=CONFIGS, key=["n"])
    @triton.jit
    def write_block(out_ptr, n, BLOCK: tl.constexpr):
        tl.store(out_ptr + tl.program_id(0), BLOCK)

    def block_for(n):
        out = torch.zeros(1, dtype=torch.int32)
        write_block[(1,)](out, n)
        return int(out[0])

    runs = {}
    with autotune_choice.rotating_configs() as ran:
        runs["first"] = {n: block_for(n) for n in range(33, 49)}
        runs["again"] = {n: block_for(n) for n in range(33, 49)}
        runs["keys_inside"] = len(write_block.cache)
        block_for(40)
        runs["used"] = autotune_choice.take_used()
        runs["used_again"] = autotune_choice.take_used()
        # a subclass with its own run (FlagGems' LibTuner keeps a timing database): left alone
        from triton.runtime.autotuner import Autotuner
        own = triton.autotune(configs=CONFIGS, key=["n"])(write_block.fn)
        own.__class__ = type("OwnRun", (Autotuner,), {"run": lambda self, *a, **k: None})
        own.nargs = {"out_ptr": torch.zeros(1), "n": 33}
        runs["own_run_configs"] = len(own.prune_configs({}))
        # a subclass whose run ends in Triton's (fla's CachedAutotuner looks for a shipped config first): steered
        cached = triton.autotune(configs=CONFIGS, key=["n"])(write_block.fn)
        cached.__class__ = type("CachedFirst", (Autotuner,), {"run": lambda self, *a, **k: Autotuner.run(self, *a, **k)})
        out = torch.zeros(1, dtype=torch.int32)
        try:
            for n in range(33, 41):
                cached[(1,)](out, n)
            runs["super_run_keys"] = len(cached.cache)
        except Exception as exc:  # benchmarked as Triton does: no GPU driver here
            runs["super_run_keys"] = type(exc).__name__ + ": " + str(exc)[:80]
        # configs whose block holds over 64 elements a thread are left out while another config is within
        @triton.autotune(configs=[triton.Config({"B": b}, num_warps=w) for b, w in
                                  ((8192, 1), (8192, 2), (1024, 4), (2048, 8), (8192, 4))], key=["n"])
        @triton.jit
        def write_wide(out_ptr, n, B: tl.constexpr):
            tl.store(out_ptr + tl.program_id(0), B // 1024)

        wide = torch.zeros(1, dtype=torch.int32)
        runs["wide"] = []
        for n in range(1, 17):
            write_wide[(1,)](wide, n)
            runs["wide"].append(autotune_choice.take_used()["write_wide"])
        # a block the caller passes (fla's whole-row kernels: B = next_power_of_2(D)): past the limit in every config,
        # so the configs nearest it, the most warps, run
        @triton.autotune(configs=[triton.Config({}, num_warps=w) for w in (1, 2, 8, 4, 8)], key=["n"])
        @triton.jit
        def write_row(out_ptr, n, B: tl.constexpr):
            tl.store(out_ptr + tl.program_id(0), B // 1024)

        runs["row"] = []
        for n in range(1, 9):
            write_row[(1,)](wide, n, B=65536)
            runs["row"].append(autotune_choice.take_used()["write_row"])
        # a block a heuristic under the autotuner computes (attorch's whole-row kernels: next_power_of_2 of the row)
        @triton.autotune(configs=[triton.Config({}, num_warps=w) for w in (1, 2, 4, 8)], key=["n"])
        @triton.heuristics({"B": lambda args: triton.next_power_of_2(args["n"])})
        @triton.jit
        def write_derived(out_ptr, n, B: tl.constexpr):
            tl.store(out_ptr + tl.program_id(0), B // 1024)

        runs["derived"] = []
        for n in range(8000, 8016):
            write_derived[(1,)](wide, n)
            runs["derived"].append(autotune_choice.take_used()["write_derived"])
    runs["ran"] = ran
    runs["keys_after"] = len(write_block.cache)
    try:  # a GPU driver to benchmark with (a GPU host runs the interpreter with one)
        from triton.runtime import driver
        driver.active.get_current_target()
        runs["driver"] = True
    except Exception:
        runs["driver"] = False
    try:  # outside the scope: Triton's own path, which must benchmark (it cannot without a GPU driver)
        block_for(33)
        runs["outside"] = "ran"
    except Exception as exc:
        runs["outside"] = type(exc).__name__ + ": " + str(exc)[:80]
    runs["keys_benchmarked"] = len(write_block.cache)
    print(json.dumps(runs))
""")


@pytest.fixture(scope="module")
def runs() -> dict:
    return interpreted_child_json(CHILD)


def test_each_key_runs_one_config_and_the_plan_spreads_over_them(runs: dict) -> None:
    blocks = set(runs["first"].values())
    assert blocks <= {"8", "16", "32", "64"} or blocks <= {8, 16, 32, 64}
    assert len(blocks) >= 3, runs["first"]  # 16 keys over 4 configs: not one config for all


def test_the_choice_is_stable_for_a_key(runs: dict) -> None:
    assert runs["first"] == runs["again"]


def test_a_config_that_cannot_run_is_skipped_like_the_autotuner_skips_it(runs: dict) -> None:
    assert runs["first"]["40"] != 64
    kernel = runs["ran"]["write_block"]
    assert kernel["configs"] == 4
    assert len(kernel["ran"]) == 16


def test_a_case_can_name_the_config_it_ran(runs: dict) -> None:
    """What a failing case's reason names: the config of each autotuned kernel's last call, once."""
    assert runs["used"] == {"write_block": f"BLOCK={runs['first']['40']}, num_warps=4, num_stages=3"}
    assert runs["used_again"] == {}


def test_a_tuner_with_its_own_run_is_left_alone(runs: dict) -> None:
    assert runs["own_run_configs"] == 4


def test_a_tuner_whose_run_ends_in_tritons_is_steered(runs: dict) -> None:
    assert runs["super_run_keys"] == 8


def test_the_autotuners_forget_the_scope_and_autotune_as_triton_does_after(runs: dict) -> None:
    assert runs["keys_inside"] == 16
    assert runs["keys_after"] == 0
    if runs["driver"]:  # Triton benchmarked the configs and cached its own choice for the key
        assert runs["outside"] == "ran" and runs["keys_benchmarked"] == 1
    else:  # Triton's own autotuning benchmarks, and a CPU host has no driver for it
        assert runs["outside"] != "ran"


def test_a_config_holding_over_64_elements_a_thread_is_left_out_while_another_is_within(runs: dict) -> None:
    """8192 elements over 32 or 64 threads (256 and 128 a thread) compiled in 13 s and 3 s on one core, 27-118 s a case
    on a loaded H200 host; the three configs within the limit (64, 8 and 32 a thread) share the keys."""
    assert set(runs["wide"]) == {"B=1024, num_warps=4, num_stages=3", "B=2048, num_warps=8, num_stages=3",
                                 "B=8192, num_warps=4, num_stages=3"}, runs["wide"]
    left_out = runs["ran"]["write_wide"]["over_thread_limit"]
    assert left_out == {"B=8192, num_warps=1, num_stages=3": 16, "B=8192, num_warps=2, num_stages=3": 16}


def test_a_block_over_the_limit_in_every_config_runs_the_configs_nearest_it(runs: dict) -> None:
    """B=65536 from the call: 256 elements a thread at 8 warps, the fewest there are; both 8-warp configs share the
    keys (they are the same here), the 1-, 2- and 4-warp ones never run."""
    assert set(runs["row"]) == {"num_warps=8, num_stages=3"}, runs["row"]
    assert set(runs["ran"]["write_row"]["over_thread_limit"]) == {"num_warps=1, num_stages=3",
                                                                  "num_warps=2, num_stages=3",
                                                                  "num_warps=4, num_stages=3"}


def test_a_block_a_heuristic_computes_counts_toward_the_limit(runs: dict) -> None:
    """B = next_power_of_2(n) = 8192 from @triton.heuristics: 256 and 128 elements a thread at 1 and 2 warps are left
    out (attorch's NLL kernel ran a 32768-wide block in one warp on the H200 while the heuristic was not seen)."""
    assert set(runs["derived"]) <= {"num_warps=4, num_stages=3", "num_warps=8, num_stages=3"}, runs["derived"]
    assert runs["ran"]["write_derived"]["over_thread_limit"] == {"num_warps=1, num_stages=3": 16,
                                                                 "num_warps=2, num_stages=3": 16}


def test_the_environment_keeps_tritons_autotuning(monkeypatch: pytest.MonkeyPatch) -> None:
    from opgate.verify.backends import autotune_choice

    monkeypatch.setenv(autotune_choice.AUTOTUNE_ENV, "benchmark")
    assert not autotune_choice.wanted()
    monkeypatch.delenv(autotune_choice.AUTOTUNE_ENV)
    assert autotune_choice.wanted()
