"""Run an opgate spec inside your own pytest suite: one test per implementation x dtype.

    import pytest
    pytestmark = pytest.mark.opgate_spec("softmax.py", budget="quick")

    def test_softmax(opgate_case, opgate_verify):
        opgate_verify(opgate_case)

`opgate_case` is parametrized from the spec (ids like ``softmax-triton-float16``); `opgate_verify` runs the
same engine as `opgate verify` (`opgate.verify.engine`), so verdicts, budgets and replay tokens are the CLI's;
a failure prints the smallest failing case and the replay command. The pytest plugin (entry point
``pytest11: opgate``) does nothing in a suite that uses neither fixture nor marker.
"""

from __future__ import annotations

from opgate.testing.cases import OpgateCase, OpgateFailure, cases_for_spec, verify_case

__all__ = ["OpgateCase", "OpgateFailure", "cases_for_spec", "verify_case"]
