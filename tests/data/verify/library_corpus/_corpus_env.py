"""Shared set-up for the library corpus's spec files (imported by them; defines no operator).

Triton's autotuner cannot pick a config under TRITON_INTERPRET=1 on a machine without a GPU driver: with more than
one config left after pruning it benchmarks them through `driver.active.get_benchmarker()`, and Triton 3.9 raises
"RuntimeError: 0 active drivers ([]). There should only be one." Almost every fla kernel is autotuned, so on the CPU
every such call fails before the kernel runs, whatever the kernel computes (see README.md: this is what a user of
`opgate verify` meets on a CPU machine; `opgate analyze` patches the autotuner for the same reason, `opgate verify`
does not).

`interpreter_autotune_first_config()` keeps the first config the autotuner's own pruning leaves (Triton's
single-config path: no benchmark), only when the interpreter runs and no GPU driver is active. The kernels and
their configs are the library's; on a GPU nothing changes. Set LIBCORPUS_RAW_AUTOTUNE=1 to leave Triton alone and
see the unpatched behaviour.
"""

from __future__ import annotations

import os


def _no_gpu_driver() -> bool:
    try:
        from triton.runtime import driver

        driver.active  # noqa: B018  (raises when no driver is active)
        return False
    except Exception:
        return True


def interpreter_autotune_first_config() -> bool:
    """Patch Triton's Autotuner to run the first pruned config under the CPU interpreter; True when patched."""
    if os.environ.get("TRITON_INTERPRET") != "1" or os.environ.get("LIBCORPUS_RAW_AUTOTUNE") == "1":
        return False
    if not _no_gpu_driver():
        return False
    from triton.runtime import autotuner

    if getattr(autotuner.Autotuner, "_libcorpus_first_config", False):
        return True
    original = autotuner.Autotuner.prune_configs

    def first_config(self, kwargs, *args, **kw):  # type: ignore[no-untyped-def]
        return original(self, kwargs, *args, **kw)[:1]

    autotuner.Autotuner.prune_configs = first_config  # type: ignore[method-assign]
    autotuner.Autotuner._libcorpus_first_config = True  # type: ignore[attr-defined]
    return True


def every_third_row_ignored(labels, ignore_index: int = -100):
    """Labels with rows 1, 4, 7, ... set to ignore_index (row 0 always counts, so a mean is never 0/0)."""
    target = labels.clone()
    target[1::3] = ignore_index
    return target
