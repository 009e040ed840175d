"""What a single fixed-shape torch.allclose catches in the buggy-kernel corpus, for contrast with `opgate verify`.

For every implementation in tests/data/verify/corpus/*.py: inputs at the operator's first declared dims, float32,
seed 0, contiguous; one `torch.allclose(out, reference(*inputs))` with the default rtol=1e-5, atol=1e-8 (the
reference also run in float32, as such a unit test would). Prints a Markdown table and a summary.

    PYTHONPATH=src python scripts/allclose_baseline.py [--json PATH]

Without a CUDA device the Triton kernels run under Triton's interpreter (TRITON_INTERPRET=1 is set here, before
triton is imported).
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "data" / "verify" / "corpus"


def main(argv: list[str]) -> int:
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    sys.path.insert(0, str(ROOT / "tests" / "examples"))
    import harness
    from opgate.core.spec import load_spec_file

    rows = []
    for path in sorted(CORPUS.glob("*.py")):
        for op in load_spec_file(path):
            module = next(m for m in sys.modules.values() if getattr(m, "__file__", None) == str(path))
            bugs = getattr(module, "BUGS", {})
            args = harness.make_inputs(op, harness.Case(op.default_dims(), dtype="float32", seed=0), device)
            expected = op.reference(*args)
            for name in op.implementations:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    out = op.implementations[name].fn(*args)
                caught = not torch.allclose(out, expected)
                rows.append({
                    "implementation": name, "operator": op.name, "file": path.name,
                    "bug": bugs.get(name, {}).get("kind", "none (correct twin)"),
                    "buggy": name.startswith("bad_"), "allclose_fails": caught,
                    "dims": op.default_dims(),
                })

    twins_pass = {op: all(not r["allclose_fails"] for r in rows if r["operator"] == op and not r["buggy"]) for op in {r["operator"] for r in rows}}
    for r in rows:
        if not r["buggy"]:
            r["verdict"] = "false alarm" if r["allclose_fails"] else "passes"
        elif not r["allclose_fails"]:
            r["verdict"] = "no"
        else:
            # A failure that the correct twins share is the tolerance talking, not the bug.
            r["verdict"] = "yes" if twins_pass[r["operator"]] else "fails, as do the correct twins"
    print("| implementation | operator | bug kind | single allclose verdict |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['implementation']} | {r['operator']} | {r['bug']} | {r['verdict']} |")
    buggy = [r for r in rows if r["buggy"]]
    good = [r for r in rows if not r["buggy"]]
    print()
    print(f"Single fixed-shape allclose (rtol=1e-5, atol=1e-8, float32, first declared dims, seed 0; device {device}"
          f"{', Triton interpreter' if device == 'cpu' else ''}):")
    print(f"- buggy implementations it fails: {sum(r['allclose_fails'] for r in buggy)} of {len(buggy)}; "
          f"of those, failures the correct twins do not share (real catches): {sum(r['verdict'] == 'yes' for r in buggy)}")
    print(f"- correct implementations it fails (false alarms): {sum(r['allclose_fails'] for r in good)} of {len(good)}")
    if "--json" in argv:
        Path(argv[argv.index("--json") + 1]).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
