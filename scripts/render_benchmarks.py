"""Render docs/benchmarks.md from the recorded results in benchmarks/results/*.json (one record per subject).

    python scripts/render_benchmarks.py            # write docs/benchmarks.md
    python scripts/render_benchmarks.py --check    # exit 1 if docs/benchmarks.md differs from what would be written

A record holds one subject's most recent measured figures: its title, the command(s) that measured them, the
machine, the date, the software versions where known, a short "what it shows" and one table. The document is only
ever written by this script, so an edit goes into the record; the dated diary of runs up to 2026-12-02 is in the
document's git history. Exit codes: 0 done, 1 (--check) the document is out of date, 2 a record is malformed (one
line on stderr naming the file and the problem).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "benchmarks" / "results"
DOCUMENT = ROOT / "docs" / "benchmarks.md"
SCHEMA = 1

# The document's parts, in order: a record names its group by key.
GROUPS = {
    "doctor": "`opgate doctor` and the GPU probes",
    "inspect": "`opgate inspect`, `analyze` and the occupancy calculator",
    "verify-time": "`opgate verify`: wall time",
    "verify-gpu": "`opgate verify`: the GPU stages",
    "verify-truth": "`opgate verify`: verdicts against labelled corpora",
    "plan": "`opgate plan`",
    "fleet": "`opgate fleet`",
    "tests": "The test suites",
}
REQUIRED = ("schema", "group", "title", "date", "machine", "commands", "shows", "table")
OPTIONAL = ("software",)


class RecordError(Exception):
    """A record that cannot be rendered: the file and what is wrong with it."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{_display(path)}: {problem}")


@dataclass(frozen=True)
class BenchmarkRecord:
    """One subject's current figures, as recorded in benchmarks/results/<name>.json."""

    name: str
    group: str
    title: str
    date: str
    machine: str
    commands: tuple[str, ...]
    software: tuple[tuple[str, str], ...]
    shows: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def _text(path: Path, value: object, key: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise RecordError(path, f"'{key}' must be a non-empty string, got {value!r}")
    if "\n" in value:
        raise RecordError(path, f"'{key}' must be one line (no newline): {value[:60]!r}")
    return value


def _cells(path: Path, value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise RecordError(path, f"{where} must be a non-empty list of strings, got {value!r}")
    for cell in value:
        if not isinstance(cell, str) or "\n" in cell:
            raise RecordError(path, f"{where}: every cell must be a one-line string, got {cell!r}")
    return tuple(value)


def parse_record(path: Path) -> BenchmarkRecord:
    """The record in `path`, validated: declared keys only, a known group, an ISO date, rows as wide as the columns."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise RecordError(path, f"not valid JSON: {error}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise RecordError(path, f"cannot be read: {error}") from None
    if not isinstance(raw, dict):
        raise RecordError(path, f"a record is a JSON object, got {type(raw).__name__}")
    missing = [key for key in REQUIRED if key not in raw]
    if missing:
        raise RecordError(path, f"missing key(s) {', '.join(missing)} (required: {', '.join(REQUIRED)})")
    unknown = sorted(set(raw) - set(REQUIRED) - set(OPTIONAL))
    if unknown:
        raise RecordError(path, f"unknown key(s) {', '.join(unknown)} (allowed: {', '.join(REQUIRED + OPTIONAL)})")
    if raw["schema"] != SCHEMA:
        raise RecordError(path, f"schema {raw['schema']!r} is not {SCHEMA}, the version this script renders")
    if raw["group"] not in GROUPS:
        raise RecordError(path, f"group {raw['group']!r} is not one of {', '.join(GROUPS)}")
    date = _text(path, raw["date"], "date")
    try:
        datetime.date.fromisoformat(date)
    except ValueError:
        raise RecordError(path, f"date {date!r} is not an ISO date (YYYY-MM-DD)") from None
    commands = _cells(path, raw["commands"], "'commands'")
    software = raw.get("software", {})
    if not isinstance(software, dict) or not all(isinstance(v, str) and v for v in software.values()):
        raise RecordError(path, f"'software' must map a name to a version string, got {software!r}")
    table = raw["table"]
    if not isinstance(table, dict) or set(table) != {"columns", "rows"}:
        raise RecordError(path, "'table' must be an object with exactly 'columns' and 'rows'")
    columns = _cells(path, table["columns"], "table columns")
    if not isinstance(table["rows"], list) or not table["rows"]:
        raise RecordError(path, "table rows must be a non-empty list of rows")
    rows = []
    for number, row in enumerate(table["rows"], start=1):
        cells = _cells(path, row, f"table row {number}")
        if len(cells) != len(columns):
            raise RecordError(path, f"table row {number} has {len(cells)} cells for {len(columns)} columns")
        rows.append(cells)
    return BenchmarkRecord(name=path.stem, group=raw["group"], title=_text(path, raw["title"], "title"), date=date,
                           machine=_text(path, raw["machine"], "machine"), commands=commands,
                           software=tuple(software.items()), shows=_text(path, raw["shows"], "shows"),
                           columns=columns, rows=tuple(rows))


def load_records(results_dir: Path) -> list[BenchmarkRecord]:
    """Every record under `results_dir`, in the document's order: by group, then by title."""
    paths = sorted(results_dir.glob("*.json"))
    if not paths:
        raise RecordError(results_dir, "no *.json records found")
    records = [parse_record(path) for path in paths]
    seen: dict[str, str] = {}
    for record in records:
        if record.title in seen:
            raise RecordError(results_dir / f"{record.name}.json",
                              f"title {record.title!r} is also the title of {seen[record.title]}.json")
        seen[record.title] = record.name
    order = list(GROUPS)
    return sorted(records, key=lambda r: (order.index(r.group), r.title.lower()))


def anchor(title: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^a-z0-9 _-]", "", title.lower()).replace(" ", "-")


def _row(cells: tuple[str, ...]) -> str:
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def render(records: list[BenchmarkRecord]) -> str:
    """The whole document for `records` (already in order)."""
    lines = [
        "# Benchmarks: current results",
        "",
        "Generated by `scripts/render_benchmarks.py` from the records in `benchmarks/results/` (one JSON file per "
        "subject); do not edit it by hand. To change a figure, edit its record and regenerate with "
        "`python scripts/render_benchmarks.py` (`--check` tells whether this file is current). Each section holds "
        "the most recent figures of its subject, measured by the command shown on the date and machine shown. The "
        "history, including the dated diary of every run up to 2026-12-02, is in git: "
        "`git log -p docs/benchmarks.md`.",
        "",
        "## Contents",
        "",
    ]
    for key, heading in GROUPS.items():
        members = [r for r in records if r.group == key]
        if not members:
            continue
        lines.append(f"- [{heading}](#{anchor(heading)})")
        lines += [f"  - [{r.title}](#{anchor(r.title)}) ({r.date})" for r in members]
    for key, heading in GROUPS.items():
        members = [r for r in records if r.group == key]
        if not members:
            continue
        lines += ["", f"## {heading}"]
        for record in members:
            facts = [f"- Date: {record.date}", f"- Machine: {record.machine}"]
            if record.software:
                facts.append("- Software: " + ", ".join(f"{name} {version}" for name, version in record.software))
            facts.append(f"- Record: `benchmarks/results/{record.name}.json`")
            lines += ["", f"### {record.title}", "", *facts, "", "```bash", *record.commands, "```", "",
                      record.shows, "", _row(record.columns), "|" + "---|" * len(record.columns)]
            lines += [_row(row) for row in record.rows]
    return "\n".join(lines) + "\n"


def write_atomically(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file in the same folder, so a reader never sees half of it."""
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=path.parent, prefix=f".{path.name}.",
                                     suffix=".tmp", delete=False) as handle:
        handle.write(text)
    os.replace(handle.name, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if the document differs from what would be rendered")
    parser.add_argument("--results", type=Path, default=RESULTS_DIR,
                        help=f"folder of the JSON records (default: {_display(RESULTS_DIR)})")
    parser.add_argument("--output", type=Path, default=DOCUMENT,
                        help=f"the document to write or check (default: {_display(DOCUMENT)})")
    args = parser.parse_args(argv)
    try:
        text = render(load_records(args.results))
    except RecordError as error:
        print(f"render_benchmarks: {error}", file=sys.stderr)
        return 2
    current = args.output.read_text(encoding="utf-8") if args.output.is_file() else None
    if args.check:
        if current != text:
            print(f"render_benchmarks: {_display(args.output)} is not what the records in {_display(args.results)} "
                  "render: run python scripts/render_benchmarks.py", file=sys.stderr)
            return 1
        return 0
    if current != text:
        write_atomically(args.output, text)
    print(f"{_display(args.output)}: {len(text.splitlines())} lines from {_display(args.results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
