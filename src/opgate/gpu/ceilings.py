"""Measured ceilings per device, cached so `opgate verify` can judge timings against what this very card
delivers (the doctor's HBM probe writes them) rather than only against the datasheet.

Cache: $OPGATE_CACHE_DIR/ceilings.json (default ~/.cache/opgate), keyed by the GPU model name (one reading per model on a host).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class MeasuredCeilings:
    gpu_name: str
    hbm_read_bytes_per_s: float
    measured_at: float  # epoch seconds
    source: str  # which probe measured it


def cache_path() -> Path:
    root = Path(os.environ.get("OPGATE_CACHE_DIR", Path.home() / ".cache" / "opgate"))
    return root / "ceilings.json"


def _load() -> dict[str, dict]:
    try:
        return json.loads(cache_path().read_text())
    except (OSError, ValueError):
        return {}


def save_ceilings(key: str, ceilings: MeasuredCeilings) -> None:
    """Record this device's measured ceilings (best effort: a read-only home only loses the cache)."""
    from opgate.reporting.atomic import write_atomically

    data = _load()
    data[key] = asdict(ceilings)
    try:
        cache_path().parent.mkdir(parents=True, exist_ok=True)
        write_atomically(cache_path(), json.dumps(data, indent=2))
    except Exception:  # noqa: BLE001 - the cache is an optimisation, never a reason to fail a probe
        pass


def load_ceilings(key: str, max_age_s: float = 30 * 24 * 3600) -> MeasuredCeilings | None:
    row = _load().get(key)
    if not row:
        return None
    try:
        ceilings = MeasuredCeilings(**row)
    except TypeError:
        return None
    return ceilings if time.time() - ceilings.measured_at <= max_age_s else None
