"""The three kinds of failure, kept apart.

A check that found a problem is data (a CheckResult). A user or environment error is an
`InputError`, printed by the CLI as one line, exit 2. Anything else escaping is an opgate bug:
traceback and exit 3.
"""

from __future__ import annotations


class InputError(Exception):
    """Bad usage or input: the message names the input, what is wrong, and what to do."""


class SkipCheck(Exception):
    """Raised inside a check when it cannot run here; the message is the reason shown to the user."""
