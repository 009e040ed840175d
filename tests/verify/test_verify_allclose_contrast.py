"""The contrast docs/verify-method.md quotes: what one fixed-shape allclose sees of the softmax twins."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests_verify_support import DATA, SRC


def test_a_fixed_shape_allclose_misses_most_twins_that_opgate_flags():
    env = {**os.environ, "TRITON_INTERPRET": "1", "TRITON_DEFAULT_FP_FUSION": "1", "PYTHONPATH": str(SRC)}
    proc = subprocess.run([sys.executable, str(DATA / "allclose_contrast.py")], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {(r["impl"], r["dtype"]): r for r in json.loads(proc.stdout)}
    bugs = ("triton_tail_bug", "triton_fp16_acc", "triton_no_max", "triton_grid_bug", "triton_stride_bug")
    caught_fp16 = [b for b in bugs if not rows[(b, "float16")]["assert_close"]]
    assert caught_fp16 == ["triton_grid_bug"]  # opgate flags all five (test_verify_cli.py)
    for missed in ("triton_tail_bug", "triton_no_max", "triton_stride_bug"):
        assert rows[(missed, "float16")]["allclose"] and rows[(missed, "float32")]["assert_close"]
    assert not rows[("triton", "bfloat16")]["allclose"]  # fixed tolerances: a false positive on a correct kernel
