"""pytest plugin (entry point ``pytest11: opgate``): the `opgate_spec` marker and the `opgate_case` /
`opgate_verify` fixtures. Nothing is imported or run unless a test asks for `opgate_case`."""

from __future__ import annotations

from typing import Any, Callable

import pytest

MARKER = "opgate_spec"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARKER}(spec_file, impl=None, dtype=None, op=None, budget='quick', "
                            "seed=0): parametrize `opgate_case` per implementation x dtype of an opgate spec file "
                            "(relative paths are relative to the test file)")


def _marker_cases(metafunc: pytest.Metafunc) -> list[Any]:
    from pathlib import Path

    from opgate.testing.cases import cases_for_spec

    marker = metafunc.definition.get_closest_marker(MARKER)
    if marker is None:
        raise pytest.UsageError(f"{metafunc.definition.nodeid} uses opgate_case but has no "
                                f"@pytest.mark.{MARKER}(spec_file) marker; add one naming the spec file")
    spec = marker.args[0] if marker.args else marker.kwargs.get("spec_file")
    if not spec:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: @pytest.mark.{MARKER} needs the spec file path")
    path = Path(spec)
    if not path.is_absolute():
        path = Path(str(metafunc.definition.path)).parent / path

    def names(key: str) -> tuple[str, ...]:
        value = marker.kwargs.get(key)
        return () if value is None else ((value,) if isinstance(value, str) else tuple(value))

    return cases_for_spec(path, impls=names("impl"), dtypes=names("dtype"), ops=names("op"),
                          budget=marker.kwargs.get("budget", "quick"), seed=int(marker.kwargs.get("seed", 0)))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "opgate_case" not in metafunc.fixturenames:
        return
    cases = _marker_cases(metafunc)
    metafunc.parametrize("opgate_case", cases, ids=[c.test_id for c in cases])


@pytest.fixture(scope="session")
def _opgate_report_cache() -> Any:
    from opgate.testing.cases import ReportCache

    return ReportCache()


@pytest.fixture
def opgate_verify(request: pytest.FixtureRequest, _opgate_report_cache: Any) -> Callable[[Any], Any]:
    """Verify an `opgate_case`: fails the test with opgate's verdict, smallest case and replay command; skips
    with opgate's reason when opgate skips (e.g. Triton without a GPU or interpreter)."""
    from opgate.model.results import Outcome
    from opgate.testing.cases import verify_case

    def run(case: Any) -> Any:
        siblings = [c.impl for c in _siblings(request, case)]
        result = verify_case(case, _opgate_report_cache, siblings)
        request.node.user_properties.append(("opgate", f"{result.outcome.value}: {result.reason}"))
        if result.outcome is Outcome.SKIPPED:
            pytest.skip(f"opgate: {result.reason}")
        return result

    return run


def _siblings(request: pytest.FixtureRequest, case: Any) -> list[Any]:
    """The collected cases of the same operator x dtype, so one opgate run (one calibration) serves them all."""
    found = []
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        other = callspec.params.get("opgate_case") if callspec else None
        if other is not None and (other.spec_file, other.op, other.dtype, other.budget) == \
                (case.spec_file, case.op, case.dtype, case.budget):
            found.append(other)
    return found or [case]
