"""The three kinds of failure, kept apart.

A check that found a problem is data (a CheckResult). A user or environment error is an
`InputError`, printed by the CLI as one line, exit 2. Anything else escaping is an opgate bug:
traceback and exit 3.
"""

from __future__ import annotations

from pathlib import Path


class InputError(Exception):
    """Bad usage or input: the message names the input, what is wrong, and what to do."""


class SkipCheck(Exception):
    """Raised inside a check when it cannot run here; the message is the reason shown to the user."""


def why_missing(path: "str | Path") -> str:
    """Why a path the user gave is not there, in a few words: a symbolic-link loop and a dangling link are not
    "no such file" (the link is there; what it points to is not)."""
    import errno
    import os

    if not os.path.islink(path):
        return "does not exist"
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "is a symbolic link that loops back on itself"
        return f"is a symbolic link to {os.readlink(path)}, which does not exist"
    return "does not exist"
