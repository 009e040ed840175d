"""The `opgate` command line. Each verb imports its machinery lazily so `--help` is instant."""

from __future__ import annotations

import os
import sys
import traceback
from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console

from opgate.errors import InputError
from opgate.results import ExitCode

app = typer.Typer(
    name="opgate",
    help="Decide whether a GPU operator, and the host stack that runs it, is ready for production.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

err_console = Console(stderr=True, highlight=False, soft_wrap=True)


class Level(str, Enum):
    basic = "basic"
    standard = "standard"


def _emit_reports(report, json_path: Optional[Path], junit_path: Optional[Path], console: Console,
                  verbose: bool) -> None:
    from opgate.reporting.json_report import write_json
    from opgate.reporting.junit import write_junit
    from opgate.reporting.terminal import render_terminal

    render_terminal(report, console, verbose=verbose)
    if json_path:
        write_json(report, json_path)
        console.print(f"JSON report: {json_path}")
    if junit_path:
        write_junit(report, junit_path)
        console.print(f"JUnit report: {junit_path}")


@app.command()
def doctor(
    level: Level = typer.Option(Level.basic, help="basic: software and deployment checks; "
                                "standard: adds measured GPU probes."),
    check: Optional[List[str]] = typer.Option(None, "--check", help="Run only this check (repeatable), "
                                               "e.g. --check interposition."),
    framework: Optional[List[str]] = typer.Option(None, "--framework", help="Python modules to import before "
                                                   "reading loaded libraries (repeatable; default: torch when "
                                                   "installed)."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Write the full report as JSON (atomically)."),
    junit_path: Optional[Path] = typer.Option(None, "--junit", help="Write a JUnit XML report, one testcase "
                                              "per check."),
    strict: bool = typer.Option(False, "--strict", help="Treat warnings as failures (exit 1)."),
    jobs: int = typer.Option(4, "--jobs", min=1, max=64, help="Checks run at once, each in its own process."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show every figure in the terminal table."),
    list_checks: bool = typer.Option(False, "--list", help="List the registered checks and exit."),
) -> None:
    """Is this host, container, driver and toolkit stack fit to run GPU operators?"""
    from opgate.checks.base import CheckContext
    from opgate.checks.registry import select_checks
    from opgate.session import run_session, tasks_for

    console = Console(highlight=False)
    specs = select_checks("doctor.", check)
    if list_checks:
        for spec in specs:
            console.print(f"{spec.name}  ({spec.target})")
        raise typer.Exit(0)
    ctx = CheckContext(verb="doctor", level=level.value, options={"frameworks": list(framework or [])})
    tasks, broken = tasks_for(specs, ctx)
    report = run_session("doctor", tasks, console, jobs=jobs, strict=strict, preset=broken,
                         extra={"level": level.value})
    _emit_reports(report, json_path, junit_path, console, verbose)
    raise typer.Exit(int(report.exit_code))


def _not_yet(verb: str) -> None:
    raise InputError(f"'opgate {verb}' is not yet available in this release; see the README for what ships now")


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def inspect(ctx: typer.Context) -> None:
    """What machine code and PTX do these binaries carry, and will they run on the fleet? (not yet available)"""
    _not_yet("inspect")


class Budget(str, Enum):
    quick = "quick"
    standard = "standard"
    thorough = "thorough"


@app.command()
def verify(
    spec: Path = typer.Argument(..., metavar="FILE.py", help="Python spec file that defines opgate.Operator objects."),
    op: Optional[List[str]] = typer.Option(None, "--op", help="Verify only this operator (repeatable)."),
    impl: Optional[List[str]] = typer.Option(None, "--impl", help="Verify only this implementation (repeatable), "
                                             "e.g. --impl triton --impl torch.compile."),
    dtype: Optional[List[str]] = typer.Option(None, "--dtype", help="Verify only these dtypes (repeatable or "
                                              "comma-separated; default: the operator's dtypes)."),
    seed: int = typer.Option(0, "--seed", min=0, help="Base seed of the case plan."),
    budget: Budget = typer.Option(Budget.standard, "--budget", help="How many cases: quick (~18 for a 2-dim op), "
                                  "standard (~44), thorough (~100); see docs/verify-method.md."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Write the full report as JSON (atomically)."),
    junit_path: Optional[Path] = typer.Option(None, "--junit", help="Write a JUnit XML report, one testcase "
                                              "per implementation x dtype."),
    replay: Optional[str] = typer.Option(None, "--replay", help="Re-run exactly one failing case from its "
                                         "replay token (ogv1....), against the same calibrated budget."),
    out: Path = typer.Option(Path("opgate-report"), "--out", help="Folder for artefacts: Triton IR per target, "
                             "checked ONNX models."),
    jobs: int = typer.Option(2, "--jobs", min=1, max=64, help="Implementations x dtypes run at once, each in "
                             "its own process."),
    extras: bool = typer.Option(True, "--extras/--no-extras", help="Also verify the reference through "
                                "torch.compile, ONNX Runtime (when the op has no ONNX implementation) and TVM."),
    shrink: bool = typer.Option(True, "--shrink/--no-shrink", help="Shrink a failure to the smallest failing "
                                "case."),
    timeout: Optional[float] = typer.Option(None, "--timeout", min=1.0, help="Seconds one implementation x dtype "
                                            "may run before it is killed (default: 300/600/1800 by budget)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show every figure in the terminal table."),
) -> None:
    """Is this operator correct on every backend and dtype, within a calibrated error budget?"""
    from opgate.verify.engine import VerifyRequest, run_verify

    console = Console(highlight=False)
    dtypes = [d.strip() for entry in (dtype or []) for d in entry.split(",") if d.strip()]
    request = VerifyRequest(
        spec_file=spec, ops=list(op or []), impls=list(impl or []), dtypes=dtypes, seed=seed,
        budget=budget.value, replay=replay, out_dir=out, extras=extras, shrink=shrink, jobs=jobs,
        timeout_s=timeout,
    )
    report = run_verify(request, console)
    _emit_reports(report, json_path, junit_path, console, verbose)
    raise typer.Exit(int(report.exit_code))


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def analyze(ctx: typer.Context) -> None:
    """Portability, occupancy and roofline for every target GPU. (not yet available)"""
    _not_yet("analyze")


@app.command()
def version() -> None:
    """Print opgate's version."""
    from opgate import __version__

    print(__version__)


def main(argv: Optional[List[str]] = None) -> None:
    """Console entry point: maps the three kinds of failure to exit codes 2 and 3."""
    try:
        app(args=argv, prog_name="opgate")
    except InputError as exc:
        err_console.print(f"opgate: error: {exc}")
        sys.exit(int(ExitCode.BAD_INPUT))
    except KeyboardInterrupt:
        err_console.print("opgate: interrupted")
        sys.exit(130)
    except SystemExit:
        raise
    except Exception:
        traceback.print_exc()
        err_console.print("opgate: internal error (a bug in opgate); please report the traceback above")
        sys.exit(int(ExitCode.INTERNAL_ERROR))
    # typer exits through SystemExit; reaching here means no command ran
    sys.exit(0)


if __name__ == "__main__":  # pragma: no cover
    main()
