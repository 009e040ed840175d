"""Paths shared by the verify tests (importable because pytest puts this folder on sys.path)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
DATA = ROOT / "tests" / "data" / "verify"


def gpu_reason() -> str | None:
    """Why GPU tests cannot run here, asking the device rather than the platform."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device visible to torch"
    return None
