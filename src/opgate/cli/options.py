"""The command-line options several verbs share (`opgate doctor|inspect|verify|analyze` and `opgate fleet ...`),
defined once: each verb states only what differs (what a JUnit testcase is, what --verbose adds)."""

from __future__ import annotations

from typing import Any

import typer

JSON_REPORT_HELP = "Write the full report as JSON (atomically)."
STRICT_HELP = "Treat warnings as failures (exit 1)."


def json_report_option(help: str = JSON_REPORT_HELP) -> Any:
    return typer.Option(None, "--json", help=help)


def junit_option(testcase: str) -> Any:
    """--junit; `testcase` says what one testcase is ("check", "binary x target")."""
    return typer.Option(None, "--junit", help=f"Write a JUnit XML report, one testcase per {testcase}.")


def html_option() -> Any:
    return typer.Option(None, "--html", help="Write a self-contained HTML report.")


def markdown_option() -> Any:
    return typer.Option(None, "--markdown", help="Write a short Markdown summary (verdict, table, each failure "
                        "with its replay command) for a CI job page, e.g. then: cat it >> $GITHUB_STEP_SUMMARY.")


def history_option() -> Any:
    return typer.Option(None, "--history", help="Append this run to a history database: a SQLite path or a "
                        "SQLAlchemy URL (postgresql://...).")


def strict_option(help: str = STRICT_HELP) -> Any:
    return typer.Option(False, "--strict", help=help)


def verbose_option(help: str) -> Any:
    return typer.Option(False, "--verbose", "-v", help=help)
