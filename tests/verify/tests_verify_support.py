"""Paths shared by the verify tests (importable because pytest puts this folder on sys.path)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
DATA = ROOT / "tests" / "data" / "verify"
