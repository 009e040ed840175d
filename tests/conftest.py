from __future__ import annotations

import os
import shutil

import pytest
from opgate_testing import child_pythonpath, gpu_available


# The cache folders this process made (xdist workers inherit the controller's, so only the maker removes it): a
# session that leaves ~9 MB in /tmp per run fills a CI disk that runs the suite many times.
_CREATED_CACHE_DIRS: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    # opgate verify's disk cache of bound terms (verify/bounds_cache.py): one fresh folder per test session, so no
    # test reads what an earlier session (or the developer's own runs) left, and children inherit it
    if "OPGATE_CACHE_DIR" not in os.environ:
        import tempfile

        os.environ["OPGATE_CACHE_DIR"] = tempfile.mkdtemp(prefix="opgate-test-cache-")
        _CREATED_CACHE_DIRS.append(os.environ["OPGATE_CACHE_DIR"])
    # ... and no stored verdicts: a test that runs a spec another test ran must see it judged
    # (tests/verify/test_verdict_cache.py turns the verdict cache on where it is the subject)
    os.environ.setdefault("OPGATE_VERDICT_CACHE", "0")


def pytest_unconfigure(config: pytest.Config) -> None:
    while _CREATED_CACHE_DIRS:
        shutil.rmtree(_CREATED_CACHE_DIRS.pop(), ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    ok, reason = gpu_available()
    if ok:
        return
    skip = pytest.mark.skip(reason=f"GPU test: {reason}")
    for item in items:
        if item.get_closest_marker("gpu") is not None:  # the marker, not a keyword: tests/gpu/ holds CPU tests too
            item.add_marker(skip)


@pytest.fixture
def opgate_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = child_pythonpath()
    return env
