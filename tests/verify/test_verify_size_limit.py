"""The size_limit deviation excuses a raise on a size opgate added only where the size is its reason (verify/check.py
_size_limited): not where the same error fails a smaller case, nor a non-contiguous case whose contiguous twin of the
same sizes passed. unsloth's cross-entropy (held-out corpus) raised "view size is not compatible with input tensor's
size and stride" on transposed labels at B=2, S=2, V=1 (a crash) and at B=3, S=13, V=192, which was excused."""

from __future__ import annotations

from opgate.verify.calibrate import CaseVerdict
from opgate.verify.check import CaseRecord, _size_limited
from opgate.verify.inputs import Case

DIMS = {"B": [1, 2], "V": [1, 64]}
VIEW_ERROR = "raised RuntimeError: view size is not compatible with input tensor's size and stride ({n} elements)"
BLOCK_ERROR = "raised ValueError: V={n} exceeds the maximum block size 65536"


def record(dims: dict[str, int], reason: str = "", layout: str = "contiguous", origin: str = "edge") -> CaseRecord:
    passed = not reason
    return CaseRecord(Case.make(dims, 0, layout=layout, origin=origin),
                      CaseVerdict(passed, () if passed else (reason,), (), ()))


def test_a_raise_only_above_the_declared_sizes_is_a_size_limit():
    big = record({"B": 1, "V": 65537}, BLOCK_ERROR.format(n=65537))
    empty = record({"B": 0, "V": 64}, "raised RuntimeError: cannot reshape tensor of 0 elements")
    small = record({"B": 2, "V": 64})
    assert _size_limited([big, empty], [big, empty, small], DIMS) == [big, empty]


def test_the_same_error_at_a_declared_size_is_not_a_size_limit():
    declared = record({"B": 2, "V": 1}, VIEW_ERROR.format(n=2), layout="transposed", origin="declared")
    added = record({"B": 3, "V": 192}, VIEW_ERROR.format(n=576), layout="transposed")
    assert _size_limited([declared, added], [declared, added], DIMS) == []


def test_a_non_contiguous_raise_whose_contiguous_twin_passed_is_not_a_size_limit():
    twin = record({"B": 3, "V": 192})
    strided = record({"B": 3, "V": 192}, "raised IndexError: index out of range", layout="strided")
    assert _size_limited([strided], [twin, strided], DIMS) == []
    both = record({"B": 3, "V": 192}, "raised IndexError: index out of range")  # contiguous raises too: the size
    assert _size_limited([strided, both], [strided, both], DIMS) == [strided, both]


def test_a_declared_case_or_a_wrong_value_is_never_a_size_limit():
    declared = record({"B": 3, "V": 192}, BLOCK_ERROR.format(n=192), origin="declared")
    wrong = record({"B": 3, "V": 192}, "out0: 3/20 sampled element(s) beyond their own bound")
    assert _size_limited([declared, wrong], [declared, wrong], DIMS) == []
