"""The one dtype table agrees with torch's own facts, row by row."""

from __future__ import annotations

import pytest

from opgate.core.dtypes import DTYPES, ITEMSIZE, KNOWN_DTYPES

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("name", KNOWN_DTYPES)
def test_row_matches_torch(name: str) -> None:
    facts = DTYPES[name]
    dtype = getattr(torch, name)
    assert facts.itemsize == ITEMSIZE[name] == torch.empty((), dtype=dtype).element_size()
    if facts.kind == "float":
        info = torch.finfo(dtype)
        assert (facts.eps, facts.max_finite, facts.min_finite, facts.smallest_normal) == (
            float(info.eps), float(info.max), float(info.min), float(info.smallest_normal))
    elif facts.kind == "int":
        info = torch.iinfo(dtype)
        assert (facts.max_finite, facts.min_finite) == (float(info.max), float(info.min))
