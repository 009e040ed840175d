"""Scheduling switches read from the environment, for the A/B runs that decide their defaults.

A switch with a bad value is bad input: one line naming it, what is wrong and what to do (InputError, exit 2),
asked before any work, never a silent fall back to the default."""

from __future__ import annotations

import os

from opgate.model.errors import InputError


def slot_fraction(name: str, default: float, most: float) -> float:
    """The fraction of the run's slots environment variable `name` gives (a task kind's floor of slots), between
    0 and `most`; `default` when it is unset or empty."""
    given = os.environ.get(name, "").strip()
    if not given:
        return default
    try:
        wanted = float(given)
    except ValueError:
        wanted = -1.0
    if not 0.0 <= wanted <= most:
        raise InputError(f"{name}={given!r}: not a fraction of the slots between 0 and {most}; give one (default "
                         f"{default}) or unset it")
    return wanted


def process_count(name: str) -> int | None:
    """The number of processes environment variable `name` asks for (a positive integer); None when it is unset or
    empty."""
    given = os.environ.get(name, "").strip()
    if not given:
        return None
    if not given.isdigit() or int(given) < 1:
        raise InputError(f"{name}={given!r}: not a number of processes; give a positive integer or unset it")
    return int(given)


def choice(name: str, allowed: tuple[str, ...]) -> str:
    """The value environment variable `name` gives, one of `allowed` (lower-cased); "" when it is unset or empty."""
    given = os.environ.get(name, "").strip()
    if given and given.lower() not in allowed:
        raise InputError(f"{name}={given!r}: not one of {', '.join(allowed)}; give one of them or unset it")
    return given.lower()
