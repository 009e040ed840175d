"""Helpers of the fleet tests (a module of its own: `conftest` names clash across folders)."""

from __future__ import annotations

from pathlib import Path


HERE = Path(__file__).resolve().parent


def planted_dist(folder: Path) -> Path:
    """A third-party plugin distribution registering the fleet's planted checks."""
    dist = folder / "opgate_fleet_planted-0.1.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: opgate-fleet-planted\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[opgate.checks]\n"
        "doctor.planted_bandwidth = planted_fleet_checks:PlantedBandwidthCheck\n"
        "doctor.planted_flapping = planted_fleet_checks:FlappingCheck\n"
    )
    return folder


