"""Facts about CUDA and GPUs live in TOML tables here, each row citing its public source.

Table layout::

    [sources]                      # short keys for long citations
    relnotes = "https://... Table 3"

    [[row]]
    cuda = "13.0"
    source = "relnotes"            # a key of [sources], or a citation written out

`load_table` resolves every row's `source` to its full citation and refuses a row without one.
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any

try:
    import tomllib  # type: ignore[import-not-found]
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]


class DataTableError(Exception):
    """A shipped data table is malformed: an opgate bug, caught by the test suite."""


@functools.lru_cache(maxsize=None)
def load_table(name: str) -> tuple[dict[str, Any], ...]:
    """Rows of `data/<name>.toml`, each with `source` resolved to its citation."""
    text = resources.files("opgate.data").joinpath(f"{name}.toml").read_text(encoding="utf-8")
    doc = tomllib.loads(text)
    sources: dict[str, str] = doc.get("sources", {})
    rows = []
    for index, row in enumerate(doc.get("row", [])):
        source = row.get("source")
        if not source:
            raise DataTableError(f"data/{name}.toml row {index} has no source")
        row = dict(row)
        row["source"] = sources.get(source, source)
        rows.append(row)
    return tuple(rows)


def table_names() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files("opgate.data").iterdir() if p.name.endswith(".toml"))
