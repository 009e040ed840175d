"""Child-process worker for the example and corpus tests: runs implementations under Triton's interpreter.

Triton picks interpreted or compiled mode when its own library functions are decorated, i.e. when triton is first
imported, so the interpreter needs TRITON_INTERPRET=1 before that import, in a fresh process. The tests run this
file with `python interpreter_cases.py MODE` and read one JSON list of records from stdout:

    examples        every example implementation x declared dtype on small shapes with tails, plus a strided case;
                    every ONNX model with onnxruntime; the committed .onnx files against make_onnx_models.py
    examples-quick  float32 only, first small shape
    examples-gpu    (run with TRITON_INTERPRET=0 on a CUDA machine) the examples' implementations, compiled, on the GPU
    corpus-load     load every corpus spec and report its implementations and BUGS metadata
    corpus          every corpus implementation on its operator's happy case and on every BUGS exposure case
    compile         (run with TRITON_INTERPRET=0) every Triton launch of every example and corpus implementation,
                    on small inputs of each declared dtype, compiled ahead of time to cubin for sm_80 and sm_90
                    instead of launched: catches what only the compiler checks (loop-carried types, dot shapes)

Each record carries the measured error of the implementation and of eager PyTorch in the same dtype (both against
the float64 truth); the tests judge them.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
EXAMPLES = REPO / "examples" / "ops"
CORPUS = REPO / "tests" / "data" / "verify" / "corpus"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "src"))

import torch  # noqa: E402

import harness  # noqa: E402
from opgate.core.spec import Operator, load_spec_file  # noqa: E402

# Small shapes that still cross block boundaries and leave tails; softmax N=4099 takes its multi-block path.
SMALL_DIMS: dict[str, list[dict[str, int]]] = {
    "softmax": [{"M": 5, "N": 300}, {"M": 2, "N": 4099}],
    "rmsnorm": [{"M": 3, "N": 1500}],
    "layernorm": [{"M": 3, "N": 1500}],
    "gelu": [{"M": 3, "N": 1000}],
    "matmul": [{"M": 33, "N": 65, "K": 100}],
    "quantize_int8": [{"M": 5, "N": 1000}],
    "dequantize_int8": [{"M": 5, "N": 1000}],
    "causal_attention": [{"B": 1, "H": 2, "S": 100, "D": 80}],
}


def example_specs() -> list[Path]:
    return sorted(p for p in EXAMPLES.glob("*.py") if p.name != "make_onnx_models.py")


def corpus_specs() -> list[Path]:
    return sorted(CORPUS.glob("*.py"))


def _measure(op: Operator, impl: str, case: harness.Case, device: str = "cpu") -> dict[str, Any]:
    args = harness.make_inputs(op, case, device)
    truth = harness.truth(op, args)
    eager = harness.baseline(op, args)
    record: dict[str, Any] = {
        "op": op.name, "impl": impl, "dtype": case.dtype, "dims": case.dims,
        "strided": list(case.noncontiguous), "nan": case.nan, "scale": case.scale,
        "eager_err": harness.rel_error(eager, truth), "quantized": op.quantized is not None,
    }
    try:
        out = harness.run_impl(op, impl, args)
        record["err"] = harness.rel_error(out, truth)
        record["out_dtype_ok"] = out.dtype == eager.dtype
        record["worst"] = _worst_element(out, truth)
    except Exception as exc:  # a crash is a result to report, not a worker failure
        record["err"] = float("inf")
        record["error"] = f"{type(exc).__name__}: {exc}"[:500]
    return record


def _worst_element(out: Any, truth: Any) -> dict[str, Any] | None:
    """Where the output is farthest from the truth (flat index, both values), so a failure names its element (it
    named the float32 GELU's -0.0 for -3.9e-4 at element 21 that led to pytorch/pytorch#188792, the first-call race
    in torch's oneMKL that opgate.engine.vml_dispatch resolves)."""
    if not (isinstance(out, torch.Tensor) and out.shape == truth.shape and truth.is_floating_point() and out.numel()):
        return None
    gap = (out.detach().cpu().double() - truth).abs().nan_to_num(nan=0.0, posinf=0.0)
    index = int(gap.reshape(-1).argmax())
    return {"index": index, "got": float(out.reshape(-1)[index]), "truth": float(truth.reshape(-1)[index])}


def _onnx_record(op: Operator, dims: dict[str, int]) -> dict[str, Any]:
    import onnx
    import onnxruntime as ort

    record: dict[str, Any] = {"op": op.name, "impl": "onnxruntime", "dtype": "float32", "dims": dims,
                              "quantized": op.quantized is not None}
    try:
        model = onnx.load(str(op.onnx_model_path))
        onnx.checker.check_model(model, full_check=True)
        record["input_names_ok"] = [i.name for i in model.graph.input] == [i.name for i in op.tensor_inputs]
        args = harness.make_inputs(op, harness.Case(dims, dtype="float32", seed=2))
        feeds = {s.name: a.contiguous().numpy() for s, a in zip(op.inputs, args) if isinstance(a, torch.Tensor)}
        session = ort.InferenceSession(str(op.onnx_model_path), providers=["CPUExecutionProvider"])
        truth = harness.truth(op, args)
        record["err"] = harness.rel_error(torch.from_numpy(session.run(None, feeds)[0]), truth)
        record["eager_err"] = harness.rel_error(harness.baseline(op, args), truth)
    except Exception as exc:
        record["err"] = float("inf")
        record["error"] = f"{type(exc).__name__}: {exc}"[:500]
    return record


def _onnx_current() -> list[dict[str, Any]]:
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_onnx_models", EXAMPLES / "make_onnx_models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [
        {"check": "onnx_current", "file": name, "ok": (EXAMPLES / name).read_bytes() == model.SerializeToString()}
        for name, model in module.build_models().items()
    ]


def _bf16_patch_check(ops: dict[str, Operator]) -> dict[str, Any]:
    """Triton's interpreter truncates float32 -> bfloat16; the harness patch must make the output equal eager's."""
    op = ops["dequantize_int8"]  # q * scale is exact in float32: only the final rounding can differ
    args = harness.make_inputs(op, harness.Case({"M": 4, "N": 256}, dtype="bfloat16"))
    expected = harness.baseline(op, args)
    truncated = harness.run_impl(op, "triton", args)
    undo = harness.patch_interpreter_bf16_rounding()
    try:
        rounded = harness.run_impl(op, "triton", args)
    finally:
        undo()
    return {"check": "bf16_patch", "patched_equal": torch.equal(rounded, expected),
            "unpatched_equal": torch.equal(truncated, expected)}


def run_examples_gpu() -> list[dict[str, Any]]:
    """Every example implementation, compiled Triton on the CUDA device, every dtype and small shape."""
    records: list[dict[str, Any]] = []
    for path in example_specs():
        for op in load_spec_file(path):
            for impl in op.implementations:
                for dtype in op.dtypes:
                    for dims in SMALL_DIMS[op.name]:
                        records.append({"check": "impl", **_measure(op, impl, harness.Case(dims, dtype=dtype, seed=1), "cuda")})
    return records


def run_examples(quick: bool) -> list[dict[str, Any]]:
    ops = {op.name: op for path in example_specs() for op in load_spec_file(path)}
    records: list[dict[str, Any]] = [{"check": "ops", "ops": {
        name: {"impls": {n: i.backend for n, i in op.implementations.items()}, "dtypes": list(op.dtypes),
               "onnx": str(op.onnx_model_path) if op.onnx_model_path else None,
               "onnx_exists": bool(op.onnx_model_path and op.onnx_model_path.is_file())}
        for name, op in ops.items()}}]
    for name, op in ops.items():
        all_dims = SMALL_DIMS[name][:1] if quick else SMALL_DIMS[name]
        strided = tuple(i.name for i in op.tensor_inputs if not i.contiguous)
        for impl in op.implementations:
            for dtype in ["float32"] if quick else op.dtypes:
                for dims in all_dims:
                    records.append({"check": "impl", **_measure(op, impl, harness.Case(dims, dtype=dtype, seed=1))})
            records.append({"check": "impl", **_measure(op, impl, harness.Case(all_dims[0], seed=1, noncontiguous=strided))})
        if op.onnx_model_path is not None:
            records.append({"check": "onnx", **_onnx_record(op, SMALL_DIMS[name][0])})
    if not quick:
        records += _onnx_current()
        records.append(_bf16_patch_check(ops))
    return records


def _corpus_module(path: Path) -> tuple[list[Operator], dict[str, Any]]:
    ops = load_spec_file(path)
    # load_spec_file registers the module under a name derived from the path; its BUGS dict is the metadata.
    module = next(m for m in sys.modules.values() if getattr(m, "__file__", None) == str(path))
    return ops, getattr(module, "BUGS", {})


def run_corpus_load() -> list[dict[str, Any]]:
    records = []
    for path in corpus_specs():
        try:
            ops, bugs = _corpus_module(path)
            records.append({"check": "load", "file": path.name, "ops": [op.name for op in ops],
                            "impls": {n: i.backend for op in ops for n, i in op.implementations.items()},
                            "docstrings": {n: bool((i.fn.__doc__ or "").strip()) for op in ops for n, i in op.implementations.items()},
                            "bugs": bugs})
        except Exception as exc:
            records.append({"check": "load", "file": path.name, "error": f"{type(exc).__name__}: {exc}"})
    return records


def run_corpus() -> list[dict[str, Any]]:
    records = []
    for path in corpus_specs():
        ops, bugs = _corpus_module(path)
        for op in ops:
            happy = harness.Case(op.default_dims())
            cases = [("happy", happy)] + [(bug, harness.case_from(meta["exposed_by"], op.default_dims())) for bug, meta in bugs.items()]
            for label, case in cases:
                for impl in op.implementations:
                    # A buggy implementation is measured on the happy case and on its own exposure case only.
                    if impl.startswith("bad_") and label not in ("happy", impl):
                        continue
                    records.append({"check": "corpus", "file": path.name, "case": label, **_measure(op, impl, case)})
    return records


TRITON_TYPES = {
    torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.float64: "fp64",
    torch.int8: "i8", torch.int32: "i32", torch.int64: "i64", torch.uint8: "u8",
}
COMPILE_TARGETS = ((80, "sm_80"), (90, "sm_90"))


def run_compile() -> list[dict[str, Any]]:
    """Compile (not launch) every Triton kernel the implementations would launch, for each target."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    records: list[dict[str, Any]] = []
    seen: set[tuple[Any, ...]] = set()
    current: dict[str, Any] = {}

    def compile_instead_of_launch(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> None:
        options = {k: kwargs.pop(k) for k in list(kwargs) if k in ("num_warps", "num_stages", "num_ctas")}
        values = dict(zip([p.name for p in self.params], args))
        values.update(kwargs)
        signature: dict[str, str] = {}
        constexprs: dict[str, Any] = {}
        for param in self.params:
            value = values[param.name]
            if param.is_constexpr:
                signature[param.name] = "constexpr"
                constexprs[param.name] = value
            elif isinstance(value, torch.Tensor):
                signature[param.name] = "*" + TRITON_TYPES[value.dtype]
            elif isinstance(value, bool):
                signature[param.name] = "i1"
            elif isinstance(value, int):
                signature[param.name] = "i32" if -(2**31) <= value < 2**31 else "i64"
            elif isinstance(value, float):
                signature[param.name] = "fp32"
            else:
                raise TypeError(f"{param.name}: cannot type {type(value).__name__} for compilation")
        key = (self.fn.__module__, self.fn.__name__, tuple(signature.items()), tuple(constexprs.items()), tuple(options.items()))
        if key in seen:
            return None
        seen.add(key)
        for capability, label in COMPILE_TARGETS:
            record = {"check": "compile", **current, "kernel": self.fn.__name__, "target": label,
                      "signature": signature, "constexprs": {k: str(v) for k, v in constexprs.items()}}
            try:
                compiled = triton.compile(
                    ASTSource(fn=self, signature=signature, constexprs=constexprs),
                    target=GPUTarget("cuda", capability, 32), options=options,
                )
                record["ok"] = bool(compiled.asm.get("cubin"))
            except Exception as exc:
                record["ok"] = False
                record["error"] = f"{type(exc).__name__}: {exc}"[:800]
            records.append(record)
        return None

    original = JITFunction.run
    JITFunction.run = compile_instead_of_launch  # type: ignore[method-assign]
    try:
        for path in example_specs() + corpus_specs():
            for op in load_spec_file(path):
                dims = SMALL_DIMS.get(op.name, [op.default_dims()])[0] if path.parent == EXAMPLES else op.default_dims()
                for impl_name, impl in op.implementations.items():
                    if impl.backend != "triton":
                        continue
                    for dtype in op.dtypes:
                        current.update({"file": f"{path.parent.name}/{path.name}", "op": op.name, "impl": impl_name, "dtype": dtype})
                        args = harness.make_inputs(op, harness.Case(dims, dtype=dtype))
                        try:
                            impl.fn(*args)
                        except Exception as exc:
                            records.append({"check": "compile", **current, "kernel": "?", "target": "-", "ok": False,
                                            "error": f"launcher: {type(exc).__name__}: {exc}"[:800]})
    finally:
        JITFunction.run = original  # type: ignore[method-assign]
    return records


def main(argv: list[str]) -> int:
    mode = argv[0] if argv else "examples"
    # Set here, not at import: the tests import this module for SMALL_DIMS and must not flip their own process.
    if mode not in ("compile", "examples-gpu"):
        if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
            print("triton was imported before TRITON_INTERPRET=1 could be set; run this file as a script", file=sys.stderr)
            return 3
        os.environ["TRITON_INTERPRET"] = "1"
    try:
        if mode in ("examples", "examples-quick"):
            records = run_examples(quick=mode == "examples-quick")
        elif mode == "corpus-load":
            records = run_corpus_load()
        elif mode == "corpus":
            records = run_corpus()
        elif mode == "compile":
            records = run_compile()
        elif mode == "examples-gpu":
            records = run_examples_gpu()
        else:
            print(f"unknown mode {mode!r}; use examples, examples-quick, examples-gpu, corpus-load, corpus or compile", file=sys.stderr)
            return 2
    except Exception:
        traceback.print_exc()
        return 3
    json.dump(records, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
