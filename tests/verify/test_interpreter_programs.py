"""verify/backends/interpreter_programs.py: under Triton's interpreter (in a child: the interpreter is chosen when
triton is imported) the programs a call launches are counted as it runs, and a dry run counts them without running
the kernels; a plan's cases get their dry counts (mispredicted_case_spec.py: one program per column)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("triton")

from tests_verify_support import DATA, ROOT, SRC  # noqa: E402

CHILD = textwrap.dedent("""
    import json, sys, time
    import torch
    from opgate.verify.backends import interpreter_programs as programs
    from opgate.verify.inputs import plan_cases
    from opgate.verify.backends.base import find_choice
    from opgate.verify.loaded_specs import loaded_operator

    op = loaded_operator(sys.argv[1], "column_scale")
    fn = op.implementations["columns"].fn
    x = torch.ones(3, 7)
    assert programs.install()
    dry = programs.dry_count(lambda: fn(x))
    with programs.counting() as ran:
        y = fn(x)
    raised = programs.dry_count(lambda: 1 / 0)
    cases = plan_cases(op, "standard", 0)
    counts = programs.plan_programs(op, find_choice(op, "columns"), "float32", cases, time.perf_counter)
    by_case = {c.label(): n for c, n in zip(cases, counts)}
    import os
    os.environ["OPGATE_INTERPRETER_PROGRAMS"] = "0"  # the element model alone (benchmarks/interpreter_program_budget.py)
    off = programs.plan_programs(op, find_choice(op, "columns"), "float32", cases, time.perf_counter)
    print(json.dumps({"dry": dry, "ran": ran["programs"], "y": float(y.sum()), "raised": raised,
                      "by_case": by_case, "off": sum(off), "dims": {c.label(): dict(c.dims) for c in cases}}))
""")


def test_a_dry_run_counts_the_programs_a_real_call_launches_and_each_plan_case_gets_its_count() -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(SRC)}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(DATA / "mispredicted_case_spec.py")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["dry"] == found["ran"] == 7  # one program per column
    assert found["y"] == 2.0 * 21  # the real call ran its kernel
    assert found["raised"] is None  # a call that raises has no count
    counted = {label: n for label, n in found["by_case"].items() if n}
    assert counted, found["by_case"]
    assert found["off"] == 0
    for label, n in counted.items():  # every counted case launches one program per column
        assert n == found["dims"][label]["H"], (label, n)
