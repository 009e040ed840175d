"""Run every implementation of every example spec on a few cases and print its error against the float64 truth.

    PYTHONPATH=src python scripts/check_examples.py [--rne-bf16] [SPEC.py ...]

Without a CUDA device the Triton kernels run under Triton's interpreter (TRITON_INTERPRET=1 is set here, before any
spec imports triton). Each row shows max|out - truth| / max|truth| for the implementation and for the reference
run in the same dtype (eager PyTorch, the baseline opgate calibrates against), and their ratio. The ONNX models
are run with onnxruntime on float32. --rne-bf16 patches the interpreter's float32 -> bfloat16 cast to round to nearest
even as the GPU does (Triton 3.9's interpreter truncates; see tests/examples/harness.py). A simple oracle, not opgate's comparator: see tests/examples/harness.py.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def main(argv: list[str]) -> int:
    if not _has_cuda():
        os.environ["TRITON_INTERPRET"] = "1"
    sys.path.insert(0, str(ROOT / "tests" / "examples"))
    import harness
    from opgate.core.spec import load_spec_file

    device = "cuda" if _has_cuda() else "cpu"
    if "--rne-bf16" in argv:
        argv = [a for a in argv if a != "--rne-bf16"]
        if device == "cpu":
            harness.patch_interpreter_bf16_rounding()
    specs = [Path(a) for a in argv] or sorted((ROOT / "examples" / "ops").glob("*.py"))
    specs = [s for s in specs if s.name != "make_onnx_models.py"]
    print(f"{'operator':<18}{'impl':<12}{'dtype':<10}{'case':<34}{'impl err':>10}{'eager err':>11}{'ratio':>8}{'s':>7}")
    worst = 0.0
    for spec in specs:
        for op in load_spec_file(spec):
            first = op.default_dims()
            last = {d: sizes[-1] for d, sizes in op.dims.items()}
            strided = tuple(i.name for i in op.tensor_inputs if not i.contiguous)
            cases = [("first dims", harness.Case(first)), (f"last dims", harness.Case(last)),
                     ("first dims, strided", harness.Case(first, noncontiguous=strided))]
            for dtype in op.dtypes:
                for label, base_case in cases:
                    case = harness.Case(base_case.dims, dtype=dtype, noncontiguous=base_case.noncontiguous)
                    args = harness.make_inputs(op, case, device)
                    ref = harness.truth(op, args)
                    eager = harness.rel_error(harness.baseline(op, args), ref)
                    dims = ",".join(f"{k}={v}" for k, v in case.dims.items())
                    for name in op.implementations:
                        t0 = time.perf_counter()
                        err = harness.rel_error(harness.run_impl(op, name, args), ref)
                        dt = time.perf_counter() - t0
                        ratio = err / eager if eager > 0 else (0.0 if err == 0 else float("inf"))
                        print(f"{op.name:<18}{name:<12}{dtype:<10}{label + ' ' + dims:<34.34}{err:>10.2e}{eager:>11.2e}{ratio:>8.2f}{dt:>7.2f}")
                    if op.onnx_model_path is not None and dtype == "float32":
                        import onnxruntime as ort

                        sess = ort.InferenceSession(str(op.onnx_model_path), providers=["CPUExecutionProvider"])
                        feeds = {i.name: a.cpu().contiguous().numpy() for i, a in zip(op.inputs, args) if hasattr(a, "numpy")}
                        import torch

                        out = torch.from_numpy(sess.run(None, feeds)[0])
                        err = harness.rel_error(out, ref)
                        ratio = err / eager if eager > 0 else (0.0 if err == 0 else float("inf"))
                        print(f"{op.name:<18}{'onnx':<12}{dtype:<10}{label + ' ' + dims:<34.34}{err:>10.2e}{eager:>11.2e}{ratio:>8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
