"""Write the small float32 ONNX models the example specs point at with `op.onnx_model(...)`.

Each model is one standard ONNX operator (the lowest opset that has it) with symbolic dims, so one file serves
every size the spec declares. Scalars the spec passes as `opgate.Scalar` (eps) and the quantization constants
are baked in as attributes or initializers, matching the spec's values.

    python examples/ops/make_onnx_models.py          # rewrites the .onnx files next to this script

The files are committed; rerun this after changing a spec's constants.
"""

from __future__ import annotations

import sys
from pathlib import Path

import onnx
from onnx import TensorProto, helper

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import layernorm  # noqa: E402  (constants shared with the specs)
import quantize  # noqa: E402
import rmsnorm  # noqa: E402

IR_VERSION = 10  # what onnxruntime >= 1.18 loads


def _value(name: str, shape: list[str | int], elem: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _model(
    name: str,
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    opset: int,
    initializers: list[onnx.TensorProto] | None = None,
) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=initializers or [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="opgate-examples")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


def build_models() -> dict[str, onnx.ModelProto]:
    mn = ["M", "N"]
    return {
        "softmax.onnx": _model(
            "softmax", [helper.make_node("Softmax", ["x"], ["y"], axis=-1)], [_value("x", mn)], [_value("y", mn)], 13
        ),
        "rmsnorm.onnx": _model(
            "rmsnorm",
            [helper.make_node("RMSNormalization", ["x", "w"], ["y"], axis=-1, epsilon=rmsnorm.EPS)],
            [_value("x", mn), _value("w", ["N"])],
            [_value("y", mn)],
            23,
        ),
        "layernorm.onnx": _model(
            "layernorm",
            [helper.make_node("LayerNormalization", ["x", "w", "b"], ["y"], axis=-1, epsilon=layernorm.EPS)],
            [_value("x", mn), _value("w", ["N"]), _value("b", ["N"])],
            [_value("y", mn)],
            17,
        ),
        "gelu.onnx": _model(
            "gelu", [helper.make_node("Gelu", ["x"], ["y"], approximate="none")], [_value("x", mn)], [_value("y", mn)], 20
        ),
        "matmul.onnx": _model(
            "matmul",
            [helper.make_node("MatMul", ["a", "b"], ["c"])],
            [_value("a", ["M", "K"]), _value("b", ["K", "N"])],
            [_value("c", ["M", "N"])],
            13,
        ),
        "quantize.onnx": _model(
            "quantize_int8",
            [helper.make_node("QuantizeLinear", ["x", "scale", "zero_point"], ["q"])],
            [_value("x", mn)],
            [_value("q", mn, TensorProto.INT8)],
            13,
            [
                helper.make_tensor("scale", TensorProto.FLOAT, [], [quantize.SCALE]),
                helper.make_tensor("zero_point", TensorProto.INT8, [], [quantize.ZERO_POINT]),
            ],
        ),
        "dequantize.onnx": _model(
            "dequantize_int8",
            [helper.make_node("DequantizeLinear", ["q", "scale"], ["y"], axis=1)],
            [_value("q", mn, TensorProto.INT8), _value("scale", ["N"])],
            [_value("y", mn)],
            13,
        ),
        "attention.onnx": _model(
            "causal_attention",
            [helper.make_node("Attention", ["q", "k", "v"], ["y"], is_causal=1)],
            [_value(n, ["B", "H", "S", "D"]) for n in ("q", "k", "v")],
            [_value("y", ["B", "H", "S", "D"])],
            23,
        ),
    }


def main() -> None:
    for filename, model in build_models().items():
        path = HERE / filename
        onnx.save(model, path)
        print(f"wrote {path.relative_to(HERE.parent.parent)} ({path.stat().st_size} bytes, opset {model.opset_import[0].version})")


if __name__ == "__main__":
    main()
