"""The terminal console every verb prints its tables to (`opgate`, `opgate fleet`, `opgate plan`), made in one place
below the command line so a sub-app needs no import of src/opgate/cli/main.py."""

from __future__ import annotations

import os

from rich.console import Console

# Tables are laid out to fit this many columns when output is piped (CI logs) and on wider terminals.
OUTPUT_COLUMNS = 100


def make_console() -> Console:
    """Terminal console at most OUTPUT_COLUMNS wide (the terminal's width when narrower); COLUMNS, when set,
    is the width asked for."""
    probe = Console()
    asked = os.environ.get("COLUMNS", "")
    if asked.isdigit() and int(asked) > 0:
        width = int(asked)
    else:
        width = min(probe.width, OUTPUT_COLUMNS) if probe.is_terminal else OUTPUT_COLUMNS
    return Console(highlight=False, width=width)
