"""opgate inside your own test suite: one pytest test per implementation x dtype of softmax.py.

    pip install 'opgate[verify]'          # the plugin comes with opgate (entry point pytest11)
    pytest examples/test_softmax_with_opgate.py -v
    pytest examples/test_softmax_with_opgate.py -k "triton and float16"

Each test runs the same engine as `opgate verify examples/ops/softmax.py --budget quick --no-extras` (same
calibrated budgets, same replay tokens); a failure prints the smallest failing case and the replay command.
"""

import pytest

pytestmark = pytest.mark.opgate_spec("ops/softmax.py", budget="quick")


def test_softmax(opgate_case, opgate_verify):
    result = opgate_verify(opgate_case)
    assert result.outcome.value in ("passed", "warned")
