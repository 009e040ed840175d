"""`opgate explain REPORT`: the limiter of every profiled kernel launch, in one line each, from an ncu CSV or
a saved `.ncu-rep` (read through `ncu --import`), on any machine."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

from opgate.errors import InputError
from opgate.gpu.limiter import Diagnosis, ceilings_for, diagnose, load_profiles


def explain_reports(paths: Sequence[Path], gpu: str | None = None, kernel: str | None = None) -> list[Diagnosis]:
    """Diagnoses of every launch in these reports (`kernel`: a regular expression on the kernel name)."""
    try:
        pattern = re.compile(kernel) if kernel else None
    except re.error as exc:
        raise InputError(f"--kernel {kernel!r} is not a regular expression ({exc})") from None
    found: list[Diagnosis] = []
    for path in paths:
        for profile in load_profiles(path):
            if pattern is not None and not pattern.search(profile.kernel):
                continue
            found.append(diagnose(profile, ceilings_for(gpu or profile.gpu_name)))
    if not found:
        raise InputError(f"no kernel launch in {', '.join(map(str, paths))} matches --kernel {kernel!r}; "
                         "drop --kernel to see them all")
    return found


def run_explain(paths: Sequence[Path], gpu: str | None, kernel: str | None, json_path: Path | None, verbose: bool,
                console) -> int:
    from rich.table import Table
    from rich.text import Text

    diagnoses = explain_reports(paths, gpu, kernel)
    for d in diagnoses:
        console.print(Text(f"{d.kernel} (launch {d.launch_id}): {d.limiter}", style="bold cyan"))
        console.print(f"  {d.line}", highlight=False)
        if verbose:
            table = Table(show_header=True, expand=False)
            table.add_column("figure")
            table.add_column("value", justify="right")
            table.add_column("unit")
            for name, value, unit in d.figures:
                table.add_row(name, str(value), unit)
            console.print(table)
    if json_path:
        import json

        from opgate.reporting.atomic import write_atomically

        write_atomically(json_path, json.dumps({"schema": "opgate.explain/1",
                                                "launches": [d.to_dict() for d in diagnoses]}, indent=2))
        console.print(f"JSON report: {json_path}")
    console.print(f"{len(diagnoses)} launch(es) explained — exit code 0", highlight=False)
    return 0
