"""opgate's work folders record their owner, and a new one sweeps the folders whose owner is gone (a run killed with
SIGKILL cannot remove its own: engine/workdirs.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from opgate.engine.workdirs import OWNER_FILE, owned_workdir, owner_record, sweep_orphans


def _folder(root: Path, name: str, owner: dict | None) -> Path:
    folder = root / name
    folder.mkdir()
    if owner is not None:
        (folder / OWNER_FILE).write_text(json.dumps(owner))
    return folder


def test_a_new_work_folder_sweeps_only_the_folders_whose_owner_is_gone(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import json, sys; sys.path[:0] = sys.argv[1:]; "
                           "from opgate.engine.workdirs import owner_record; print(json.dumps(owner_record()))",
                           *sys.path], capture_output=True, text=True, timeout=60, check=True)
    gone = json.loads(dead.stdout)  # that process has exited: its id names nobody, or somebody who started later
    mine = owner_record()
    killed = _folder(tmp_path, "opgate-run-killed", gone)
    reused = _folder(tmp_path, "opgate-run-reused", {**mine, "start_ticks": (mine["start_ticks"] or 0) + 1})
    alive = _folder(tmp_path, "opgate-run-alive", mine)
    elsewhere = _folder(tmp_path, "opgate-run-other-container", {**gone, "pid_namespace": "pid:[1]"})
    unowned = _folder(tmp_path, "opgate-run-no-owner", None)
    other_prefix = _folder(tmp_path, "opgate-verify-killed", gone)
    with owned_workdir("opgate-run-", root=tmp_path) as folder:
        assert json.loads((folder / OWNER_FILE).read_text())["pid"] == os.getpid()
        assert not killed.exists() and not reused.exists()  # its id reused by a process that started at another time
        assert alive.exists() and elsewhere.exists() and unowned.exists() and other_prefix.exists()
    assert not folder.exists()
    assert sweep_orphans("opgate-verify-", root=tmp_path) == [other_prefix]
    assert sweep_orphans("opgate-run-", root=tmp_path / "missing") == []  # an unreadable root: nothing, no error


def test_the_process_age_counts_from_this_process_start() -> None:
    import subprocess
    import sys

    from opgate.engine.workdirs import process_age_s

    mine = process_age_s()
    assert mine is not None and mine > 0
    # a fresh interpreter that sleeps 0.5 s first is at least that old, and younger than this test's process
    code = "import time; time.sleep(0.5); from opgate.engine.workdirs import process_age_s; print(process_age_s())"
    child = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert 0.45 <= child < 30 and child < process_age_s()
