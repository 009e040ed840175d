"""Slurm glue: the one-line reason Slurm shows for a drained node, and the merge of per-node reports
written by an `srun --ntasks-per-node=1` sweep into one fleet report (baselines included).

    python -m opgate.fleet.slurm reason REPORT.json       # one line, exit 0 ready / 1 not ready
    python -m opgate.fleet.slurm merge --json fleet.json REPORT.json...   # exit code as every verb

Used by deploy/slurm/opgate-healthcheck.sh (HealthCheckProgram, Prolog, or by hand).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any, Sequence

from opgate.model.errors import InputError
from opgate.model.results import Outcome, RunReport

REASON_PREFIX = "opgate:"
MAX_REASON_CHARS = 200  # `scontrol show node` keeps the whole Reason; long ones are unreadable in sinfo -R
_UNSAFE = re.compile(r"[^\w .,:;=+/()<>%@-]")


def one_line_reason(report: RunReport) -> tuple[bool, str]:
    """(ready, reason): ready unless a check failed or could not complete; the reason names the first
    problem and how many more there are, in characters a Slurm Reason= can carry."""
    problems = [r for r in report.results if r.outcome in (Outcome.FAILED, Outcome.ERROR)]
    counts = report.counts()
    if not problems:
        summary = ", ".join(f"{n} {k}" for k, n in counts.items() if n)
        return True, f"{REASON_PREFIX} ready ({summary})"
    first = problems[0]
    more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
    text = f"{REASON_PREFIX} {first.outcome.value} {first.check_id}: {first.reason}".replace("\n", " ")
    text = _UNSAFE.sub("", text)
    limit = MAX_REASON_CHARS - len(more)
    if len(text) > limit:
        text = text[: limit - 3].rstrip() + "..."
    return False, text + more


def _read(path: Path) -> tuple[RunReport, dict[str, Any]]:
    """(the report, its document as written: a node's results for fleet_report, decoded there)."""
    from opgate.reporting.schema import decode_report

    try:
        document = json.loads(path.read_text())
        return decode_report(document), document
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(f"report {path} cannot be read ({exc}); pass a file written by opgate doctor --json") from exc


def gpus_from_report(report: RunReport) -> tuple[list[dict[str, Any]], str]:
    """GPU models and driver as the doctor's gpu_inventory check recorded them ("GPU0 name", "driver version")."""
    gpus, driver = [], ""
    for result in report.results:
        if not result.check_id.endswith("gpu_inventory"):
            continue
        for figure in result.figures:
            if figure.name == "driver version":
                driver = str(figure.value)
            match = re.match(r"GPU(\d+) name$", figure.name)
            if match:
                gpus.append({"index": int(match.group(1)), "model": str(figure.value)})
    for gpu in gpus:
        gpu["driver"] = driver
    return gpus, driver


def merge_reports(paths: Sequence[Path]) -> RunReport:
    from opgate.fleet.node_task import NodeOutcome
    from opgate.fleet.report import fleet_report, now_iso

    outcomes = []
    for path in paths:
        report, document = _read(path)
        gpus, driver = gpus_from_report(report)
        node = str(report.host.get("hostname") or path.stem)
        outcomes.append(NodeOutcome(node=node, hostname=node, gpus=gpus, driver=driver,
                                    exit_code=int(report.exit_code), duration_s=report.duration_s,
                                    report=document, extra={"report_file": str(path)}))
    return fleet_report("doctor", outcomes, now_iso(), sum(o.duration_s for o in outcomes), False,
                        {"source": "slurm srun sweep", "reports": len(paths)})


def main(argv: Sequence[str]) -> int:
    if len(argv) >= 2 and argv[0] == "reason":
        try:
            ready, reason = one_line_reason(_read(Path(argv[1]))[0])
        except InputError as exc:
            print(f"{REASON_PREFIX} no verdict: {exc}"[:MAX_REASON_CHARS])
            return 2
        print(reason)
        return 0 if ready else 1
    if len(argv) >= 3 and argv[0] == "merge" and argv[1] == "--json":
        from rich.console import Console

        from opgate.reporting.emit import ReportOutputs, emit
        from opgate.reporting.terminal import render_summary

        try:
            report = merge_reports([Path(p) for p in argv[3:]])
            emit(report, ReportOutputs(json=Path(argv[2])))
        except InputError as exc:
            print(f"opgate: error: {exc}", file=sys.stderr)
            return 2
        render_summary(report, Console(highlight=False, width=160))
        return int(report.exit_code)
    print("usage: python -m opgate.fleet.slurm reason REPORT.json | merge --json OUT.json REPORT.json...",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
