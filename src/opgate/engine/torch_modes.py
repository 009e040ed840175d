"""Process-wide torch modes opgate sets and restores (verify's NaN-poisoning; a warm worker's reset)."""

from __future__ import annotations

from typing import Any


def set_deterministic(torch: Any, mode: bool, warn_only: bool = False) -> None:
    """torch.use_deterministic_algorithms without its price: the public call imports torch._inductor (5 s on
    the H200 host, per worker) to set inductor's flag too. Until inductor is loaded only the eager flag matters;
    once it is (torch.compile), the public call is free and sets both."""
    import sys

    if "torch._inductor.config" in sys.modules or not hasattr(torch._C, "_set_deterministic_algorithms"):
        torch.use_deterministic_algorithms(mode, warn_only=warn_only)
    else:
        torch._C._set_deterministic_algorithms(mode, warn_only=warn_only)
