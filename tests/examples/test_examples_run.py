"""Every example operator's implementations compute the operator under Triton's interpreter on a CPU: small shapes
with block tails, each declared dtype, a strided case; the ONNX models are valid, current and agree with the truth.

The measurements come from interpreter_cases.py run in a child process (see conftest.py); the full dtype matrix is
marked slow, a float32 pass over every implementation is not.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest

import harness
from interpreter_cases import SMALL_DIMS

Worker = Callable[[str], list[dict[str, Any]]]


def _failures(records: list[dict[str, Any]]) -> list[str]:
    bad = []
    for r in records:
        if r.get("error"):
            bad.append(f"{r['impl']} {r['dtype']} {r['dims']}: raised {r['error']}")
            continue
        if r["quantized"]:
            # Integers: exact in float32; half inputs make x / scale itself inexact, so one step is allowed.
            ok = r["err"] <= (0 if r["dtype"] == "float32" else 1)
        else:
            ok = r["err"] <= harness.LOOSE_REL_TOL[r["dtype"]]
        if not ok or not r.get("out_dtype_ok", True):
            bad.append(f"{r['impl']} {r['dtype']} {r['dims']} strided={r.get('strided')}: rel error {r['err']:.3g}"
                       f" (eager {r.get('eager_err', float('nan')):.3g}), dtype ok={r.get('out_dtype_ok')}, "
                       f"worst element {r.get('worst')}")
    return bad


def test_every_example_declares_triton_torch_and_onnx(worker: Worker) -> None:
    ops = next(r for r in worker("examples-quick") if r["check"] == "ops")["ops"]
    assert set(ops) == set(SMALL_DIMS)
    for name, op in ops.items():
        assert {"triton", "torch"} <= set(op["impls"].values()), name
        assert op["onnx_exists"], f"{name}: {op['onnx']} missing"


@pytest.mark.parametrize("op_name", sorted(SMALL_DIMS))
def test_example_float32_matches_reference(worker: Worker, op_name: str) -> None:
    records = [r for r in worker("examples-quick") if r["check"] == "impl" and r["op"] == op_name]
    assert records
    assert not _failures(records), "\n".join(_failures(records))


@pytest.mark.slow
@pytest.mark.parametrize("op_name", sorted(SMALL_DIMS))
def test_example_every_dtype_matches_reference(worker: Worker, op_name: str) -> None:
    records = [r for r in worker("examples") if r["check"] == "impl" and r["op"] == op_name]
    assert {r["dtype"] for r in records} >= {"float32", "float16", "bfloat16"}
    assert not _failures(records), "\n".join(_failures(records))


@pytest.mark.parametrize("op_name", sorted(SMALL_DIMS))
def test_onnx_model_matches_reference(worker: Worker, op_name: str) -> None:
    [record] = [r for r in worker("examples-quick") if r["check"] == "onnx" and r["op"] == op_name]
    assert not record.get("error"), record.get("error")
    assert record["input_names_ok"], "ONNX graph inputs must be named and ordered like the spec's tensor inputs"
    assert not _failures([record]), "\n".join(_failures([record]))


@pytest.mark.slow
def test_committed_onnx_models_are_current(worker: Worker) -> None:
    stale = [r["file"] for r in worker("examples") if r["check"] == "onnx_current" and not r["ok"]]
    assert not stale, f"stale ONNX files {stale}: run `PYTHONPATH=src python examples/ops/make_onnx_models.py`"


@pytest.mark.slow
def test_interpreter_bf16_patch_restores_gpu_rounding(worker: Worker) -> None:
    """Triton's interpreter truncates float32 -> bfloat16; harness.patch_interpreter_bf16_rounding fixes that."""
    [record] = [r for r in worker("examples") if r["check"] == "bf16_patch"]
    assert record["patched_equal"]
    assert not record["unpatched_equal"]


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda_available(), reason="needs a CUDA device: torch.cuda.is_available() is False here")
@pytest.mark.parametrize("op_name", sorted(SMALL_DIMS))
def test_example_compiled_on_gpu_matches_reference(worker: Worker, op_name: str) -> None:
    records = [r for r in worker("examples-gpu") if r["op"] == op_name]
    assert records
    assert not _failures(records), "\n".join(_failures(records))
