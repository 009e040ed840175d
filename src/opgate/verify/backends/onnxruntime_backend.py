"""`onnxruntime`: the spec's ONNX model (`op.onnx_model("x.onnx")`), or a torch function exported by opgate
with torch.onnx (the reference itself, or a user function registered with backend="onnxruntime").

Every model is checked with onnx.checker (full check, with shape inference) and saved, checked, in the
report folder; its opset is reported. It runs on the providers ONNX Runtime has: CUDA when present,
else CPU. A dtype the provider has no kernel for is `skipped` with ORT's own message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from opgate.model.errors import SkipCheck
from opgate.model.results import Figure
from opgate.verify.backends.base import Backend, ImplementationChoice, OutSpecs, PreparedImplementation, RunOutput
from opgate.verify.inputs import Case, make_inputs, resolve_dtype
from opgate.core.spec import Operator, Scalar

PREFERRED_PROVIDERS = ("CUDAExecutionProvider", "CPUExecutionProvider")
# ONNX Runtime's names for tensor element types, as the spec names dtypes.
ORT_TYPES = {
    "tensor(double)": "float64", "tensor(float)": "float32", "tensor(float16)": "float16",
    "tensor(bfloat16)": "bfloat16", "tensor(float8e4m3fn)": "float8_e4m3fn", "tensor(float8e5m2)": "float8_e5m2",
    "tensor(int8)": "int8", "tensor(uint8)": "uint8", "tensor(int16)": "int16", "tensor(int32)": "int32",
    "tensor(int64)": "int64", "tensor(bool)": "bool",
}


def providers() -> list[str]:
    import onnxruntime as ort

    available = ort.get_available_providers()
    return [p for p in PREFERRED_PROVIDERS if p in available] or ["CPUExecutionProvider"]


def example_case(op: Operator) -> Case:
    """Export at distinct sizes >= 2 per dim, so the exporter cannot specialise a dim to 1 or tie two dims."""
    sizes: dict[str, int] = {}
    used: set[int] = set()
    for dim, declared in op.dims.items():
        size = max(declared[0], 2)
        while size in used and dim not in op.exact_dims:
            size += 1
        used.add(size)
        sizes[dim] = size
    return Case.make(sizes, 0)


def export_function(op: Operator, fn: Any, dtype: str, path: Path) -> None:
    """torch.onnx.export (dynamo exporter) with every named dim dynamic; scalars are baked in."""
    import warnings

    import torch
    from torch.export import Dim

    generated = make_inputs(op, example_case(op), dtype)
    tensors = [v for v, spec in zip(generated.values, op.inputs) if not isinstance(spec, Scalar)]
    specs = op.tensor_inputs

    class Wrapped(torch.nn.Module):
        def forward(self, *tensor_args: Any) -> Any:
            it = iter(tensor_args)
            args = [inp.value if isinstance(inp, Scalar) else next(it) for inp in op.inputs]
            return fn(*args)

    dynamic = tuple({axis: Dim.DYNAMIC for axis, d in enumerate(spec.shape) if isinstance(d, str)
                     and d not in op.exact_dims} or None for spec in specs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # forward(*tensor_args) takes one varargs tuple: its dynamic shapes nest one level deeper
        program = torch.onnx.export(Wrapped().eval(), tuple(tensors), dynamo=True, dynamic_shapes=(dynamic,),
                                    input_names=[s.name for s in specs], verbose=False)
    program.save(str(path))


def _to_ort(value: Any) -> Any:
    import numpy as np
    import onnx
    import onnxruntime as ort
    import torch

    tensor = value.detach().cpu().contiguous()
    if tensor.dtype == torch.bfloat16:
        bits = tensor.view(torch.int16).numpy().view(np.uint16)
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, onnx.TensorProto.BFLOAT16)
    return ort.OrtValue.ortvalue_from_numpy(tensor.numpy())


def _from_ort(array: Any, expected_dtype: str) -> Any:
    import numpy as np
    import torch

    array = np.asarray(array)
    if expected_dtype == "bfloat16" and array.dtype.itemsize == 2 and array.dtype.kind != "f":
        return torch.from_numpy(array.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(array.copy())


def prepare(choice: ImplementationChoice, op: Operator, dtype: str, workdir: Path) -> PreparedImplementation:
    try:
        import onnx
        import onnxruntime as ort
    except ImportError as exc:
        raise SkipCheck(f"onnx/onnxruntime cannot be imported ({exc}); pip install onnx onnxruntime") from None

    workdir.mkdir(parents=True, exist_ok=True)
    if choice.origin == "onnx_model":
        source = op.onnx_model_path
        if source is None or not source.is_file():
            raise SkipCheck(f"the spec's ONNX model {source} does not exist")
        model = onnx.load(str(source))
        how = f"user model {source.name}"
    else:
        from opgate.verify.backends.base import implementation_function

        exported = workdir / f"{op.name}-{choice.name}-{dtype}.export.onnx"
        try:
            export_function(op, implementation_function(op, choice), dtype, exported)
        except Exception as exc:
            message = f"torch.onnx could not export {choice.describe()} in {dtype}: {type(exc).__name__}: " \
                      f"{str(exc).splitlines()[0] if str(exc) else ''}"
            if choice.origin == "reference":
                raise SkipCheck(message) from None
            raise RuntimeError(message) from None
        model = onnx.load(str(exported))
        how = "exported with torch.onnx (dynamo exporter)"
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as exc:
        if choice.origin != "reference":
            raise
        # opgate's own extra: torch.onnx exported the reference into a model onnx's checker refuses (an exporter
        # limit, e.g. cross_entropy's SoftmaxCrossEntropyLoss with a rank the shape inference disagrees with); no
        # verdict on the user's implementations depends on it
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SkipCheck(f"torch.onnx's export of the reference in {dtype} fails onnx's checker ({text[:200]}); "
                        "the reference through ONNX Runtime is not checked") from None
    opsets = {imp.domain or "ai.onnx": imp.version for imp in model.opset_import}
    checked = workdir / f"{op.name}.{choice.name}.{dtype}.onnx"
    onnx.save(model, str(checked))

    chosen = providers()
    try:
        session = ort.InferenceSession(str(checked), providers=chosen)
    except Exception as exc:  # NOT_IMPLEMENTED: the provider has no kernel for this dtype
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if "NOT_IMPLEMENTED" in text or "Could not find an implementation" in text:
            raise SkipCheck(f"ONNX Runtime {ort.__version__} ({', '.join(chosen)}) cannot run this model in "
                            f"{dtype}: {text}") from None
        if choice.origin == "reference" and "INVALID_GRAPH" in text:
            # opgate's own extra: ONNX Runtime's type rules refuse the exported reference in this dtype (its
            # NegativeLogLikelihoodLoss has no bfloat16, fla's cross-entropy on the H200); nothing the user wrote
            raise SkipCheck(f"ONNX Runtime {ort.__version__} refuses torch.onnx's export of the reference in {dtype} "
                            f"({text[:200]}); the reference through ONNX Runtime is not checked") from None
        raise
    input_names = [i.name for i in session.get_inputs()]
    output_names = [o.name for o in session.get_outputs()]
    tensor_specs = op.tensor_inputs
    if len(input_names) != len(tensor_specs):
        raise RuntimeError(f"the ONNX model has {len(input_names)} inputs ({', '.join(input_names)}), "
                           f"the spec declares {len(tensor_specs)} tensor inputs")
    for model_input, spec in zip(session.get_inputs(), tensor_specs):
        wanted = resolve_dtype(spec, dtype)
        has = ORT_TYPES.get(model_input.type, model_input.type)
        if has != wanted:  # a model built for one dtype does not implement the others
            raise SkipCheck(f"the ONNX model's input {model_input.name!r} is {has}, not {wanted}: "
                            f"this model does not implement {dtype}")

    def run(values: Sequence[Any], layouts: Sequence[str], out_specs: OutSpecs) -> RunOutput:
        tensors = [v for v, spec in zip(values, op.inputs) if not isinstance(spec, Scalar)]
        feeds = {name: _to_ort(t) for name, t in zip(input_names, tensors)}
        results = session.run_with_ort_values(output_names, feeds)
        outputs = []
        for i, result in enumerate(results):
            expected = out_specs[i][1] if i < len(out_specs) else ""
            outputs.append(_from_ort(result.numpy(), expected))
        return RunOutput(outputs, [0] * len(outputs))

    default_opset = opsets.get("ai.onnx", 0)
    prepared = PreparedImplementation(
        choice=choice,
        device=chosen[0],
        run=run,
        facts={"onnxruntime": ort.__version__, "onnx": onnx.__version__, "providers": chosen,
               "opsets": opsets, "model": how, "checked_model": str(checked), "ir_version": model.ir_version},
        figures=[Figure("ONNX opset", default_opset, key="verify.numerics.onnx_opset"),
                 Figure("ORT provider", chosen[0], key="verify.numerics.ort_provider")],
        notes=[f"model {how}, onnx.checker passed (full check), opset {default_opset}"],
    )
    prepared.collect_artefacts = lambda folder: _keep_model(checked, folder)
    return prepared


def _keep_model(checked: Path, folder: Path) -> list[str]:
    import shutil

    folder.mkdir(parents=True, exist_ok=True)
    target = folder / checked.name
    shutil.copyfile(checked, target)
    return [str(target)]


class OnnxRuntimeBackend(Backend):
    name = "onnxruntime"
    extra = True
    extra_rank = 2

    def prepare(self, choice: ImplementationChoice, op: Any, dtype: str, workdir: Path) -> PreparedImplementation:
        return prepare(choice, op, dtype, workdir)
