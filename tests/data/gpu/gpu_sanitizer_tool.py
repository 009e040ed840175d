"""Standalone compute-sanitizer tools for GPU sessions (scripts/gpu_check.sh, scripts/gpu/isolation.sh):
the planted-bug suite (each planted bug must be caught, each clean twin must pass) and one Python target run
under one tool. Not part of the `opgate` CLI; `opgate verify --stages sanitizer` uses
`opgate.gpu.probes.sanitizer` directly.

    python3 tests/data/gpu/gpu_sanitizer_tool.py planted [--json PATH] [--log-dir DIR] [--case NAME ...]
    python3 tests/data/gpu/gpu_sanitizer_tool.py run --tool memcheck [--json PATH] TARGET [ARGS ...]

TARGET is a script (path.py), a module (pkg.mod) or a callable (pkg.mod:function). Run from the repository
root with PYTHONPATH=src.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_planted import CASES_BY_NAME, PLANTED_CASES  # noqa: E402

from opgate.gpu.probes.sanitizer import (TOOLS, SanitizerNotFound, SanitizerRun, find_compute_sanitizer,  # noqa: E402
                                         run_under_sanitizer, supported_tool_options)
from opgate.engine.atomic import write_atomically  # noqa: E402

PLANTED_SCRIPT = str(Path(__file__).resolve().with_name("gpu_planted.py"))


def sanitizer_version(path: str) -> str:
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    lines = [line.strip() for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    return " / ".join(lines[-2:]) if lines else "unknown"


def python_command(target: str, args: Sequence[str] = ()) -> list[str]:
    """The child command for a script (x.py), a module (pkg.mod) or a callable (pkg.mod:function)."""
    if target.endswith(".py"):
        if not Path(target).is_file():
            from opgate.model.errors import InputError

            raise InputError(f"script {target!r} does not exist; pass a .py file, a module or module:function")
        return [sys.executable, target, *args]
    if ":" in target:
        bootstrap = ("import importlib, sys; mod, fn = sys.argv[1].split(':', 1); "
                     "result = getattr(importlib.import_module(mod), fn)(*sys.argv[2:]); "
                     "sys.exit(result if isinstance(result, int) else 0)")
        return [sys.executable, "-c", bootstrap, target, *args]
    return [sys.executable, "-m", target, *args]


def run_python_under_sanitizer(target: str, args: Sequence[str] = (), tool: str = "memcheck",
                               **kwargs: Any) -> SanitizerRun:
    return run_under_sanitizer(python_command(target, args), tool, **kwargs)


# ------------------------------------------------------------------------------------- planted suite
@dataclass(frozen=True)
class PlantedOutcome:
    case: str
    tool: str
    what: str
    status: str  # "ok", "missed", "false_positive", "skipped", "error"
    caught: bool | None
    caught_by: str  # "finding", "exit code only (report not parsed)", ""
    clean_passed: bool | None
    bug_run: SanitizerRun | None
    clean_run: SanitizerRun | None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        first = None
        if self.bug_run is not None:
            hits = [f for f in self.bug_run.report.errors]
            first = hits[0].to_dict() if hits else None
        return {"case": self.case, "tool": self.tool, "what": self.what, "status": self.status,
                "caught": self.caught, "caught_by": self.caught_by, "clean_passed": self.clean_passed,
                "first_finding": first, "note": self.note,
                "bug_run": self.bug_run.to_dict() if self.bug_run else None,
                "clean_run": self.clean_run.to_dict() if self.clean_run else None}


def _child_record(run: SanitizerRun) -> dict[str, Any]:
    for line in run.stdout_tail.splitlines():
        if line.startswith("OPGATE_PLANTED "):
            try:
                return json.loads(line[len("OPGATE_PLANTED "):])
            except ValueError:
                return {}
    return {}


# Device-side findings decide the planted cases; API errors the runtime returns to CuPy on purpose (probing
# an attribute, say) would otherwise fail a clean twin for something that is not the kernel's doing.
COMMON_PLANTED_OPTIONS = (("--report-api-errors", "no"),)


def judge_planted(case: Any, bug: SanitizerRun, clean: SanitizerRun) -> tuple[str, bool, str, bool, str]:
    """(status, caught, caught_by, clean_passed, note) for one planted case; pure, no GPU."""
    # A finding of the expected kind in the planted kernel (or with no kernel named), or a finding of a kind
    # opgate does not know that names the planted kernel: either way the tool pointed at the bug.
    hits = [f for f in bug.report.errors
            if (f.kind in case.expected_kinds and (f.kernel is None or case.bug_kernel in f.kernel))
            or (f.kind == "other" and f.kernel is not None and case.bug_kernel in f.kernel)]
    others = [f for f in bug.report.errors if f not in hits]
    if hits:
        caught, caught_by = True, "finding"
    elif bug.sanitizer_flagged and not others:
        caught, caught_by = True, "exit code only (report not parsed)"
    else:
        caught, caught_by = False, ""
    clean_record = _child_record(clean)
    clean_errors = clean.report.errors
    clean_passed = (clean.returncode == 0 and not clean_errors and not clean.timed_out
                    and clean_record.get("status") == "verified")
    notes = []
    if bug.timed_out:
        notes.append("the bug run timed out")
    if not caught and others:
        notes.append("the sanitizer reported other errors instead: " + "; ".join(
            f"{f.kind} in {f.kernel or '?'}" for f in others[:3]))
    if caught_by.startswith("exit code"):
        notes.append("the sanitizer flagged errors opgate's parser did not recognise; see the log")
    if not clean_passed:
        why = (f"{len(clean_errors)} finding(s), first: {clean_errors[0].message}" if clean_errors
               else f"exit {clean.returncode}, program said {clean_record.get('status', 'nothing')}"
               f" ({clean_record.get('detail', '')})")
        notes.append(f"clean twin failed: {why}")
    if caught and clean_passed:
        status = "ok"
    elif not caught:
        status = "missed"
    else:
        status = "false_positive"
    return status, caught, caught_by, clean_passed, "; ".join(notes)


def _suite_result(outcomes: Sequence[PlantedOutcome], path: str, logs: Path, started: float,
                  complete: bool) -> dict[str, Any]:
    judged = [o for o in outcomes if o.status != "skipped"]
    if not complete:
        status = "incomplete"
    elif not judged:
        status = "skipped"
    else:
        status = "passed" if all(o.status == "ok" for o in judged) else "failed"
    return {
        "status": status,
        "sanitizer": path,
        "sanitizer_version": sanitizer_version(path),
        "caught": sum(1 for o in judged if o.caught),
        "clean_passed": sum(1 for o in judged if o.clean_passed),
        "judged": len(judged),
        "cases": [o.to_dict() for o in outcomes],
        "log_dir": str(logs),
        "duration_s": round(time.perf_counter() - started, 2),
    }


def run_planted_suite(cases: Sequence[str] | None = None, log_dir: str | os.PathLike[str] | None = None,
                      timeout_s: float = 240.0, on_progress: Any = None) -> dict[str, Any]:
    """Run each planted bug and its clean twin under the bug's tool; the suite's JSON-able result.
    `on_progress(result)` gets the result so far after every case (status "incomplete" until the end)."""
    started = time.perf_counter()
    selected = [CASES_BY_NAME[name] for name in cases] if cases else list(PLANTED_CASES)
    try:
        path = find_compute_sanitizer()
    except SanitizerNotFound as exc:
        return {"status": "skipped", "reason": str(exc), "cases": [], "duration_s": 0.0}
    from opgate.gpu.probes.device import gpu_unavailable_reason

    reason = gpu_unavailable_reason()
    if reason:
        return {"status": "skipped", "reason": reason, "cases": [], "duration_s": 0.0}
    logs = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix="opgate-planted-"))
    outcomes: list[PlantedOutcome] = []
    for case in selected:
        options, dropped = supported_tool_options(path, (*COMMON_PLANTED_OPTIONS, *case.tool_options))
        runs = {}
        for variant in ("bug", "clean"):
            runs[variant] = run_python_under_sanitizer(
                PLANTED_SCRIPT, [case.name, variant], case.tool, tool_options=options,
                timeout_s=timeout_s, log_path=logs / f"{case.name}.{variant}.{case.tool}.log")
        bug, clean = runs["bug"], runs["clean"]
        if _child_record(clean).get("status") == "unsupported":
            outcomes.append(PlantedOutcome(case.name, case.tool, case.what, "skipped", None, "", None, bug, clean,
                                           _child_record(clean).get("detail", "")))
            if on_progress is not None:
                on_progress(_suite_result(outcomes, path, logs, started, complete=False))
            continue
        status, caught, caught_by, clean_passed, note = judge_planted(case, bug, clean)
        if dropped:
            note = (note + "; " if note else "") + f"this compute-sanitizer lacks {', '.join(dropped)}"
        outcomes.append(PlantedOutcome(case.name, case.tool, case.what, status, caught, caught_by, clean_passed,
                                       bug, clean, note))
        if on_progress is not None:
            on_progress(_suite_result(outcomes, path, logs, started, complete=False))
    return _suite_result(outcomes, path, logs, started, complete=True)


# ------------------------------------------------------------------------------------------------ CLI
def _write_json(path: str | None, data: dict[str, Any]) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        write_atomically(Path(path), json.dumps(data, indent=2))


def exit_on_sigterm() -> None:
    """Turn SIGTERM (an outer `timeout`) into SystemExit, so cleanup code kills the children it started
    in their own sessions instead of leaving them running on the GPU."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def main(argv: list[str] | None = None) -> int:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(prog="tests/data/gpu/gpu_sanitizer_tool.py",
                                     description="Run code under compute-sanitizer and report findings.")
    sub = parser.add_subparsers(dest="command", required=True)
    planted = sub.add_parser("planted", help="run the planted bugs and their clean twins")
    planted.add_argument("--case", action="append", help="only this case (repeatable)")
    planted.add_argument("--json", help="write the suite's result here")
    planted.add_argument("--log-dir", help="keep each sanitizer log here")
    planted.add_argument("--timeout", type=float, default=240.0, help="seconds per sanitizer run (default 240)")
    run = sub.add_parser("run", help="run one Python target under one tool")
    run.add_argument("--tool", choices=TOOLS, default="memcheck")
    run.add_argument("--json", help="write the findings here")
    run.add_argument("--timeout", type=float, default=600.0)
    run.add_argument("target", help="script.py, package.module, or package.module:function")
    run.add_argument("args", nargs=argparse.REMAINDER)
    ns = parser.parse_args(argv)
    if ns.command == "planted":
        unknown = [c for c in ns.case or [] if c not in CASES_BY_NAME]
        if unknown:
            parser.error(f"unknown case {unknown[0]!r}; choose from {', '.join(CASES_BY_NAME)}")
        def progress(partial: dict[str, Any]) -> None:
            _write_json(ns.json, partial)
            last = partial["cases"][-1]
            print(f"  {last['case']}: {last['status']} ({last['tool']})", flush=True)

        result = run_planted_suite(ns.case, ns.log_dir, ns.timeout, on_progress=progress)
        _write_json(ns.json, result)
        for case in result["cases"]:
            print(f"{case['case']:18s} {case['tool']:10s} {case['status']:15s} caught={case['caught']} "
                  f"clean={case['clean_passed']} {case['note']}")
        print(f"planted suite: {result['status']}" + (f" ({result.get('reason')})" if result.get("reason") else
                                                      f", {result['caught']}/{result['judged']} caught, "
                                                      f"{result['clean_passed']}/{result['judged']} clean twins pass"))
        return {"passed": 0, "skipped": 0}.get(result["status"], 1)
    try:
        result_run = run_python_under_sanitizer(ns.target, ns.args, ns.tool, timeout_s=ns.timeout)
    except SanitizerNotFound as exc:
        print(f"skipped: {exc}")
        return 0
    _write_json(ns.json, result_run.to_dict())
    for finding in result_run.report.findings:
        where = f" in {finding.kernel}" if finding.kernel else ""
        who = f" thread {finding.thread} block {finding.block}" if finding.thread else ""
        print(f"{finding.severity}: {finding.kind}{where}{who}: {finding.message}")
    print(f"{result_run.tool}: {len(result_run.report.errors)} error finding(s), exit {result_run.returncode}")
    return 1 if result_run.sanitizer_flagged else 0


if __name__ == "__main__":
    sys.exit(main())
