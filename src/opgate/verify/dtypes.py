"""Dtype names as the spec writes them, and the few numeric facts opgate needs about each.

Torch is imported lazily: a spec is data until a backend runs it.
"""

from __future__ import annotations

from typing import Any

from opgate.verify.spec import FLOAT_DTYPES, INT_DTYPES

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
    return float(finfo(name).eps) if is_float(name) else 1.0


def max_finite(name: str) -> float:
    import torch

    if is_float(name):
        return float(finfo(name).max)
    if name == "bool":
        return 1.0
    return float(torch.iinfo(torch_dtype(name)).max)


def min_finite(name: str) -> float:
    import torch

    if is_float(name):
        return float(finfo(name).min)
    if name == "bool":
        return 0.0
    return float(torch.iinfo(torch_dtype(name)).min)


def smallest_normal(name: str) -> float:
    return float(finfo(name).smallest_normal) if is_float(name) else 1.0
