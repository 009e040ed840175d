"""A short run of scripts/fuzz_inspect.py (the full run is 100,000 inputs; see docs/inspect.md)."""

from __future__ import annotations


from inspect_helpers import SCRIPTS
from opgate_testing import script_module


def _fuzz_module():
    return script_module(SCRIPTS / "fuzz_inspect.py", "fuzz_inspect")


def test_two_thousand_mutated_inputs_raise_nothing_and_never_hang(tmp_path):
    fuzz = _fuzz_module()
    result = fuzz.fuzz(2000, fuzz.default_seed_files(), rng_seed=20261129, time_limit_s=5.0,
                       crash_dir=tmp_path / "crashes")
    assert result.inputs == 2000
    assert result.failures == [], result.failures[:3]
    assert result.hangs == 0


def test_mutations_reach_the_size_fields():
    """The seeds' header fields are found, so size-field rewrites hit containers and entries."""
    fuzz = _fuzz_module()
    seeds = fuzz.load_seeds(fuzz.default_seed_files())
    fatbin = next(s for s in seeds if s.name == "kernels.fatbin")
    offsets = {o for o, _ in fatbin.fields}
    assert {8, 16 + 4, 16 + 8, 16 + 56} <= offsets  # container size; first entry header size, payload, unpacked
