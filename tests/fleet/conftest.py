from __future__ import annotations

import os
from pathlib import Path

import pytest
from fleet_testing import HERE, planted_dist
from opgate_testing import child_pythonpath


@pytest.fixture
def fleet_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(planted_dist(tmp_path / "plugins")), str(HERE), child_pythonpath()])
    return env
