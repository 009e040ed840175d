"""`opgate diff`: load two reports (or one and the history's previous run), print what changed, exit 1 on a
regression."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from opgate.model.errors import InputError
from opgate.reporting.diff import diff_reports, parse_threshold, render_diff
from opgate.reporting.json_report import read_json


def run_diff(reports: Sequence[Path], threshold_text: str, against_last: str | None, as_json: bool) -> int:
    threshold = parse_threshold(threshold_text)
    if against_last:
        if len(reports) != 1:
            raise InputError("--against-last DB compares one NEW.json with the stored previous run; pass exactly "
                             "one report")
        from opgate.reporting.history import last_run_like

        new = read_json(reports[0])
        previous = last_run_like(against_last, new)
        if previous is None:
            raise InputError(f"history {against_last} has no earlier 'opgate {new.verb}' run of the same subject "
                             f"to compare {reports[0]} with; append one with --history first")
        run_id, base = previous
        base_name, new_name = f"{against_last} run {run_id}", str(reports[0])
    else:
        if len(reports) != 2:
            raise InputError(f"opgate diff takes BASE.json NEW.json (got {len(reports)} file(s)); or one NEW.json "
                             "with --against-last DB")
        base, new = read_json(reports[0]), read_json(reports[1])
        base_name, new_name = str(reports[0]), str(reports[1])
    diff = diff_reports(base, new, threshold)
    if as_json:
        print(json.dumps(diff.to_dict(), indent=2))
    else:
        for line in render_diff(diff, base_name, new_name):
            print(line)
    return int(diff.exit_code)
