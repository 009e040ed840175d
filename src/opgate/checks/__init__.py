"""The check model: one small class per check, registered through the `opgate.checks` entry points."""

from opgate.checks.base import Check, CheckContext

__all__ = ["Check", "CheckContext"]
