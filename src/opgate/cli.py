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


@app.command()
def inspect(
    paths: List[Path] = typer.Argument(..., help="Binaries (.so, executables, .o, .a), .cubin/.fatbin/.ptx "
                                       "files, wheels (.whl) or directories (searched recursively, Triton "
                                       "cache folders included)."),
    targets: Optional[str] = typer.Option(None, "--targets", help="Judge against these GPUs: catalogue names "
                                          "or architectures, comma-separated, each optionally @DRIVER, e.g. "
                                          "h100,a100@535.104.05,sm_89."),
    fleet: Optional[Path] = typer.Option(None, "--fleet", help="TOML fleet file: [[gpu]] tables with model "
                                         "(name or sm_XY), driver, optional name and count."),
    kernels: bool = typer.Option(False, "--kernels", help="Also list every kernel with registers, shared "
                                 "memory, stack, max threads and parameter size (decompresses the cubins)."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Write the full report as JSON (atomically)."),
    junit_path: Optional[Path] = typer.Option(None, "--junit", help="Write a JUnit XML report, one testcase "
                                              "per binary x target."),
) -> None:
    """What machine code and PTX do these binaries carry, and will they run on the fleet?

    Exit code 1 when a binary cannot run on a target (no SASS and no PTX the driver can compile),
    2 when an input cannot be read.
    """
    from opgate.inspect.command import run_inspect

    console = Console(highlight=False)
    raise typer.Exit(run_inspect(paths, targets, fleet, kernels, json_path, console, junit_path))


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def verify(ctx: typer.Context) -> None:
    """Is this operator correct on every backend and dtype? (not yet available)"""
    _not_yet("verify")


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
