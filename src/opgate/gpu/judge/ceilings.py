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
    # The doctor's L2 probe adds the L2 read bandwidth of the same card (opgate explain's roofline uses it).
    l2_read_bytes_per_s: float | None = None
    l2_source: str = ""


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
    from opgate.engine.atomic import write_atomically

    data = _load()
    previous = data.get(key) or {}
    row = asdict(ceilings)
    if row.get("l2_read_bytes_per_s") is None and previous.get("l2_read_bytes_per_s"):
        row["l2_read_bytes_per_s"], row["l2_source"] = previous["l2_read_bytes_per_s"], previous.get("l2_source", "")
    data[key] = row
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


def save_l2_ceiling(key: str, l2_read_bytes_per_s: float, source: str, hbm_read_bytes_per_s: float) -> None:
    """Add the measured L2 read bandwidth to this device's row (the HBM figure of the same run when the row
    has none yet)."""
    row = _load().get(key) or {}
    save_ceilings(key, MeasuredCeilings(
        gpu_name=key, hbm_read_bytes_per_s=float(row.get("hbm_read_bytes_per_s") or hbm_read_bytes_per_s),
        measured_at=float(row.get("measured_at") or time.time()), source=str(row.get("source") or source),
        l2_read_bytes_per_s=l2_read_bytes_per_s, l2_source=source))
