"""Dtype names as the spec writes them, and the numeric facts opgate needs about each: one table.

Every module that needs an element size, an epsilon, a range or the accumulation type reads `DTYPES`; torch is
imported lazily and only to turn a name into a torch dtype. `tests/core/test_dtypes.py` checks every row against
torch.finfo / torch.iinfo.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class DtypeFacts:
    name: str
    itemsize: int  # bytes per element
    kind: str  # "float", "int" or "bool"
    eps: float  # distance from 1.0 to the next value; 1.0 (one quantum) for integers
    max_finite: float
    min_finite: float
    smallest_normal: float  # 1.0 for integers
    accumulate: str  # the dtype a careful kernel accumulates sums of this dtype in


# IEEE 754-2008 binary64/32/16 (eps 2^-52/2^-23/2^-10); bfloat16 (8-bit exponent, 7-bit mantissa: eps 2^-7);
# float8 e4m3fn / e5m2 as in the OCP 8-bit floating point specification v1.0 (max 448 / 57344); integers
# two's complement. Accumulation: the fp32 accumulator of cuBLAS/cuDNN/Triton for 16- and 8-bit floats.
DTYPES: Mapping[str, DtypeFacts] = {f.name: f for f in (
    DtypeFacts("float64", 8, "float", 2.0**-52, 1.7976931348623157e308, -1.7976931348623157e308,
               2.2250738585072014e-308, "float64"),
    DtypeFacts("float32", 4, "float", 2.0**-23, 3.4028234663852886e38, -3.4028234663852886e38,
               1.1754943508222875e-38, "float32"),
    DtypeFacts("float16", 2, "float", 2.0**-10, 65504.0, -65504.0, 2.0**-14, "float32"),
    DtypeFacts("bfloat16", 2, "float", 2.0**-7, 3.3895313892515355e38, -3.3895313892515355e38,
               1.1754943508222875e-38, "float32"),
    DtypeFacts("float8_e4m3fn", 1, "float", 2.0**-3, 448.0, -448.0, 2.0**-6, "float32"),
    DtypeFacts("float8_e5m2", 1, "float", 2.0**-2, 57344.0, -57344.0, 2.0**-14, "float32"),
    DtypeFacts("int8", 1, "int", 1.0, 127.0, -128.0, 1.0, "int32"),
    DtypeFacts("uint8", 1, "int", 1.0, 255.0, 0.0, 1.0, "int32"),
    DtypeFacts("int16", 2, "int", 1.0, 32767.0, -32768.0, 1.0, "int32"),
    DtypeFacts("int32", 4, "int", 1.0, 2147483647.0, -2147483648.0, 1.0, "int64"),
    DtypeFacts("int64", 8, "int", 1.0, 9223372036854775807.0, -9223372036854775808.0, 1.0, "int64"),
    DtypeFacts("bool", 1, "bool", 1.0, 1.0, 0.0, 1.0, "int64"),
)}
FLOAT_DTYPES = tuple(name for name, f in DTYPES.items() if f.kind == "float")
INT_DTYPES = tuple(name for name, f in DTYPES.items() if f.kind != "float")
KNOWN_DTYPES = FLOAT_DTYPES + INT_DTYPES
ITEMSIZE: Mapping[str, int] = {name: f.itemsize for name, f in DTYPES.items()}

# Dtypes whose quality is usually stated as SQNR (signal to quantization noise) rather than ULPs.
SQNR_DTYPES = ("int8", "uint8", "float8_e4m3fn", "float8_e5m2")


def torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, name)


def dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def is_float(name: str) -> bool:
    return name in FLOAT_DTYPES


def is_integer(name: str) -> bool:
    return name in INT_DTYPES


def finfo(name: str) -> Any:
    import torch

    return torch.finfo(torch_dtype(name))


def eps(name: str) -> float:
    """Machine epsilon (distance from 1.0 to the next float); 1.0 for integer dtypes (one quantum)."""
    return DTYPES[name].eps


def max_finite(name: str) -> float:
    return DTYPES[name].max_finite


def min_finite(name: str) -> float:
    return DTYPES[name].min_finite


def smallest_normal(name: str) -> float:
    return DTYPES[name].smallest_normal
