from __future__ import annotations

import pytest

from opgate.data import load_table, table_names


@pytest.mark.parametrize("name", table_names())
def test_every_row_cites_a_source(name: str) -> None:
    rows = load_table(name)
    assert rows, f"{name} is empty"
    for row in rows:
        assert row["source"] and len(row["source"]) > 15, (name, row)
        assert "http" in row["source"] or "docs" in row["source"] or "release notes" in row["source"].lower() \
            or "datasheet" in row["source"].lower(), (name, row)


def test_required_tables_exist() -> None:
    assert {"cuda_toolkit_drivers", "ptx_isa", "cuda_minor_version_compat", "cuda_arch_targets", "gpus"} <= set(
        table_names())
