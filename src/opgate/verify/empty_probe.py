"""Which of opgate's empty-tensor cases the reference survives, found in a child process.

An empty batch is where shipped bugs hide, so the plan adds size-0 cases; but a reference may do worse than raise
on them: PyTorch 2.11's CPU scaled_dot_product_attention killed the process with SIGFPE on an empty dim (seen on
the H200 host, 2026-12-01). The parent calibrates with the reference in its own process, so it first evaluates
every opgate-added empty case here, in a child, and keeps only those that return. The child prints "ok INDEX" for
each case that returned; a case that kills it is dropped and the child restarted after it.

Run as: python -m opgate.verify.empty_probe SPEC OP DTYPE CASES_JSON
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from opgate.verify.inputs import Case

PROBE_TIMEOUT_S = 120.0
MAX_RESTARTS = 4


def surviving_cases(spec_file: Path, op_name: str, dtype: str, cases: Sequence[Case]) -> set[int]:
    """Indices into `cases` whose reference evaluation returned (or raised: the parent then drops it cleanly)."""
    survived: set[int] = set()
    pending = list(range(len(cases)))
    for _ in range(MAX_RESTARTS + 1):
        if not pending:
            break
        payload = json.dumps([[i, cases[i].to_dict()] for i in pending])
        try:
            proc = subprocess.run([sys.executable, "-m", "opgate.verify.empty_probe", str(spec_file), op_name, dtype,
                                   payload], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
            stdout = proc.stdout
        except subprocess.TimeoutExpired as exc:
            stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        done = {int(line.split()[1]) for line in stdout.splitlines() if line.startswith(("ok ", "raised "))}
        survived |= done
        started = [int(line.split()[1]) for line in stdout.splitlines() if line.startswith("start ")]
        killed = [i for i in started if i not in done]
        remaining = [i for i in pending if i not in done and i not in killed]
        if remaining == pending:  # the child died before any case: give up on them all
            break
        pending = remaining
    return survived


def _main(argv: list[str]) -> int:
    import torch

    from opgate.verify.gradients import with_gradient_operators
    from opgate.verify.inputs import make_inputs
    from opgate.core.spec import load_spec_file

    spec, op_name, dtype, payload = argv
    op = next(o for o in with_gradient_operators(load_spec_file(spec)) if o.name == op_name)
    for index, data in json.loads(payload):
        print(f"start {index}", flush=True)
        case = Case.from_dict(data)
        try:
            generated = make_inputs(op, case, dtype)
            with torch.no_grad():
                op.reference(*generated.truth)
                op.reference(*generated.values)
        except Exception:
            print(f"raised {index}", flush=True)
            continue
        print(f"ok {index}", flush=True)
    return 0


if __name__ == "__main__":  # pragma: no cover - run as a child process
    sys.exit(_main(sys.argv[1:]))
