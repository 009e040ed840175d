"""Which processes of given names run on this host, read from /proc (no psutil)."""

from __future__ import annotations

from pathlib import Path

MPS_PROCESS_NAMES = ("nvidia-cuda-mps-control", "nvidia-cuda-mps-server")


def find_processes(names: tuple[str, ...], proc: Path = Path("/proc")) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for entry in proc.iterdir() if proc.is_dir() else []:
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        if comm in names:
            found.setdefault(comm, []).append(int(entry.name))
    return found
